"""SAC, TD3 and TQC steps per second against Stable-Baselines3 and SBX, side by side in one run.

    python benchmarks/continuous.py [--env Pendulum-v1] [--steps 5000] [--algorithms sac,td3,tqc,crossq]
                                    [--backends jax,tensorflow,torch] [--core 0]
                                    [--out benchmarks/results/continuous_pendulum.md]

Each row trains one agent at the RL-Zoo settings (kerasrl's TD3Config / SACConfig / TQCConfig
defaults; the same hyperparameters given to SB3 and SBX; TQC's and CrossQ's "SB3" rows are
SB3-contrib's) for `--steps` env steps after `learning_starts`, and
reports env steps per second over the training part only: the warm-up random steps and the first
500 training steps (compilation) are not timed. Every row is its own process pinned to one core
with `taskset -c CORE` (the thread variables alone do not hold JAX to one core), run one after the
other; CPU time is given beside wall time (CPU > wall: the process used more than one core).
`--env HalfCheetah-v5` needs gymnasium[mujoco] (the `mujoco` wheel; no rendering). The table's
header gives the core's float32 matrix-product rate (XLA), the ceiling of these updates.

Targets (issue 13): >= 5x SB3 and >= 1.5x SBX on the default backend; every backend within 2x of
the fastest. Run it on an otherwise idle machine: figures compare within one table only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

for _name, _value in {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "KERASRL_TORCH_THREADS": "1",
                      "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
                      }.items():
    os.environ.setdefault(_name, _value)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compiled_loop import cpu_model  # noqa: E402

WARMUP_TRAIN_STEPS = 500

# RL-Zoo settings shared by every library (Pendulum-v1; SB3's defaults where the zoo sets none).
ZOO = {
    "td3": dict(learning_rate=1e-3, gamma=0.98, buffer_size=200_000, learning_starts=10_000,
                batch_size=256, tau=0.005, train_freq=1, gradient_steps=1, net=(400, 300)),
    "sac": dict(learning_rate=1e-3, gamma=0.99, buffer_size=1_000_000, learning_starts=100,
                batch_size=256, tau=0.005, train_freq=1, gradient_steps=1, net=(256, 256)),
    # tqc.yml's Pendulum-v1: SAC's settings; 2 critics of 25 quantiles, 2 dropped per critic
    # (every library's default).
    "tqc": dict(learning_rate=1e-3, gamma=0.99, buffer_size=1_000_000, learning_starts=100,
                batch_size=256, tau=0.005, train_freq=1, gradient_steps=1, net=(256, 256)),
    # crossq.yml's Pendulum-v1: policy delay 2, 256-unit actor and critics (SB3-contrib's
    # defaults otherwise; no target networks, so no tau).
    "crossq": dict(learning_rate=1e-3, gamma=0.99, buffer_size=1_000_000, learning_starts=100,
                   batch_size=256, train_freq=1, gradient_steps=1, policy_delay=2, net=(256, 256)),
}
CLASS_NAMES = {"td3": "TD3", "sac": "SAC", "tqc": "TQC", "crossq": "CrossQ"}
# RL-Zoo's MuJoCo settings differ in these fields only (HalfCheetah-v5: 10,000 random steps first;
# SAC at SB3's default step size).
MUJOCO = {"td3": dict(gamma=0.99, buffer_size=1_000_000, learning_starts=10_000),
          "sac": dict(learning_rate=3e-4, learning_starts=10_000),
          "tqc": dict(learning_rate=3e-4, learning_starts=10_000),
          "crossq": dict(learning_starts=5_000, policy_delay=3)}


def settings(algorithm: str, env: str) -> dict:
    cfg = dict(ZOO[algorithm])
    if env != "Pendulum-v1":
        cfg.update(MUJOCO[algorithm])
    return cfg


def timed(train, steps: int) -> dict:
    """`train(n)` runs n more env steps; the timed part is the last `steps`."""
    wall, cpu = time.perf_counter(), time.process_time()
    train(steps)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"steps_per_s": steps / wall, "cpu_over_wall": cpu / wall}


def run_kerasrl(algorithm: str, env: str, steps: int) -> dict:
    import kerasrl

    cfg = settings(algorithm, env)
    net = cfg.pop("net")
    if algorithm == "crossq":
        cfg["critic_hidden_sizes"] = net
    agent = getattr(kerasrl, CLASS_NAMES[algorithm])(env, hidden_sizes=net, **cfg)
    start = cfg["learning_starts"] + WARMUP_TRAIN_STEPS
    total = start + steps
    agent.fit(total, stop_at=start, progress=False)
    return timed(lambda n: agent.fit(total, progress=False), steps)


def run_sb3(algorithm: str, env: str, steps: int, library: str) -> dict:
    import gymnasium as gym
    import numpy as np
    import torch

    if library == "sb3":
        import stable_baselines3 as lib

        if algorithm in ("tqc", "crossq"):
            import sb3_contrib as lib
    else:
        import sbx as lib
    torch.set_num_threads(1)
    cfg = settings(algorithm, env)
    net = list(cfg.pop("net"))
    kwargs = {}
    if algorithm == "td3":
        from stable_baselines3.common.noise import NormalActionNoise

        n = gym.make(env).action_space.shape[0]
        kwargs["action_noise"] = NormalActionNoise(np.zeros(n), 0.1 * np.ones(n))
    model = getattr(lib, CLASS_NAMES[algorithm])("MlpPolicy", env, policy_kwargs=dict(net_arch=net),
                                            verbose=0, **cfg, **kwargs)
    model.learn(cfg["learning_starts"] + WARMUP_TRAIN_STEPS)
    return timed(lambda n: model.learn(n, reset_num_timesteps=False), steps)


def gemm_rate() -> dict:
    """The CPU's float32 matrix-product rate on one core (XLA, a chain of 256x256 @ 256x256 with
    a tanh between, in a compiled loop): the ceiling of these agents' updates, which are almost
    all products of that size (batch 256, hidden layers of 256 to 400)."""
    import jax
    import jax.numpy as jnp

    a, b = jnp.ones((256, 256)), jnp.full((256, 256), 1e-3)
    chain = jax.jit(lambda a, b: jax.lax.fori_loop(0, 200, lambda i, x: jnp.tanh(x @ b), a))
    chain(a, b).block_until_ready()
    began = time.perf_counter()
    chain(a, b).block_until_ready()
    return {"gflops": 200 * 2 * 256 ** 3 / (time.perf_counter() - began) / 1e9}


def measure(library: str, algorithm: str, env: str, steps: int, backend: str | None,
            core: int) -> dict | None:
    environ = dict(os.environ)
    if backend:
        environ["KERAS_BACKEND"] = backend
    proc = subprocess.run(["taskset", "-c", str(core), sys.executable, __file__, "--child", library,
                           "--algorithm", algorithm, "--env", env, "--steps", str(steps)],
                          env=environ, capture_output=True, text=True)
    if proc.returncode != 0:
        if "ModuleNotFoundError" in proc.stderr:  # a peer this machine lacks (`run.py bench`)
            return {"not_installed": proc.stderr.strip().splitlines()[-1]}
        print(f"{library} {algorithm} {backend or ''} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(env: str, steps: int, core: int, rows: list[dict], gemm: float | None) -> str:
    ceiling = "" if gemm is None else (
        f" Matrix products (256x256 by 256x256, XLA, one core): {gemm:.1f} GFLOP/s.")
    lines = [f"# {', '.join(sorted({r['algorithm'].upper() for r in rows}))} on {env}: env steps/s while training ({steps} timed steps), "
             f"one core each (`taskset -c {core}`)", "",
             f"CPU: {cpu_model()}. RL-Zoo settings, the same for every library; warm-up and "
             f"compilation not timed. Ratios: kerasrl's steps/s over the peer's.{ceiling}", "",
             "| algorithm | library | backend | steps/s | CPU/wall | x SB3 | x SBX |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        peers = {r["library"]: r["steps_per_s"] for r in rows
                 if r["algorithm"] == row["algorithm"] and r["library"] != "kerasrl"}
        rate = row["steps_per_s"]

        def ratio(peer):
            if row["library"] != "kerasrl" or rate is None or peers.get(peer) is None:
                return ""
            return f"{rate / peers[peer]:.2f}"

        shown = ("not installed" if row.get("not_installed") else "failed") if rate is None \
            else f"{rate:.0f}"
        cpu = "" if row.get("cpu_over_wall") is None else f"{row['cpu_over_wall']:.2f}"
        lines.append(f"| {row['algorithm']} | {row['library']} | {row['backend']} | {shown} | {cpu} "
                     f"| {ratio('sb3')} | {ratio('sbx')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Pendulum-v1")
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--backends", default="jax,tensorflow,torch")
    parser.add_argument("--algorithms", default="sac,td3")
    parser.add_argument("--core", type=int, default=0)
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", choices=("kerasrl", "sb3", "sbx", "gemm"))
    parser.add_argument("--algorithm", choices=tuple(ZOO), default="sac")
    args = parser.parse_args()
    if args.child == "gemm":
        print(json.dumps(gemm_rate()))
        return
    if args.child:
        run = run_kerasrl if args.child == "kerasrl" else (
            lambda a, e, s: run_sb3(a, e, s, args.child))
        print(json.dumps(run(args.algorithm, args.env, args.steps)))
        return
    gemm = (measure("gemm", "sac", args.env, 0, None, args.core) or {}).get("gflops")
    rows = []
    for algorithm in args.algorithms.split(","):
        runs = [("kerasrl", b) for b in args.backends.split(",")] + [("sb3", ""), ("sbx", "")]
        for library, backend in runs:
            result = measure(library, algorithm, args.env, args.steps, backend or None, args.core)
            rows.append({"algorithm": algorithm, "library": library, "backend": backend,
                         "steps_per_s": None, **(result or {})})
            print(rows[-1], flush=True)
    text = table(args.env, args.steps, args.core, rows, gemm)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        Path(args.out).with_suffix(".json").write_text(json.dumps(
            {"cpu": cpu_model(), "env": args.env, "steps": args.steps, "gemm_gflops": gemm,
             "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
