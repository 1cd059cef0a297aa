"""SAC and TD3 steps per second against Stable-Baselines3 and SBX, side by side in one run.

    python benchmarks/continuous.py [--env Pendulum-v1] [--steps 5000] [--backends jax,tensorflow,torch]
                                    [--out benchmarks/results/continuous.md]

Each row trains one agent at the RL-Zoo settings (kerasrl's TD3Config / SACConfig defaults; the
same hyperparameters given to SB3 and SBX) for `--steps` env steps after `learning_starts`, with
one thread per library, and reports env steps per second over the training part only (warm-up
random steps and compilation excluded: the first 500 training steps are not timed). Every kerasrl
backend runs in its own process. `--env HalfCheetah-v5` needs gymnasium[mujoco].

Targets (issue 13): >= 5x SB3 and >= 1.5x SBX on the default backend; every backend within 2x of
the fastest. Run it on an otherwise idle machine: timings taken while other jobs run are not
comparable (none are published from the shared development machine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

for _name, _value in {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "KERASRL_TORCH_THREADS": "1",
                      "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
                      }.items():
    os.environ.setdefault(_name, _value)

WARMUP_TRAIN_STEPS = 500

# RL-Zoo settings shared by every library (Pendulum-v1; SB3's defaults where the zoo sets none).
ZOO = {
    "td3": dict(learning_rate=1e-3, gamma=0.98, buffer_size=200_000, learning_starts=10_000,
                batch_size=256, tau=0.005, train_freq=1, gradient_steps=1, net=(400, 300)),
    "sac": dict(learning_rate=1e-3, gamma=0.99, buffer_size=1_000_000, learning_starts=100,
                batch_size=256, tau=0.005, train_freq=1, gradient_steps=1, net=(256, 256)),
}


def run_kerasrl(algorithm: str, env: str, steps: int) -> float:
    import kerasrl

    cfg = dict(ZOO[algorithm])
    net = cfg.pop("net")
    agent = getattr(kerasrl, algorithm.upper())(env, hidden_sizes=net, **cfg)
    start = cfg["learning_starts"] + WARMUP_TRAIN_STEPS
    total = start + steps
    agent.fit(total, stop_at=start, progress=False)
    began = time.perf_counter()
    agent.fit(total, progress=False)
    return steps / (time.perf_counter() - began)


def run_sb3(algorithm: str, env: str, steps: int, library: str) -> float:
    if library == "sb3":
        import stable_baselines3 as lib
    else:
        import sbx as lib
    import torch

    torch.set_num_threads(1)
    cfg = dict(ZOO[algorithm])
    net = list(cfg.pop("net"))
    cls = getattr(lib, algorithm.upper())
    kwargs = {}
    if algorithm == "td3":
        import numpy as np
        from stable_baselines3.common.noise import NormalActionNoise

        kwargs["action_noise"] = NormalActionNoise(np.zeros(1), 0.1 * np.ones(1))
    model = cls("MlpPolicy", env, policy_kwargs=dict(net_arch=net), verbose=0, **cfg, **kwargs)
    start = cfg["learning_starts"] + WARMUP_TRAIN_STEPS
    model.learn(start)
    began = time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    return steps / (time.perf_counter() - began)


def child(args) -> None:
    """One measurement in this process; prints JSON."""
    if args.library == "kerasrl":
        rate = run_kerasrl(args.algorithm, args.env, args.steps)
    else:
        rate = run_sb3(args.algorithm, args.env, args.steps, args.library)
    print(json.dumps({"steps_per_s": rate}))


def measure(library: str, algorithm: str, env: str, steps: int, backend: str | None) -> float | None:
    environ = dict(os.environ)
    if backend:
        environ["KERAS_BACKEND"] = backend
    proc = subprocess.run([sys.executable, __file__, "--child", library, "--algorithm", algorithm,
                           "--env", env, "--steps", str(steps)], env=environ, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        print(f"{library} {algorithm} {backend or ''} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])["steps_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--backends", default="jax,tensorflow,torch")
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", choices=("kerasrl", "sb3", "sbx"))
    parser.add_argument("--algorithm", choices=tuple(ZOO), default="sac")
    parser.add_argument("--library", default=None)
    args = parser.parse_args()
    if args.child:
        args.library = args.child
        child(args)
        return
    lines = [f"# SAC and TD3 steps/s on {args.env} ({args.steps} timed training steps)", "",
             "| algorithm | library | backend | steps/s |", "|---|---|---|---|"]
    for algorithm in ZOO:
        for backend in args.backends.split(","):
            rate = measure("kerasrl", algorithm, args.env, args.steps, backend)
            lines.append(f"| {algorithm} | kerasrl | {backend} | {rate and f'{rate:.0f}'} |")
        for library in ("sb3", "sbx"):
            rate = measure(library, algorithm, args.env, args.steps, None)
            lines.append(f"| {algorithm} | {library} | | {rate and f'{rate:.0f}'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
