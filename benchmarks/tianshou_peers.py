"""kerasrl's Rainbow and IQN against Tianshou's on CartPole-v1, side by side in one run, at the
same settings: speed and returns.

    python benchmarks/tianshou_peers.py --algo rainbow|iqn --tianshou-python /tmp/tsvenv/bin/python
        [--seeds 0,1,2] [--steps 30000] [--backends jax,tensorflow,torch] [--core 1]
        [--out benchmarks/results/rainbow_tianshou.md]

Tianshou (2.x, with PyTorch) runs in its own virtual environment (`--tianshou-python`): its
dependencies (numba, pandas, pettingzoo, tensorboard...) are not kerasrl's. For example:
`python -m venv /tmp/tsvenv && /tmp/tsvenv/bin/pip install "torch==2.13.0" tianshou gymnasium`.

Both algorithms run one env, 1,000 uniform random steps, then per env step one Adam step (1e-3,
epsilon 1e-8 for both: PyTorch's default) on 32 transitions, 3-step returns at gamma 0.99, a
target sync every 500 steps, a 128-unit ReLU torso; then 20 greedy episodes. Steps per second
count the whole training run, compilation included. Every row is its own process pinned to one
core (`taskset -c CORE`), run one after the other; the header names the CPU. Run it on an
otherwise idle machine.

- rainbow (`RAINBOW`): the preset cartpole-rainbow's settings with a constant learning rate
  (Tianshou's trainer has no linear decay): a 20k prioritized replay (exponent 0.5, importance
  exponent 0.4 annealed linearly to 1 over the run, weights over the batch's largest), 51 atoms
  on [0, 100], no epsilon; dueling streams of a 128-unit noisy hidden layer and a noisy output
  layer (sigma_0 0.5), Tianshou's `Net(hidden_sizes=[128], dueling_param=...)` with
  `NoisyLinear` and kerasrl's default. Evaluated with the mean network.
- iqn (`IQN`): the preset cartpole-iqn's settings: the prioritized replay as Rainbow's (each
  library's priorities: kerasrl's the mean |target - quantile| of a transition, Tianshou's the
  mean over online fractions of the summed smooth-L1 terms), N = N' = 32 fractions for the
  online and target quantiles, K = 32 to act and to choose a* (with the online network, as
  Tianshou's IQN does: kerasrl's `double_q=True`), 64 cosines, a 128-unit layer after the
  embedding (Tianshou's `ImplicitQuantileNetwork(Net(hidden_sizes=[128]), hidden_sizes=[128])`),
  epsilon from 1 to 0.01 over the first tenth of the run (Tianshou: set by its training_fn).
  Evaluated at the K midpoints (kerasrl) and at K random fractions (Tianshou's policy).
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
COMMON = dict(learning_rate=1e-3, batch_size=32, buffer_size=20_000, learning_starts=1000, gamma=0.99,
              n_step_return=3, target_update_interval=500, hidden=128)
RAINBOW = dict(COMMON, n_atoms=51, v_min=0.0, v_max=100.0, prioritized_replay_alpha=0.5,
               prioritized_replay_beta0=0.4, noisy_sigma=0.5)
IQN = dict(COMMON, n_quantiles=32, n_target_quantiles=32, n_acting_quantiles=32, n_cosines=64,
           exploration_fraction=0.1, exploration_final_eps=0.01, prioritized_replay_alpha=0.5,
           prioritized_replay_beta0=0.4)


def timed_fit(agent, steps: int) -> dict:
    """Train `agent` for `steps`, then evaluate it: the row's figures."""
    start = time.perf_counter()
    agent.fit(steps, progress=False)
    wall = time.perf_counter() - start
    return dict(wall_s=wall, steps_per_s=steps / wall,
                mean_return=agent.evaluate(episodes=EVAL_EPISODES)["mean_return"])


def kerasrl_fields(s: dict) -> dict:
    """kerasrl's config fields for the settings `s`: every key but the network's width, which is
    `hidden_sizes`, with one Adam step (PyTorch's epsilon) per env step."""
    fields = {key: value for key, value in s.items() if key != "hidden"}
    return dict(fields, hidden_sizes=(s["hidden"], s["hidden"]), train_freq=1, adam_epsilon=1e-8,
                adam_epsilon_style="pytorch")


def run_kerasrl_rainbow(seed: int, steps: int) -> dict:
    import kerasrl

    return timed_fit(kerasrl.Rainbow("CartPole-v1", seed=seed, **kerasrl_fields(RAINBOW)), steps)


def run_kerasrl_iqn(seed: int, steps: int) -> dict:
    import kerasrl

    return timed_fit(kerasrl.IQN("CartPole-v1", seed=seed, double_q=True, prioritized_replay=True,
                                 **kerasrl_fields(IQN)), steps)


def tianshou_setup(seed: int):
    """Tianshou's seeding, one training env (DummyVectorEnv) and a CartPole for the spaces."""
    import gymnasium as gym
    import numpy as np
    import torch
    from tianshou.env import DummyVectorEnv

    torch.set_num_threads(1)
    np.random.seed(seed)
    torch.manual_seed(seed)
    training_envs = DummyVectorEnv([lambda: gym.make("CartPole-v1")])
    training_envs.seed(seed)
    return gym.make("CartPole-v1"), training_envs


def tianshou_fit(algorithm, policy, collector, seed: int, steps: int, training_fn) -> dict:
    """Tianshou's own path from the collector on: 1,000 random steps, then the off-policy trainer
    (one env step then one update per trainer step), then `EVAL_EPISODES` with the policy in
    evaluation mode."""
    import gymnasium as gym
    import numpy as np
    from tianshou.data import Collector, CollectStats
    from tianshou.env import DummyVectorEnv
    from tianshou.trainer import OffPolicyTrainerParams

    start = time.perf_counter()
    collector.reset()
    collector.collect(n_step=COMMON["learning_starts"], random=True)
    algorithm.run_training(OffPolicyTrainerParams(
        training_collector=collector, max_epochs=1, epoch_num_steps=steps - COMMON["learning_starts"],
        collection_step_num_env_steps=1, update_step_num_gradient_steps_per_sample=1.0,
        batch_size=COMMON["batch_size"], training_fn=training_fn, test_collector=None,
        verbose=False, show_progress=False))
    wall = time.perf_counter() - start
    policy.eval()
    eval_envs = DummyVectorEnv([lambda: gym.make("CartPole-v1")])
    eval_envs.seed(seed + 1000)
    stats = Collector[CollectStats](policy, eval_envs).collect(n_episode=EVAL_EPISODES,
                                                              reset_before_collect=True)
    return dict(wall_s=wall, steps_per_s=steps / wall, mean_return=float(np.mean(stats.returns)))


def prioritized_buffer(s: dict):
    """Tianshou's prioritized buffer at the settings `s` (weights over the batch's largest)."""
    from tianshou.data import PrioritizedVectorReplayBuffer

    return PrioritizedVectorReplayBuffer(s["buffer_size"], buffer_num=1,
                                         alpha=s["prioritized_replay_alpha"],
                                         beta=s["prioritized_replay_beta0"], weight_norm=True)


def beta_schedule(buffer, s: dict, steps: int):
    """A training_fn annealing the importance exponent linearly to 1 over the run, as kerasrl."""
    def anneal_beta(epoch: int, env_step: int) -> None:
        fraction = min(env_step / steps, 1.0)
        buffer.set_beta(s["prioritized_replay_beta0"] + fraction * (1.0 - s["prioritized_replay_beta0"]))

    return anneal_beta


def run_tianshou_rainbow(seed: int, steps: int) -> dict:
    """Net + NoisyLinear, C51Policy, RainbowDQN, a prioritized buffer."""
    from tianshou.algorithm import RainbowDQN
    from tianshou.algorithm.modelfree.c51 import C51Policy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector, CollectStats
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.discrete import NoisyLinear

    s = RAINBOW
    env, training_envs = tianshou_setup(seed)

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
    buffer = prioritized_buffer(s)
    collector = Collector[CollectStats](algorithm, training_envs, buffer, exploration_noise=True)
    return tianshou_fit(algorithm, policy, collector, seed, steps, beta_schedule(buffer, s, steps))


def run_tianshou_iqn(seed: int, steps: int) -> dict:
    """Net + ImplicitQuantileNetwork, IQNPolicy, IQN, a uniform buffer, epsilon set linearly by
    the training_fn as kerasrl's schedule."""
    from tianshou.algorithm import IQN as TianshouIQN
    from tianshou.algorithm.modelfree.iqn import IQNPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector, CollectStats
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.discrete import ImplicitQuantileNetwork

    s = IQN
    env, training_envs = tianshou_setup(seed)
    torso = Net(state_shape=env.observation_space.shape, hidden_sizes=[s["hidden"]])
    net = ImplicitQuantileNetwork(preprocess_net=torso, action_shape=int(env.action_space.n),
                                  hidden_sizes=[s["hidden"]], num_cosines=s["n_cosines"])
    policy = IQNPolicy(model=net, action_space=env.action_space, sample_size=s["n_acting_quantiles"],
                       online_sample_size=s["n_quantiles"], target_sample_size=s["n_target_quantiles"],
                       eps_training=1.0, eps_inference=0.0)
    algorithm = TianshouIQN(policy=policy, optim=AdamOptimizerFactory(lr=s["learning_rate"], eps=1e-8),
                            gamma=s["gamma"], n_step_return_horizon=s["n_step_return"],
                            target_update_freq=s["target_update_interval"])
    buffer = prioritized_buffer(s)
    collector = Collector[CollectStats](algorithm, training_envs, buffer, exploration_noise=True)
    anneal_beta = beta_schedule(buffer, s, steps)

    def schedules(epoch: int, env_step: int) -> None:  # kerasrl's linear epsilon, in all env steps
        fraction = min((env_step + s["learning_starts"]) / (s["exploration_fraction"] * steps), 1.0)
        policy.set_eps_training(1.0 + fraction * (s["exploration_final_eps"] - 1.0))
        anneal_beta(epoch, env_step)

    return tianshou_fit(algorithm, policy, collector, seed, steps, schedules)


RUNS = {"rainbow": (RAINBOW, run_kerasrl_rainbow, run_tianshou_rainbow, "Rainbow"),
        "iqn": (IQN, run_kerasrl_iqn, run_tianshou_iqn, "IQN")}


def measure(algo: str, library: str, backend: str | None, seed: int, steps: int, core: int,
            python: str) -> dict:
    from side_by_side import child_row

    return child_row(["taskset", "-c", str(core), python, __file__, "--algo", algo, "--child", library,
                      "--seed", str(seed), "--steps", str(steps)], library, backend, seed)


def table(algo: str, steps: int, core: int, rows: list[dict]) -> str:
    from compiled_loop import cpu_model
    from side_by_side import speed_and_returns_table

    header = (f"{RUNS[algo][3]} on CartPole-v1 at `{algo.upper()}` (benchmarks/tianshou_peers.py), "
              f"{steps:,} env steps "
              f"per run, {EVAL_EPISODES} greedy episodes after; one process per row pinned to core {core} "
              f"(`taskset`), {cpu_model()}.")
    return speed_and_returns_table(header, rows, "tianshou", "Tianshou")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algo", choices=sorted(RUNS), default="rainbow")
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
        _, run_kerasrl, run_tianshou, _ = RUNS[args.algo]
        run = run_kerasrl if args.child == "kerasrl" else run_tianshou
        print(json.dumps(run(args.seed, args.steps)))
        return
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for backend in (b for b in args.backends.split(",") if b):
            rows.append(measure(args.algo, "kerasrl", backend, seed, args.steps, args.core, sys.executable))
            print(rows[-1], flush=True)
        if args.tianshou_python:
            rows.append(measure(args.algo, "tianshou", None, seed, args.steps, args.core, args.tianshou_python))
            print(rows[-1], flush=True)
    from side_by_side import report

    report(table(args.algo, args.steps, args.core, rows), rows, args.out)


if __name__ == "__main__":
    main()
