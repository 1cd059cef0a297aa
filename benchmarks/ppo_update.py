"""Time of one PPO update on Breakout-shaped data: every minibatch step in one compiled loop
(`rolled`) against the steps unrolled (`unrolled`, what PPO runs for Keras convolutions on XLA's
CPU backend), in one process, from the same state and rollout.

    taskset -c 1 python benchmarks/ppo_update.py [--repeats 3] [--paths rolled unrolled]

RL Zoo's Atari PPO settings (presets.ATARI_PPO: a rollout of 8 envs x 128 steps, minibatches of
256, 4 epochs: 16 Adam steps) and the default network on (84, 84, 4) uint8 frame stacks, the Nature
CNN shared by the policy and value heads. The rollout is random frames (the time does not depend
on them). Prints, per path, the first call (compilation included) and the min and all of
`--repeats` further calls, in seconds; and the largest weight difference between the paths.
"""

from __future__ import annotations

import argparse
import os
import time

for _name, _value in {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                      "KERASRL_TORCH_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1",
                      "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
                      }.items():
    os.environ.setdefault(_name, _value)

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

SHAPE = (84, 84, 4)


class Frames(gym.Env):
    """Breakout's spaces after kerasrl's Atari wrappers: (84, 84, 4) uint8 stacks, 4 actions."""

    observation_space = gym.spaces.Box(0, 255, SHAPE, np.uint8)
    action_space = gym.spaces.Discrete(4)

    def reset(self, *, seed=None, options=None):
        return np.zeros(SHAPE, np.uint8), {}

    def step(self, action):
        return np.zeros(SHAPE, np.uint8), 0.0, False, False, {}


def filled_buffer(agent, rng):
    cfg = agent.config
    buffer = agent.buffer
    for _ in range(cfg.n_steps):
        buffer.add(rng.integers(0, 256, (cfg.n_envs, *SHAPE)).astype(np.float32),
                   rng.integers(0, 4, cfg.n_envs).astype(np.int32),
                   np.full(cfg.n_envs, np.log(0.25), np.float32), rng.normal(size=cfg.n_envs).astype(np.float32),
                   rng.normal(size=cfg.n_envs).astype(np.float32), np.zeros(cfg.n_envs, bool),
                   np.zeros(cfg.n_envs, bool), None)
    buffer.compute_advantages(rng.normal(size=cfg.n_envs).astype(np.float32), cfg.gamma, cfg.gae_lambda)
    return buffer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--paths", nargs="+", default=["rolled", "unrolled"], choices=["rolled", "unrolled"])
    args = parser.parse_args()

    import kerasrl
    from kerasrl import backend
    from kerasrl.presets import ATARI_PPO

    agent = kerasrl.PPO(Frames(), seed=0, **ATARI_PPO)
    buffer = filled_buffer(agent, np.random.default_rng(0))
    start_state = backend.to_numpy(agent.learner.state)
    print(f"backend {backend.NAME}; PPO decides unrolled={agent.unrolled}", flush=True)
    weights = {}
    for path in args.paths:
        agent.unrolled = path == "unrolled"
        agent._train = backend.compile(agent._train_epochs, donate_state=True)  # traced anew
        times = []
        for _ in range(1 + args.repeats):
            agent.learner.load_state(start_state)
            agent.rng = np.random.default_rng(1)  # the same minibatches every time
            begin = time.perf_counter()
            agent._update_on(buffer, np.float32(2.5e-4), 10_000_000)
            backend.to_numpy(agent.learner.state["params"])
            times.append(time.perf_counter() - begin)
            print(f"  {path}: {times[-1]:.2f} s", flush=True)
        weights[path] = backend.to_numpy(agent.learner.state["params"]["actor"])
        print(f"{path}: first call {times[0]:.1f} s, then min {min(times[1:]):.2f} s "
              f"({', '.join(f'{t:.2f}' for t in times[1:])})", flush=True)
    if len(weights) == 2:
        a, b = weights.values()
        print("largest weight difference between the paths:",
              max(float(np.max(np.abs(x - y))) for x, y in zip(a, b)))


if __name__ == "__main__":
    main()
