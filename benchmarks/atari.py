"""Training throughput on Breakout: kerasrl against Stable-Baselines3 and SBX, one core each.

    python benchmarks/atari.py --out benchmarks/results/atari_throughput.md [--core 1] [--backends jax torch]
        [--algos dqn ppo] [--peers sb3 sbx] [--slices WARM TIMED]
    python benchmarks/atari.py --worker kerasrl-jax|sb3|sbx --algo dqn|ppo --json OUT [--slices WARM TIMED]

RL Baselines3 Zoo's Atari hyperparameters for both algorithms (kerasrl's presets breakout-dqn and
breakout-ppo; SB3 and SBX with `make_atari_env` + `VecFrameStack(4)` and "CnnPolicy": the same
preprocessing, checked equal to kerasrl's in tests/envs/test_atari.py, and the same Nature CNN),
except DQN's `learning_starts` (the zoo's 100,000 random steps are no training): 1,000 for every
library, so the timed part trains. Each run trains a warm-up slice (compilation, the first
updates), then a timed slice; the figure is frames per second of the timed slice (4 frames per
agent step, frame skip 4), training included. Every run is its own process pinned to one core with
`taskset -c CORE`, one after the other; libraries' threads pinned to one.

- dqn: 2,000 steps warm-up (1,000 random), 4,000 timed (1,000 updates of 32).
- ppo: 8 envs, 2 rollouts of 1,024 steps warm-up, 3 timed (each 16 updates of 256). kerasrl's
  PPO unrolls its update's minibatch steps for the Nature CNN on XLA's CPU backend (JAX):
  inside one compiled loop an update took about 30x as long (benchmarks/ppo_update.py).

`--slices WARM TIMED` replaces both algorithms' slices (agent steps), e.g. `--slices 1024 1024
--algos ppo` for a quick check that every library's PPO runs; such figures are not the benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

for _name, _value in {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                      "KERASRL_TORCH_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1",
                      "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
                      }.items():
    os.environ.setdefault(_name, _value)

HERE = Path(__file__).resolve().parent
SLICES = {"dqn": (2_000, 4_000), "ppo": (2 * 1024, 3 * 1024)}  # (warm-up, timed) agent steps
LEARNING_STARTS = 1_000


def zoo(algo: str) -> dict:
    """The zoo's hyperparameters as kerasrl names them (presets.ATARI_DQN / ATARI_PPO)."""
    from kerasrl.presets import ATARI_DQN, ATARI_PPO

    config = dict(ATARI_DQN if algo == "dqn" else ATARI_PPO)
    if algo == "dqn":
        config["learning_starts"] = LEARNING_STARTS
    return config


def run_kerasrl(backend: str, algo: str, slices: tuple[int, int]) -> dict:
    os.environ["KERAS_BACKEND"] = backend
    import kerasrl

    cls = kerasrl.DQN if algo == "dqn" else kerasrl.PPO
    agent = cls("kerasrl/Breakout-v5", seed=0, **zoo(algo))
    warm, timed = slices
    agent.fit(warm + timed, stop_at=warm, progress=False)
    start, cpu = time.perf_counter(), time.process_time()
    agent.fit(warm + timed, progress=False)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"steps": agent.num_timesteps - warm, "wall": wall, "cpu": cpu}


def run_peer(library: str, algo: str, slices: tuple[int, int]) -> dict:
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    if library == "sb3":
        import torch
        from stable_baselines3 import DQN, PPO

        torch.set_num_threads(1)
    else:
        from sbx import DQN, PPO
    config = zoo(algo)
    n_envs = config.pop("n_envs")
    env = VecFrameStack(make_atari_env("BreakoutNoFrameskip-v4", n_envs=n_envs, seed=0), n_stack=4)
    if algo == "dqn":
        for name in ("loss", "max_grad_norm"):
            config.pop(name)
        if library == "sb3":  # SBX's DQN has no gradient clipping to set
            config["max_grad_norm"] = 10.0
        model = DQN("CnnPolicy", env, seed=0, optimize_memory_usage=False, **config)
    else:
        config.pop("shared_network")  # SB3's CnnPolicy shares its features extractor already
        config.pop("adam_epsilon_style")  # SB3's Adam is PyTorch's
        for name in ("lr_schedule", "clip_range_schedule"):
            config.pop(name)
        lr, clip = config.pop("learning_rate"), config.pop("clip_range")
        model = PPO("CnnPolicy", env, seed=0, learning_rate=lambda p: lr * p, clip_range=lambda p: clip * p,
                    **config)
    warm, timed = slices
    model.learn(warm)
    start, cpu = time.perf_counter(), time.process_time()
    model.learn(timed, reset_num_timesteps=False)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"steps": model.num_timesteps - warm, "wall": wall, "cpu": cpu}


def drive(args) -> None:
    from compiled_loop import cpu_model, run_worker

    libraries = [f"kerasrl-{b}" for b in args.backends] + list(args.peers)
    rows = []
    slices = ["--slices", *map(str, args.slices)] if args.slices else []
    for algo in args.algos:
        for library in libraries:
            result = run_worker(lambda out, library=library, algo=algo: [
                __file__, "--worker", library, "--algo", algo, "--json", out, *slices], args.core)
            result = result or {"error": "the run failed (see its output above)"}
            rows.append(dict(algo=algo, library=library, **result))
            print(rows[-1], flush=True)
    Path(args.out).with_suffix(".json").write_text(json.dumps({"cpu": cpu_model(), "rows": rows}, indent=1))
    lines = [f"# Breakout training throughput, one core each (`taskset -c {args.core}`)", "",
             f"CPU: {cpu_model()}. RL Zoo's Atari settings (DQN's learning_starts 1,000 for all); frames/s "
             "of a timed slice after warm-up, training included (benchmarks/atari.py).", "",
             "| algorithm | library | agent steps timed | frames/s | CPU s / wall s | vs SB3 | vs SBX |",
             "|---|---|---|---|---|---|---|"]
    speed = {(r["algo"], r["library"]): 4 * r["steps"] / r["wall"] for r in rows if "error" not in r}
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['algo']} | {r['library']} | {r['error']} | | | | |")
            continue
        fps = speed[(r["algo"], r["library"])]
        ratios = [f"{fps / speed[(r['algo'], peer)]:.2f}x" if (r["algo"], peer) in speed else ""
                  for peer in ("sb3", "sbx")]
        lines.append(f"| {r['algo']} | {r['library']} | {r['steps']:,} | {fps:,.0f} | {r['cpu'] / r['wall']:.2f} | "
                     f"{ratios[0]} | {ratios[1]} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker")
    parser.add_argument("--algo", choices=["dqn", "ppo"])
    parser.add_argument("--json")
    parser.add_argument("--core", type=int, default=1)
    parser.add_argument("--backends", nargs="+", default=["jax", "torch"])
    parser.add_argument("--peers", nargs="*", default=["sb3", "sbx"], choices=["sb3", "sbx"],
                        help="the peers beside kerasrl (SBX's DQN takes 16 minutes of a core here)")
    parser.add_argument("--out", default="benchmarks/results/atari_throughput.md")
    parser.add_argument("--algos", nargs="+", default=["dqn", "ppo"], choices=["dqn", "ppo"])
    parser.add_argument("--slices", nargs=2, type=int, metavar=("WARM", "TIMED"),
                        help="agent steps of warm-up and timed slice, for every algorithm (a quick check)")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    if args.worker is None:
        drive(args)
        return
    slices = tuple(args.slices) if args.slices else SLICES[args.algo]
    if args.worker.startswith("kerasrl-"):
        result = run_kerasrl(args.worker.split("-", 1)[1], args.algo, slices)
    else:
        result = run_peer(args.worker, args.algo, slices)
    Path(args.json).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
