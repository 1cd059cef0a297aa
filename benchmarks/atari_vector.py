"""Breakout env steps per second for 8 envs, one core: kerasrl's Atari env in Gymnasium's
SyncVectorEnv (what the agents step) against ale-py's C++ `AtariVectorEnv` with the same
preprocessing (frame skip 4 with max-pooling, 84x84 gray, 4 stacked frames, no-op starts,
episodic life, clipped rewards, fire on reset), random actions, no learning.

    taskset -c 1 python benchmarks/atari_vector.py [--envs 8] [--steps 4000]
    python benchmarks/atari_vector.py --threads 1 2 --async-envs   # on two cores, not pinned

`AtariVectorEnv` runs with `--threads` threads (default one: the core it is pinned to);
`--async-envs` adds kerasrl's env in Gymnasium's AsyncVectorEnv (one process per env). Its
observations are channels first and its gray frames are ALE's, not OpenCV's (docs/atari.md), so
the agents would need a wrapper; this measures whether that is worth it.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def steps_per_second(env, n_envs: int, steps: int, seed: int = 0) -> float:
    import numpy as np

    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    n_actions = int(env.single_action_space.n)
    for _ in range(100):  # warm-up
        env.step(rng.integers(0, n_actions, n_envs))
    start = time.perf_counter()
    for _ in range(steps):
        env.step(rng.integers(0, n_actions, n_envs))
    return steps * n_envs / (time.perf_counter() - start)


def main() -> None:
    import gymnasium as gym
    from ale_py.vector_env import AtariVectorEnv

    import kerasrl  # noqa: F401  (registers kerasrl/Breakout-v5)

    parser = argparse.ArgumentParser()
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4000, help="vector steps timed")
    parser.add_argument("--threads", type=int, nargs="+", default=[1],
                        help="AtariVectorEnv's num_threads, one run each")
    parser.add_argument("--async-envs", action="store_true",
                        help="also kerasrl's env in Gymnasium's AsyncVectorEnv")
    args = parser.parse_args()
    make = [lambda: gym.make("kerasrl/Breakout-v5", training=True) for _ in range(args.envs)]
    envs = [("kerasrl Atari env, SyncVectorEnv", lambda: gym.vector.SyncVectorEnv(make))]
    if args.async_envs:
        envs.append(("kerasrl Atari env, AsyncVectorEnv", lambda: gym.vector.AsyncVectorEnv(make)))
    for threads in args.threads:
        envs.append((f"ale-py AtariVectorEnv, {threads} thread{'s' if threads > 1 else ''}",
                     lambda threads=threads: AtariVectorEnv(
                         "breakout", args.envs, num_threads=threads, episodic_life=True,
                         reward_clipping=True, use_fire_reset=True, noop_max=30,
                         repeat_action_probability=0.0)))
    rows = []
    for name, make_env in envs:
        env = make_env()
        rate = steps_per_second(env, args.envs, args.steps)
        rows.append((name, rate))
        env.close()
    base = rows[0][1]
    print(f"| Breakout, {args.envs} envs, random actions | agent steps/s | frames/s | vs SyncVectorEnv |")
    print("|---|---:|---:|---:|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} | {4 * rate:,.0f} | {rate / base:.2f}x |")


if __name__ == "__main__":
    main()
