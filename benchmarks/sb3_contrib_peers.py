"""kerasrl's TRPO and CrossQ against Stable-Baselines3-contrib's, side by side in one run: speed and
returns.

    python benchmarks/sb3_contrib_peers.py [--preset cartpole-trpo] [--seeds 0,1,2] [--steps N]
                                           [--backends jax,tensorflow,torch] [--core 1]
                                           [--out benchmarks/results/trpo_cartpole.md]

Each row trains one seed at the preset's settings (an RL Zoo entry, trpo.yml or crossq.yml);
SB3-contrib's algorithm of the same name gets the same hyperparameters and networks (TRPO: SB3's
MlpPolicy of two 64-unit tanh MLPs, kerasrl's default too; CrossQ: the preset's actor and critic
sizes as net_arch=dict(pi=..., qf=...)) for the preset's budget (or `--steps`), then evaluates 20
greedy episodes. Steps per second count the whole `fit` / `learn`, compilation included. Every
row is its own process pinned to one core with `taskset -c CORE`, run one after the other; the
header names the CPU. Run it on an otherwise idle machine: figures compare within one table only.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compiled_loop import cpu_model  # noqa: E402
from side_by_side import child_row, report, speed_and_returns_table  # noqa: E402

EVAL_EPISODES = 20
# kerasrl's fields that SB3-contrib's algorithms do not take as keywords (VecNormalize does the
# first two; the third is TRPO's own behaviour; the networks' sizes go in net_arch).
NOT_SB3_KEYWORDS = {"normalize_observations", "normalize_reward", "gaussian_kl", "hidden_sizes",
                    "critic_hidden_sizes"}
SB3_CONTRIB_CLASSES = {"trpo": "TRPO", "crossq": "CrossQ"}


def run_kerasrl(preset_name: str, seed: int, steps: int) -> dict:
    from kerasrl import registry
    from kerasrl.presets import get_preset

    preset = get_preset(preset_name)
    agent = registry.agent_class(preset.algorithm)(preset.env, seed=seed, **preset.config)
    start = time.perf_counter()
    agent.fit(steps, progress=False)
    wall = time.perf_counter() - start
    result = agent.evaluate(episodes=EVAL_EPISODES)
    return dict(wall_s=wall, steps_per_s=steps / wall, mean_return=result["mean_return"])


def run_sb3_contrib(preset_name: str, seed: int, steps: int) -> dict:
    import sb3_contrib
    import torch
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    from kerasrl import registry
    from kerasrl.presets import get_preset

    torch.set_num_threads(1)
    preset = get_preset(preset_name)
    config = dict(preset.config)
    n_envs = config.pop("n_envs", 1)
    norm_obs, norm_reward = config.get("normalize_observations", False), config.get("normalize_reward", False)
    if "hidden_sizes" in config or "critic_hidden_sizes" in config:  # CrossQ's: pi and qf
        defaults = registry.config_class(preset.algorithm)()
        config["policy_kwargs"] = dict(net_arch=dict(
            pi=list(config.get("hidden_sizes", defaults.hidden_sizes)),
            qf=list(config.get("critic_hidden_sizes", defaults.critic_hidden_sizes))))
    config = {key: value for key, value in config.items() if key not in NOT_SB3_KEYWORDS}
    env = make_vec_env(preset.env, n_envs=n_envs, seed=seed)
    if norm_obs or norm_reward:
        env = VecNormalize(env, norm_obs=norm_obs, norm_reward=norm_reward)
    algorithm = getattr(sb3_contrib, SB3_CONTRIB_CLASSES[preset.algorithm])
    model = algorithm("MlpPolicy", env, seed=seed, device="cpu", **config)
    start = time.perf_counter()
    model.learn(steps)
    wall = time.perf_counter() - start
    eval_env = make_vec_env(preset.env, n_envs=1, seed=seed + 1000)
    if isinstance(env, VecNormalize):
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False)
        eval_env.obs_rms = env.obs_rms
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
    return dict(wall_s=wall, steps_per_s=steps / wall, mean_return=float(mean))


def measure(library: str, backend: str | None, preset: str, seed: int, steps: int, core: int) -> dict:
    return child_row(["taskset", "-c", str(core), sys.executable, __file__, "--child", library,
                      "--preset", preset, "--seed", str(seed), "--steps", str(steps)],
                     library, backend, seed)


def table(preset: str, steps: int, core: int, rows: list[dict]) -> str:
    from kerasrl.presets import get_preset

    algorithm = SB3_CONTRIB_CLASSES[get_preset(preset).algorithm]
    header = (f"{algorithm}, preset `{preset}`, {steps:,} env steps per run, {EVAL_EPISODES} greedy episodes "
              f"after; one process per row pinned to core {core} (`taskset`), {cpu_model()}.")
    return speed_and_returns_table(header, rows, "sb3-contrib", "SB3-contrib")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="cartpole-trpo")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--backends", default="jax,tensorflow,torch")
    parser.add_argument("--core", type=int, default=1)
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", choices=("kerasrl", "sb3-contrib"))
    args = parser.parse_args()
    from kerasrl.presets import get_preset

    steps = args.steps or get_preset(args.preset).total_steps
    if args.child:
        run = run_kerasrl if args.child == "kerasrl" else run_sb3_contrib
        print(json.dumps(run(args.preset, args.seed, steps)))
        return
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for backend in args.backends.split(","):
            rows.append(measure("kerasrl", backend, args.preset, seed, steps, args.core))
            print(rows[-1], flush=True)
        rows.append(measure("sb3-contrib", None, args.preset, seed, steps, args.core))
        print(rows[-1], flush=True)
    report(table(args.preset, steps, args.core, rows), rows, args.out)


if __name__ == "__main__":
    main()
