"""Peer benchmarks: Stable-Baselines3 (PyTorch) and SBX (JAX) on CartPole-v1.

Trains SB3/SBX DQN and PPO with RL-Baselines3-Zoo style hyperparameters and
measures, for one seed:

* ``train_wall_s``      -- wall time of ``model.learn`` minus the time spent in
                           the periodic evaluations (includes JIT compilation
                           for SBX and the learning_starts warm-up);
* ``steps_per_s``       -- total env steps / ``train_wall_s`` (evaluation
                           excluded);
* ``time_to_475_s``     -- training clock (evaluation time subtracted) at the
                           first periodic deterministic evaluation (20 episodes,
                           every ``eval_freq`` = 10k env steps) whose mean
                           return is >= 475; ``None`` if never reached;
* ``steps_to_475``      -- env steps at that evaluation;
* ``final_eval_mean``   -- deterministic 20-episode mean after training.

Install (into the main venv; nothing pinned changes, checked with --dry-run)::

    .venv/bin/pip install -c constraints.txt "stable-baselines3>=2.9" "sbx-rl>=0.28"
    # tested: stable-baselines3 2.9.2, sbx-rl 0.28.0 (+ flax 0.12.8, optax 0.2.8,
    # tfp-nightly; sbx pulls in tensorflow via tfp -- threads pinned too)
    # or: .venv/bin/pip install -c constraints.txt -e ".[bench]"

CLI::

    python benchmarks/peers.py --lib sb3|sbx --algo dqn|ppo --setting zoo|per-step \
        --seed 0 [--steps N] [--json OUT]

Threads are pinned to 1 for torch / JAX(XLA) / TensorFlow / BLAS before any of
these libraries is imported (the env vars are set at import of this module, so
import it before torch/jax if used as a library).
"""

from __future__ import annotations

import os

# --- pin threads FIRST, before torch / jax / tensorflow can be imported -------
_THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "JAX_PLATFORMS": "cpu",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}
for _k, _v in _THREAD_ENV.items():
    os.environ.setdefault(_k, _v)

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

ENV_ID = "CartPole-v1"
SOLVED = 475.0
EVAL_EPISODES = 20
EVAL_FREQ = 10_000


def pin_threads() -> None:
    """Pin intra/inter-op threads of every already-imported framework to 1."""
    try:
        import torch

        torch.set_num_threads(1)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set / parallel work already started
            pass
    except ImportError:
        pass
    if "tensorflow" in sys.modules:  # only if something pulled it in
        tf = sys.modules["tensorflow"]
        try:
            tf.config.threading.set_intra_op_parallelism_threads(1)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except (RuntimeError, AttributeError):
            pass


# ----------------------------------------------------------------------------
# Hyperparameters (RL Baselines3 Zoo, hyperparams/{dqn,ppo}.yml, CartPole-v1)
# ----------------------------------------------------------------------------


def linear_schedule(initial: float) -> Callable[[float], float]:
    """Zoo ``lin_<x>``: progress_remaining goes 1 -> 0."""

    def f(progress_remaining: float) -> float:
        return progress_remaining * initial

    return f


def dqn_settings(setting: str) -> dict[str, Any]:
    base = dict(
        learning_rate=2.3e-3,
        batch_size=64,
        buffer_size=100_000,
        learning_starts=1000,
        gamma=0.99,
        target_update_interval=10,
        train_freq=256,
        gradient_steps=128,
        exploration_fraction=0.16,
        exploration_final_eps=0.04,
        net_arch=[256, 256],
        total_timesteps=50_000,
        n_envs=1,
    )
    if setting == "zoo":
        return base
    if setting == "per-step":
        base.update(train_freq=1, gradient_steps=1, batch_size=32, net_arch=[64, 64])
        return base
    raise ValueError(f"unknown DQN setting {setting!r}")


def ppo_settings(setting: str, clip: str = "linear") -> dict[str, Any]:
    if setting != "zoo":
        raise ValueError(f"unknown PPO setting {setting!r} (only 'zoo')")
    return dict(
        n_envs=8,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=1e-3,  # linearly decayed to 0 (zoo lin_0.001)
        clip_range=0.2,  # zoo uses lin_0.2; --ppo-clip constant keeps it at 0.2
        clip_schedule=clip,
        total_timesteps=100_000,
    )


# ----------------------------------------------------------------------------
# Evaluation
# ----------------------------------------------------------------------------


def evaluate(model, n_episodes: int = EVAL_EPISODES, seed: int = 10_000) -> tuple[float, float]:
    """Deterministic evaluation on a fresh single CartPole env; (mean, std)."""
    import gymnasium as gym

    env = gym.make(ENV_ID)
    returns = []
    for ep in range(n_episodes):
        obs, _ = env.reset(seed=seed + ep)
        done = False
        total = 0.0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, r, term, trunc, _ = env.step(int(action))
            total += float(r)
            done = term or trunc
        returns.append(total)
    env.close()
    return float(np.mean(returns)), float(np.std(returns))


def make_eval_callback(eval_freq: int, n_episodes: int, eval_seed: int):
    from stable_baselines3.common.callbacks import BaseCallback

    class TimedEvalCallback(BaseCallback):
        """Evaluates every ``eval_freq`` env steps; keeps eval time off the clock."""

        def __init__(self):
            super().__init__(verbose=0)
            self.t0 = None
            self.eval_time = 0.0
            self.eval_cpu = 0.0
            self.next_eval = eval_freq
            self.history: list[dict[str, Any]] = []
            self.time_to_solved = None
            self.steps_to_solved = None

        def _on_training_start(self) -> None:
            self.t0 = time.perf_counter()

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                while self.next_eval <= self.num_timesteps:
                    self.next_eval += eval_freq
                te, tc = time.perf_counter(), time.process_time()
                train_clock = te - self.t0 - self.eval_time
                mean, std = evaluate(self.model, n_episodes, seed=eval_seed)
                self.eval_time += time.perf_counter() - te
                self.eval_cpu += time.process_time() - tc
                self.history.append(
                    dict(steps=int(self.num_timesteps), train_clock_s=round(train_clock, 3),
                         mean=mean, std=std)
                )
                if self.time_to_solved is None and mean >= SOLVED:
                    self.time_to_solved = train_clock
                    self.steps_to_solved = int(self.num_timesteps)
            return True

    return TimedEvalCallback()


# ----------------------------------------------------------------------------
# Model construction
# ----------------------------------------------------------------------------


def _import_lib(lib: str):
    if lib == "sb3":
        import stable_baselines3 as mod
        from stable_baselines3 import DQN, PPO
    elif lib == "sbx":
        import sbx as mod
        from sbx import DQN, PPO
    else:
        raise ValueError(f"unknown lib {lib!r}")
    pin_threads()
    return mod, DQN, PPO


def build_dqn(lib: str, hp: dict[str, Any], seed: int):
    _, DQN, _ = _import_lib(lib)
    import gymnasium as gym

    env = gym.make(ENV_ID)
    kwargs = dict(
        learning_rate=hp["learning_rate"],
        buffer_size=hp["buffer_size"],
        learning_starts=hp["learning_starts"],
        batch_size=hp["batch_size"],
        gamma=hp["gamma"],
        target_update_interval=hp["target_update_interval"],
        train_freq=hp["train_freq"],
        gradient_steps=hp["gradient_steps"],
        exploration_fraction=hp["exploration_fraction"],
        exploration_final_eps=hp["exploration_final_eps"],
        policy_kwargs=dict(net_arch=list(hp["net_arch"])),
        seed=seed,
        verbose=0,
    )
    if lib == "sb3":
        kwargs["device"] = "cpu"
    return DQN("MlpPolicy", env, **kwargs)


def build_ppo(lib: str, hp: dict[str, Any], seed: int):
    _, _, PPO = _import_lib(lib)
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env(ENV_ID, n_envs=hp["n_envs"], seed=seed)
    clip = (
        linear_schedule(hp["clip_range"]) if hp["clip_schedule"] == "linear" else hp["clip_range"]
    )
    kwargs = dict(
        n_steps=hp["n_steps"],
        batch_size=hp["batch_size"],
        gae_lambda=hp["gae_lambda"],
        gamma=hp["gamma"],
        n_epochs=hp["n_epochs"],
        ent_coef=hp["ent_coef"],
        learning_rate=linear_schedule(hp["learning_rate"]),
        clip_range=clip,
        seed=seed,
        verbose=0,
    )
    if lib == "sb3":
        kwargs["device"] = "cpu"
    return PPO("MlpPolicy", env, **kwargs)


# ----------------------------------------------------------------------------
# Runner
# ----------------------------------------------------------------------------


def run(
    lib: str,
    algo: str,
    setting: str = "zoo",
    seed: int = 0,
    steps: int | None = None,
    eval_freq: int = EVAL_FREQ,
    n_eval_episodes: int = EVAL_EPISODES,
    ppo_clip: str = "linear",
) -> dict[str, Any]:
    """Train one peer agent and return the measurements as a dict."""
    pin_threads()
    if algo == "dqn":
        hp = dqn_settings(setting)
    elif algo == "ppo":
        hp = ppo_settings(setting, clip=ppo_clip)
    else:
        raise ValueError(f"unknown algo {algo!r}")
    if steps is not None:
        hp["total_timesteps"] = int(steps)
    total = hp["total_timesteps"]

    t_setup = time.perf_counter()
    model = build_dqn(lib, hp, seed) if algo == "dqn" else build_ppo(lib, hp, seed)
    setup_s = time.perf_counter() - t_setup

    cb = make_eval_callback(eval_freq, n_eval_episodes, eval_seed=10_000 + seed)
    load_before = os.getloadavg()
    t0, c0 = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=total, callback=cb)
    wall = time.perf_counter() - t0
    train_wall = wall - cb.eval_time
    train_cpu = time.process_time() - c0 - cb.eval_cpu
    load_after = os.getloadavg()

    te = time.perf_counter()
    final_mean, final_std = evaluate(model, n_eval_episodes, seed=20_000 + seed)
    final_eval_s = time.perf_counter() - te

    mod, _, _ = _import_lib(lib)
    import gymnasium
    import torch

    versions = {
        "lib": getattr(mod, "__version__", "?"),
        "torch": torch.__version__,
        "gymnasium": gymnasium.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }
    if lib == "sbx":
        import flax
        import jax

        versions.update(jax=jax.__version__, flax=flax.__version__)
    if lib == "sb3":
        versions["torch_threads"] = torch.get_num_threads()

    steps_done = int(model.num_timesteps)
    return {
        "lib": lib,
        "algo": algo,
        "setting": setting,
        "seed": seed,
        "env": ENV_ID,
        "total_timesteps": steps_done,
        "hyperparams": {k: v for k, v in hp.items()},
        "setup_s": round(setup_s, 3),
        "learn_wall_s": round(wall, 3),
        "eval_time_s": round(cb.eval_time, 3),
        "train_wall_s": round(train_wall, 3),
        "steps_per_s": round(steps_done / train_wall, 1),
        # CPU time of this process (all its threads) for the same span: less
        # sensitive to other processes sharing the cores than the wall figures.
        "train_cpu_s": round(train_cpu, 3),
        "steps_per_cpu_s": round(steps_done / train_cpu, 1),
        "time_to_475_s": None if cb.time_to_solved is None else round(cb.time_to_solved, 3),
        "steps_to_475": cb.steps_to_solved,
        # Same, but also counting the end-of-training evaluation as a checkpoint
        # at (total_timesteps, train_wall_s): periodic evals run on a 10k grid,
        # so a policy that only gets good in the last training round is missed
        # by time_to_475_s.
        "time_to_475_incl_final_s": (
            round(cb.time_to_solved, 3) if cb.time_to_solved is not None
            else (round(train_wall, 3) if final_mean >= SOLVED else None)
        ),
        "final_eval_mean": final_mean,
        "final_eval_std": final_std,
        "final_eval_s": round(final_eval_s, 3),
        "eval_history": cb.history,
        "eval_protocol": {
            "episodes": n_eval_episodes,
            "every_env_steps": eval_freq,
            "deterministic": True,
            "solved_threshold": SOLVED,
        },
        "versions": versions,
        "machine": {
            "cpus": os.cpu_count(),
            "threads_pinned": 1,
            # 1-min load average before/after learn(): > ~1 means other
            # processes competed for the 2 cores and wall figures are inflated.
            "loadavg_1m_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lib", choices=["sb3", "sbx"], required=True)
    p.add_argument("--algo", choices=["dqn", "ppo"], required=True)
    p.add_argument("--setting", choices=["zoo", "per-step"], default="zoo")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=None, help="override total env steps")
    p.add_argument("--eval-freq", type=int, default=EVAL_FREQ)
    p.add_argument("--eval-episodes", type=int, default=EVAL_EPISODES)
    p.add_argument(
        "--ppo-clip",
        choices=["linear", "constant"],
        default="linear",
        help="zoo uses lin_0.2 (default); 'constant' keeps clip_range at 0.2",
    )
    p.add_argument("--json", default=None, help="write the result dict here")
    a = p.parse_args(argv)
    if a.algo == "ppo" and a.setting != "zoo":
        p.error("PPO only has the 'zoo' setting")
    res = run(a.lib, a.algo, a.setting, a.seed, a.steps, a.eval_freq, a.eval_episodes, a.ppo_clip)
    summary = {k: res[k] for k in ("lib", "algo", "setting", "seed", "total_timesteps",
                                   "train_wall_s", "steps_per_s", "steps_per_cpu_s",
                                   "time_to_475_s",
                                   "steps_to_475", "time_to_475_incl_final_s",
                                   "final_eval_mean")}
    print(json.dumps(summary))
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
