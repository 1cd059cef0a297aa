"""`kerasrl compare`: one configuration on every installed backend, and where the runs part.

    kerasrl compare dqn --env CartPole-v1 --steps 5000 [--seed 0] [--set name=value ...]

The answer to "it learns on one framework and not on the other": each backend trains the same
configuration from the same seed in its own process (a process holds one Keras backend), recording
its initial weights, the loss of every training round, every action it sent to the environment and
every episode's return. The report names the first round whose loss differs beyond the tolerance,
the first differing action, and the largest weight difference at the start and at the end.

Runs that agree to the first differing action and then drift apart differ by float rounding only
(summation order differs between libraries and CPUs, see docs/reproducibility.md); a difference in
the initial weights or in the first rounds is a real difference in what the backends compute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

DEFAULT_TOLERANCE = 1e-5


@dataclass
class BackendRun:
    """What one backend recorded (numpy arrays from its worker process)."""

    backend: str
    initial_weights: list[np.ndarray]
    final_weights: list[np.ndarray]
    losses: np.ndarray  # (rounds,)
    actions: np.ndarray  # (steps, ...) in the order sent
    returns: np.ndarray  # (episodes,)
    episode_ends: np.ndarray  # (episodes,) the env step (over all envs) at which each one ended
    seconds: float


@dataclass
class Divergence:
    """Where one backend's run parts from the reference backend's."""

    backend: str
    reference: str
    initial_weight_difference: float
    first_loss_difference: int | None  # index of the first round beyond tolerance; None: none
    loss_difference_there: float
    first_action_difference: int | None  # env step of the first differing action; None: none
    final_weight_difference: float
    returns: tuple[float, float]  # mean episode return: this backend, the reference
    rounds_compared: int


@dataclass
class Comparison:
    runs: dict[str, BackendRun]
    divergences: list[Divergence] = field(default_factory=list)
    tolerance: float = DEFAULT_TOLERANCE

    def report(self) -> str:
        lines = []
        for name, run in self.runs.items():
            mean = float(run.returns.mean()) if len(run.returns) else float("nan")
            lines.append(f"{name:<11} {len(run.losses):>6} rounds  {len(run.returns):>5} episodes  "
                         f"mean return {mean:8.2f}  ({run.seconds:.0f} s)")
        for d in self.divergences:
            lines.append(f"\n{d.backend} against {d.reference}:")
            lines.append(f"  initial weights: largest difference {d.initial_weight_difference:.3g}"
                         + ("  (identical)" if d.initial_weight_difference == 0 else
                            "  (NOT the same start: see docs/reproducibility.md)"))
            if d.first_loss_difference is None:
                lines.append(f"  losses: all {d.rounds_compared} rounds within {self.tolerance:g} "
                             f"(relative)")
            else:
                lines.append(f"  losses: first beyond {self.tolerance:g} at round "
                             f"{d.first_loss_difference} of {d.rounds_compared} (relative "
                             f"difference {d.loss_difference_there:.3g})")
            lines.append("  actions: " + ("all the same" if d.first_action_difference is None else
                                          f"first different at env step {d.first_action_difference}"))
            lines.append(f"  final weights: largest difference {d.final_weight_difference:.3g}")
            lines.append(f"  mean episode return: {d.returns[0]:.2f} here, {d.returns[1]:.2f} on "
                         f"{d.reference}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"tolerance": self.tolerance,
                "runs": {n: {"rounds": len(r.losses), "episodes": len(r.returns),
                             "mean_return": float(r.returns.mean()) if len(r.returns) else None,
                             "seconds": r.seconds} for n, r in self.runs.items()},
                "divergences": [d.__dict__ for d in self.divergences]}


def compare(algorithm: str, env_id: str, steps: int, *, seed: int = 0, settings: dict | None = None,
            backends: list[str] | None = None, tolerance: float = DEFAULT_TOLERANCE,
            timeout: float | None = None, env_kwargs: dict | None = None) -> Comparison:
    """Train `algorithm` on `env_id` for `steps` on each backend; compare against the first.
    `env_kwargs`: keywords of the env, gymnasium.make(env_id, **env_kwargs)."""
    from kerasrl import backend

    installed = backend.installed_backends()
    backends = list(backends or installed)
    missing = [b for b in backends if b not in installed]
    if missing:
        raise ValueError(f"Backend(s) {', '.join(missing)} not installed (installed: "
                         f"{', '.join(installed)}). pip install 'kerasrl[{missing[0]}]'.")
    if len(backends) < 2:
        raise ValueError(f"compare needs two backends or more; installed: {', '.join(installed)}. "
                         f"pip install 'kerasrl[all]' for JAX, TensorFlow and PyTorch.")
    import kerasrl.envs  # noqa: F401  (registers kerasrl/Snake-v0)
    from kerasrl.envs.vector import check_env_kwargs

    # Mistakes fail here, once, not in a worker process per backend.
    agent_class(algorithm).config_class.from_dict({**(settings or {}), "seed": seed})
    check_env_kwargs(env_id, dict(env_kwargs or {}))
    job = {"algorithm": algorithm, "env": env_id, "env_kwargs": dict(env_kwargs or {}),
           "steps": int(steps), "seed": int(seed), "settings": dict(settings or {})}
    runs = {}
    with tempfile.TemporaryDirectory(prefix="kerasrl-compare-") as folder:
        # The backends' processes run side by side (each starts its framework and compiles: on
        # one core after another, most of a short comparison's time); each one's output goes to
        # a file, so that none waits on a full pipe.
        started = {}
        for name in backends:
            log = open(Path(folder) / f"{name}.log", "w+")  # noqa: SIM115 - closed below
            env = {**os.environ, "KERAS_BACKEND": name}
            started[name] = log, subprocess.Popen(
                [sys.executable, "-m", "kerasrl.compare", json.dumps(job),
                 str(Path(folder) / f"{name}.npz")], env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for name, (log, proc) in started.items():
                left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                if proc.wait(timeout=left) != 0:
                    log.seek(0)
                    raise RuntimeError(f"The {name} run failed:\n{log.read()[-4000:]}")
                runs[name] = _load_run(name, Path(folder) / f"{name}.npz")
        finally:
            for log, proc in started.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                log.close()
    reference, *others = backends
    comparison = Comparison(runs=runs, tolerance=tolerance)
    comparison.divergences = [divergence(runs[o], runs[reference], tolerance) for o in others]
    return comparison


def divergence(run: BackendRun, reference: BackendRun, tolerance: float) -> Divergence:
    """Where `run` parts from `reference`."""
    n = min(len(run.losses), len(reference.losses))
    relative = (np.abs(run.losses[:n] - reference.losses[:n])
                / (np.abs(reference.losses[:n]) + 1e-6))
    beyond = np.flatnonzero(~(relative <= tolerance))  # NaN counts as beyond
    m = min(len(run.actions), len(reference.actions))
    differing = np.flatnonzero(np.any((run.actions[:m] != reference.actions[:m])
                                      .reshape(m, -1), axis=1))
    if len(run.actions) != len(reference.actions) and not differing.size:
        differing = np.array([m])
    mean = lambda r: float(r.mean()) if len(r) else float("nan")  # noqa: E731
    return Divergence(
        backend=run.backend, reference=reference.backend,
        initial_weight_difference=_largest_difference(run.initial_weights, reference.initial_weights),
        first_loss_difference=int(beyond[0]) if beyond.size else None,
        loss_difference_there=float(relative[beyond[0]]) if beyond.size else 0.0,
        first_action_difference=int(differing[0]) if differing.size else None,
        final_weight_difference=_largest_difference(run.final_weights, reference.final_weights),
        returns=(mean(run.returns), mean(reference.returns)), rounds_compared=n)


def _largest_difference(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return float("inf")
    return max((float(np.max(np.abs(x - y))) for x, y in zip(a, b) if x.size), default=0.0)


def _load_run(name: str, path: Path) -> BackendRun:
    with np.load(path, allow_pickle=False) as data:
        def numbered(prefix):
            keys = sorted((k for k in data.files if k.startswith(prefix)),
                          key=lambda k: int(k[len(prefix):]))
            return [data[k] for k in keys]

        return BackendRun(backend=name, initial_weights=numbered("initial"),
                          final_weights=numbered("final"), losses=data["losses"],
                          actions=data["actions"], returns=data["returns"],
                          episode_ends=data["episode_ends"],
                          seconds=float(data["seconds"]))


# -- the worker: one backend's run, in its own process ---------------------------------------------
def agent_class(algorithm: str) -> type:
    """The agent class registered under `algorithm` ('dqn', 'ppo', 'sarsa', ...)."""
    from kerasrl import registry

    if algorithm not in registry.AGENTS:
        raise ValueError(f"Unknown algorithm {algorithm!r}; known: {', '.join(sorted(registry.AGENTS))}.")
    return registry.agent_class(algorithm)


def _model_weights(agent) -> list[np.ndarray]:
    import keras

    from kerasrl.agents.state_arrays import variable_values

    return variable_values([w for model in agent.policy.models().values() for w in model.weights
                            if "float" in keras.backend.standardize_dtype(w.dtype)])


def run_worker(job: dict, out: str) -> None:
    import time

    import gymnasium as gym

    sent: list[np.ndarray] = []

    class RecordActions(gym.Wrapper):
        def step(self, action):
            sent.append(np.array(action))
            return super().step(action)

    settings = {**job["settings"], "vectorization": "sync"}  # one process: actions in order
    agent = agent_class(job["algorithm"])(lambda: RecordActions(gym.make(job["env"], **job["env_kwargs"])),
                                           seed=job["seed"], **settings)
    initial = _model_weights(agent)
    sent.clear()  # the training run's actions only (not those of the env check at creation)
    start = time.perf_counter()
    history = agent.fit(job["steps"], progress=False)
    seconds = time.perf_counter() - start
    arrays = {f"initial{i}": w for i, w in enumerate(initial)}
    arrays.update({f"final{i}": w for i, w in enumerate(_model_weights(agent))})
    np.savez(out, losses=history.losses, returns=history.episode_returns,
             episode_ends=np.array([e["step"] for e in history.episodes], dtype=np.int64),
             actions=np.array(sent) if sent else np.zeros((0,)), seconds=seconds, **arrays)
    agent.close()


if __name__ == "__main__":
    run_worker(json.loads(sys.argv[1]), sys.argv[2])
