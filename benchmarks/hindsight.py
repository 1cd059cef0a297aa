"""DQN with hindsight experience replay against Stable-Baselines3's HerReplayBuffer, side by side.

    python benchmarks/hindsight.py [--n-bits 10] [--steps 3000] [--seeds 0 1 2]
                                   [--backends jax,torch] [--core 1]
                                   [--out benchmarks/results/hindsight_bitflipping.md]

Every row trains DQN with hindsight replay (4 goals per transition, the "future" strategy) on
kerasrl's BitFlipping env (a random start and a random goal, as in the HER paper; SB3 trains on
the same env class, which has the GoalEnv form SB3's HerReplayBuffer reads) with the preset
`bitflipping-dqn-her`'s settings given to both libraries, for `--steps` env steps, then evaluates
the greedy policy over 100 episodes (success rate: the share that reached their goal; mean
return: a perfect policy averages -(mean differing bits - 1), -4.0 on 10 bits). Steps/s is over
the whole `learn`/`fit` call, warm-up and compilation included. Each row is its own process
pinned to one core with `taskset -c CORE`, one after the other; run it on an idle machine.
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
                      "TF_CPP_MIN_LOG_LEVEL": "3"}.items():
    os.environ.setdefault(_name, _value)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compiled_loop import cpu_model  # noqa: E402

EPISODES = 100


def preset_settings() -> dict:
    from kerasrl.presets import PRESETS

    return dict(PRESETS["bitflipping-dqn-her"].config)


def run_kerasrl(n_bits: int, steps: int, seed: int) -> dict:
    import kerasrl
    from kerasrl.envs.goals import BitFlipping

    agent = kerasrl.DQN(lambda: BitFlipping(n_bits=n_bits), seed=seed, **preset_settings())
    began = time.perf_counter()
    agent.fit(steps, progress=False)
    wall = time.perf_counter() - began
    result = agent.evaluate(episodes=EPISODES, seed=10_000 + seed)
    return {"steps_per_s": steps / wall, "mean_return": result["mean_return"],
            "success": result["mean_is_success"]}


def run_sb3(n_bits: int, steps: int, seed: int) -> dict:
    import numpy as np
    import torch
    from stable_baselines3 import DQN, HerReplayBuffer

    from kerasrl.envs.goals import BitFlipping

    torch.set_num_threads(1)
    cfg = preset_settings()
    model = DQN("MultiInputPolicy", BitFlipping(n_bits=n_bits), seed=seed, verbose=0,
                replay_buffer_class=HerReplayBuffer,
                replay_buffer_kwargs=dict(n_sampled_goal=cfg["hindsight_goals"],
                                          goal_selection_strategy=cfg["hindsight_strategy"]),
                learning_starts=cfg["learning_starts"], train_freq=cfg["train_freq"],
                batch_size=cfg["batch_size"], learning_rate=cfg["learning_rate"],
                gamma=cfg["gamma"], exploration_fraction=cfg["exploration_fraction"],
                exploration_final_eps=cfg["exploration_final_eps"],
                target_update_interval=cfg["target_update_interval"],
                policy_kwargs=dict(net_arch=list(cfg["hidden_sizes"])))
    began = time.perf_counter()
    model.learn(steps)
    wall = time.perf_counter() - began
    env = BitFlipping(n_bits=n_bits)
    returns, successes = [], []
    for episode in range(EPISODES):
        obs, _ = env.reset(seed=10_000 + seed + episode)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, info = env.step(int(action))
            total, done = total + reward, terminated or truncated
        returns.append(total)
        successes.append(float(info["is_success"]))
    return {"steps_per_s": steps / wall, "mean_return": float(np.mean(returns)),
            "success": float(np.mean(successes))}


def measure(library: str, backend: str, n_bits: int, steps: int, seed: int, core: int) -> dict | None:
    environ = dict(os.environ, KERAS_BACKEND=backend or "jax")
    proc = subprocess.run(["taskset", "-c", str(core), sys.executable, __file__, "--child", library,
                           "--n-bits", str(n_bits), "--steps", str(steps), "--seeds", str(seed)],
                          env=environ, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"{library} {backend} seed {seed} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(args, rows: list[dict]) -> str:
    lines = [f"# DQN with hindsight replay on {args.n_bits}-bit flipping: kerasrl and "
             f"Stable-Baselines3, {args.steps} steps, one core each (`taskset -c {args.core}`)", "",
             f"CPU: {cpu_model()}. The preset bitflipping-dqn-her's settings for both libraries; "
             f"greedy evaluation over {EPISODES} episodes. Steps/s over the whole fit/learn call.", "",
             "| library | backend | seed | steps/s | success | mean return |", "|---|---|---:|---:|---:|---:|"]
    for row in rows:
        if row.get("steps_per_s") is None:
            lines.append(f"| {row['library']} | {row['backend']} | {row['seed']} | failed | | |")
            continue
        lines.append(f"| {row['library']} | {row['backend']} | {row['seed']} | "
                     f"{row['steps_per_s']:.0f} | {row['success']:.2f} | {row['mean_return']:.2f} |")
    sb3 = [r["steps_per_s"] for r in rows if r["library"] == "sb3" and r.get("steps_per_s")]
    if sb3:
        lines.append("")
        for backend in args.backends.split(","):
            ours = [r["steps_per_s"] for r in rows
                    if r["library"] == "kerasrl" and r["backend"] == backend and r.get("steps_per_s")]
            if ours:
                lines.append(f"kerasrl on {backend}: {sum(ours) / len(ours) / (sum(sb3) / len(sb3)):.2f}x "
                             f"SB3's steps/s (mean over the seeds).")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-bits", type=int, default=10)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--backends", default="jax,torch")
    parser.add_argument("--core", type=int, default=1)
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", choices=("kerasrl", "sb3"))
    args = parser.parse_args()
    if args.child:
        run = run_kerasrl if args.child == "kerasrl" else run_sb3
        print(json.dumps(run(args.n_bits, args.steps, args.seeds[0])))
        return
    rows = []
    for seed in args.seeds:
        for library, backend in [*(("kerasrl", b) for b in args.backends.split(",")), ("sb3", "torch")]:
            result = measure(library, backend, args.n_bits, args.steps, seed, args.core)
            rows.append({"library": library, "backend": backend, "seed": seed, **(result or {})})
            print(rows[-1], flush=True)
    text = table(args, rows)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        Path(args.out).with_suffix(".json").write_text(json.dumps(
            {"cpu": cpu_model(), "n_bits": args.n_bits, "steps": args.steps, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
