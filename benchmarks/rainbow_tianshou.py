"""kerasrl's Rainbow against Tianshou's RainbowDQN on CartPole-v1, side by side in one run, at the
same settings: speed and returns.

    python benchmarks/rainbow_tianshou.py --tianshou-python /tmp/tsvenv/bin/python
        [--seeds 0,1,2] [--steps 30000] [--backends jax,tensorflow,torch] [--core 1]
        [--out benchmarks/results/rainbow_tianshou.md]

Tianshou (2.x, with PyTorch) runs in its own virtual environment (`--tianshou-python`): its
dependencies (numba, pandas, pettingzoo, tensorboard...) are not kerasrl's. For example:
`python -m venv /tmp/tsvenv && /tmp/tsvenv/bin/pip install "torch==2.13.0" tianshou gymnasium`.

The settings are `SETTINGS` for both: the preset cartpole-rainbow's, with a constant learning rate
(Tianshou's trainer has no linear decay): one env, 1,000 uniform random steps, then per env step
one Adam step (1e-3, epsilon 1e-8 for both: PyTorch's default) on 32 transitions from a 20k
prioritized replay (exponent 0.5, importance exponent 0.4 annealed linearly to 1 over the run,
weights over the batch's largest), 3-step returns at gamma 0.99, a target sync every 500 steps,
51 atoms on [0, 100], no epsilon; the network a 128-unit ReLU torso and dueling streams of a
128-unit noisy hidden layer and a noisy output layer (sigma_0 0.5), Tianshou's
`Net(hidden_sizes=[128], dueling_param=...)` with `NoisyLinear` and kerasrl's default. Then 20
greedy episodes with the mean network. Steps per second count the whole training run,
compilation included. Every row is its own process pinned to one core (`taskset -c CORE`), run
one after the other; the header names the CPU. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

for _name, _value in {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "KERASRL_TORCH_THREADS": "1",
                      "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
                      }.items():
    os.environ.setdefault(_name, _value)

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared modules (parent only)
EVAL_EPISODES = 20
SETTINGS = dict(learning_rate=1e-3, batch_size=32, buffer_size=20_000, learning_starts=1000, gamma=0.99,
                n_step_return=3, target_update_interval=500, n_atoms=51, v_min=0.0, v_max=100.0,
                prioritized_replay_alpha=0.5, prioritized_replay_beta0=0.4, noisy_sigma=0.5, hidden=128)


def run_kerasrl(seed: int, steps: int) -> dict:
    import kerasrl

    s = SETTINGS
    agent = kerasrl.Rainbow(
        "CartPole-v1", seed=seed, learning_rate=s["learning_rate"], batch_size=s["batch_size"],
        buffer_size=s["buffer_size"], learning_starts=s["learning_starts"], gamma=s["gamma"],
        n_step_return=s["n_step_return"], target_update_interval=s["target_update_interval"],
        n_atoms=s["n_atoms"], v_min=s["v_min"], v_max=s["v_max"],
        prioritized_replay_alpha=s["prioritized_replay_alpha"],
        prioritized_replay_beta0=s["prioritized_replay_beta0"], noisy_sigma=s["noisy_sigma"],
        hidden_sizes=(s["hidden"], s["hidden"]), train_freq=1, adam_epsilon=1e-8,
        adam_epsilon_style="pytorch")
    start = time.perf_counter()
    agent.fit(steps, progress=False)
    wall = time.perf_counter() - start
    return dict(wall_s=wall, steps_per_s=steps / wall,
                mean_return=agent.evaluate(episodes=EVAL_EPISODES)["mean_return"])


def run_tianshou(seed: int, steps: int) -> dict:
    """Tianshou's own path: Net + NoisyLinear, C51Policy, RainbowDQN, a prioritized buffer, a
    Collector and the off-policy trainer (one env step then one update per trainer step)."""
    import gymnasium as gym
    import numpy as np
    import torch
    from tianshou.algorithm import RainbowDQN
    from tianshou.algorithm.modelfree.c51 import C51Policy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector, CollectStats, PrioritizedVectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.trainer import OffPolicyTrainerParams
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.discrete import NoisyLinear

    s = SETTINGS
    torch.set_num_threads(1)
    np.random.seed(seed)
    torch.manual_seed(seed)
    env = gym.make("CartPole-v1")
    training_envs = DummyVectorEnv([lambda: gym.make("CartPole-v1")])
    training_envs.seed(seed)

    def noisy(inputs: int, outputs: int):
        return NoisyLinear(inputs, outputs, s["noisy_sigma"])

    stream = {"hidden_sizes": [s["hidden"]], "linear_layer": noisy}
    net = Net(state_shape=env.observation_space.shape, action_shape=int(env.action_space.n),
              hidden_sizes=[s["hidden"]], softmax=True, num_atoms=s["n_atoms"],
              dueling_param=(stream, dict(stream)))
    policy = C51Policy(model=net, action_space=env.action_space, num_atoms=s["n_atoms"],
                       v_min=s["v_min"], v_max=s["v_max"], eps_training=0.0, eps_inference=0.0)
    algorithm = RainbowDQN(policy=policy, optim=AdamOptimizerFactory(lr=s["learning_rate"], eps=1e-8),
                           gamma=s["gamma"], n_step_return_horizon=s["n_step_return"],
                           target_update_freq=s["target_update_interval"])
    buffer = PrioritizedVectorReplayBuffer(s["buffer_size"], buffer_num=1,
                                           alpha=s["prioritized_replay_alpha"],
                                           beta=s["prioritized_replay_beta0"], weight_norm=True)
    collector = Collector[CollectStats](algorithm, training_envs, buffer, exploration_noise=True)

    def anneal_beta(epoch: int, env_step: int) -> None:
        fraction = min(env_step / steps, 1.0)
        buffer.set_beta(s["prioritized_replay_beta0"] + fraction * (1.0 - s["prioritized_replay_beta0"]))

    start = time.perf_counter()
    collector.reset()
    collector.collect(n_step=s["learning_starts"], random=True)
    algorithm.run_training(OffPolicyTrainerParams(
        training_collector=collector, max_epochs=1, epoch_num_steps=steps - s["learning_starts"],
        collection_step_num_env_steps=1, update_step_num_gradient_steps_per_sample=1.0,
        batch_size=s["batch_size"], training_fn=anneal_beta, test_collector=None,
        verbose=False, show_progress=False))
    wall = time.perf_counter() - start
    policy.eval()
    eval_envs = DummyVectorEnv([lambda: gym.make("CartPole-v1")])
    eval_envs.seed(seed + 1000)
    stats = Collector[CollectStats](policy, eval_envs).collect(n_episode=EVAL_EPISODES,
                                                              reset_before_collect=True)
    return dict(wall_s=wall, steps_per_s=steps / wall, mean_return=float(np.mean(stats.returns)))


def measure(library: str, backend: str | None, seed: int, steps: int, core: int, python: str) -> dict:
    from side_by_side import child_row

    return child_row(["taskset", "-c", str(core), python, __file__, "--child", library, "--seed",
                      str(seed), "--steps", str(steps)], library, backend, seed)


def table(steps: int, core: int, rows: list[dict]) -> str:
    from compiled_loop import cpu_model
    from side_by_side import speed_and_returns_table

    header = (f"Rainbow on CartPole-v1 at `SETTINGS` (benchmarks/rainbow_tianshou.py), {steps:,} env steps "
              f"per run, {EVAL_EPISODES} greedy episodes after; one process per row pinned to core {core} "
              f"(`taskset`), {cpu_model()}.")
    return speed_and_returns_table(header, rows, "tianshou", "Tianshou")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=30_000)
    parser.add_argument("--backends", default="jax,tensorflow,torch")
    parser.add_argument("--core", type=int, default=1)
    parser.add_argument("--tianshou-python", default=None,
                        help="the Python of a virtual environment with Tianshou 2.x installed")
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", choices=("kerasrl", "tianshou"))
    args = parser.parse_args()
    if args.child:
        run = run_kerasrl if args.child == "kerasrl" else run_tianshou
        print(json.dumps(run(args.seed, args.steps)))
        return
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for backend in (b for b in args.backends.split(",") if b):
            rows.append(measure("kerasrl", backend, seed, args.steps, args.core, sys.executable))
            print(rows[-1], flush=True)
        if args.tianshou_python:
            rows.append(measure("tianshou", None, seed, args.steps, args.core, args.tianshou_python))
            print(rows[-1], flush=True)
    from side_by_side import report

    report(table(args.steps, args.core, rows), rows, args.out)


if __name__ == "__main__":
    main()
