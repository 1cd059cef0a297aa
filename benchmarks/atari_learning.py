"""Atari learning beside Stable-Baselines3: whole-game scores during training, same settings.

    python benchmarks/atari_learning.py --worker kerasrl|sb3|random --seed S --steps N --json OUT
                                        [--backend torch] [--game Breakout|Pong]
    python benchmarks/atari_learning.py --report benchmarks/results/atari_learning.md --runs DIR [--window 40000]

RL Baselines3 Zoo's PPO for Atari on both sides (kerasrl's `breakout-ppo` preset, presets.ATARI_PPO:
8 envs x 128 steps, 4 epochs of 256, lr 2.5e-4 and clip 0.1 decaying linearly over 10M steps,
entropy 0.01, the Nature CNN shared by policy and value); SB3 2.x with `make_atari_env` +
`VecFrameStack(4)` and "CnnPolicy" on <Game>NoFrameskip-v4, its schedules also spanning 10M
steps, both stopped at `--steps` agent steps (all envs together). The preprocessing is the same
(observations checked equal byte for byte, tests/envs/test_atari.py).

What is compared: each finished game's whole raw score (five lives, unclipped), at the agent step
it ended: kerasrl's env reports it as `game_score` (kerasrl.envs.atari.EpisodicLife), SB3's
Monitor as the episode's `r` (its `ep_rew_mean`). `random` plays uniformly random actions in
kerasrl/<Game>-v5: the floor. Every run of one directory plays one game (`--game`). A worker writes its JSON after every window of steps, so a run
stopped early keeps what it reached.

The report bins games by the window their step falls in, per run, and writes a table of each
run's mean score per window (with the number of games), and a figure beside it (.png).
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

SCHEDULE_STEPS = 10_000_000  # the zoo's run, over which the learning rate and clip range decay
WINDOW = 40_000


def _write(path: str, record: dict) -> None:
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)


def run_kerasrl(seed: int, steps: int, backend: str, out: str, game: str) -> None:
    os.environ["KERAS_BACKEND"] = backend
    import kerasrl
    from kerasrl.presets import ATARI_PPO

    agent = kerasrl.PPO(f"kerasrl/{game}-v5", seed=seed, **ATARI_PPO)
    start = time.perf_counter()
    record = {"library": "kerasrl", "game": game, "backend": backend, "seed": seed, "steps": 0, "games": [],
              "adam_epsilon_style": ATARI_PPO["adam_epsilon_style"]}
    for stop in range(WINDOW, steps + WINDOW, WINDOW):
        history = agent.fit(SCHEDULE_STEPS, stop_at=min(stop, steps), progress=False)
        record.update(steps=agent.num_timesteps, wall=time.perf_counter() - start,
                      games=[(e["step"], e["game_score"]) for e in history.episodes if "game_score" in e])
        _write(out, record)


def run_sb3(seed: int, steps: int, out: str, game: str) -> None:
    import ale_py
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    from kerasrl.presets import ATARI_PPO

    gym.register_envs(ale_py)
    torch.set_num_threads(1)
    config = dict(ATARI_PPO)
    n_envs = config.pop("n_envs")
    # SB3's CnnPolicy shares its features already, its schedules are callables, its Adam PyTorch's.
    for name in ("shared_network", "lr_schedule", "clip_range_schedule", "adam_epsilon_style"):
        config.pop(name)
    lr, clip = config.pop("learning_rate"), config.pop("clip_range")
    env = VecFrameStack(make_atari_env(f"{game}NoFrameskip-v4", n_envs=n_envs, seed=seed), n_stack=4)
    model = PPO("CnnPolicy", env, seed=seed, learning_rate=lambda p: lr * p, clip_range=lambda p: clip * p,
                **config)
    record = {"library": "sb3", "game": game, "backend": "torch", "seed": seed, "steps": 0, "games": []}
    start = time.perf_counter()

    class Games(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:  # Monitor, innermost: a whole game ended
                    record["games"].append((self.num_timesteps, float(info["episode"]["r"])))
            if self.num_timesteps // WINDOW > record["steps"] // WINDOW or self.num_timesteps >= steps:
                record.update(steps=self.num_timesteps, wall=time.perf_counter() - start)
                _write(out, record)
            return self.num_timesteps < steps

    model.learn(SCHEDULE_STEPS, callback=Games())


def run_random(seed: int, steps: int, out: str, game: str) -> None:
    import gymnasium as gym
    import numpy as np

    import kerasrl  # noqa: F401  (registers kerasrl/<Game>-v5)

    env = gym.make(f"kerasrl/{game}-v5")
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    games = []
    for step in range(1, steps + 1):
        _, _, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        if "game_score" in info:
            games.append((step, info["game_score"]))
        if terminated or truncated:
            env.reset()
    _write(out, {"library": "random", "game": game, "backend": "", "seed": seed, "steps": steps, "games": games})


def report(runs_dir: str, out: str, window: int) -> None:
    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from compiled_loop import cpu_model

    runs = [json.loads(path.read_text()) for path in sorted(Path(runs_dir).glob("*.json"))]
    games_played = {run.get("game", "Breakout") for run in runs}  # the first runs predate --game
    if len(games_played) != 1:
        raise SystemExit(f"{runs_dir} holds runs of {sorted(games_played)}: one game per directory")
    game = games_played.pop()
    runs.sort(key=lambda r: (r["library"] != "kerasrl", r["library"], r.get("adam_epsilon_style") == "keras",
                             r["seed"]))
    n_windows = max(-(-r["steps"] // window) for r in runs if r["library"] != "random")
    header = "| run | agent steps | wall | " + " | ".join(
        f"{i * window // 1000}k-{(i + 1) * window // 1000}k" for i in range(n_windows)) + " |"
    lines = [header, "|" + "---|" * (3 + n_windows)]
    curves = {}
    for run in runs:
        games = np.array(run["games"], np.float64).reshape(-1, 2)
        cells, means = [], []
        for i in range(n_windows):
            scores = games[(games[:, 0] > i * window) & (games[:, 0] <= (i + 1) * window), 1]
            if run["library"] == "random":
                scores = games[:, 1] if i == 0 else scores[:0]  # the floor: every random game, once
            means.append(scores.mean() if len(scores) else np.nan)
            cells.append(f"{scores.mean():.2f} ({len(scores)})" if len(scores) else "")
        name = f"{run['library']}{' ' + run['backend'] if run['library'] == 'kerasrl' else ''}, seed {run['seed']}"
        if run.get("adam_epsilon_style") == "keras":  # the runs before the presets took PyTorch's
            name = name.replace(",", " (Adam epsilon Keras's way),")
        wall = f"{run['wall'] / 60:.0f} min" if "wall" in run else ""
        lines.append(f"| {name} | {run['steps']:,} | {wall} | " + " | ".join(cells) + " |")
        curves[name] = means
    text = (f"# {game}: whole-game scores in training, kerasrl and Stable-Baselines3 (PPO, RL Zoo settings)\n\n"
            f"`python benchmarks/atari_learning.py --report {out} --runs {runs_dir}`; {cpu_model()}, "
            f"each run one process pinned to one core (wall: two runs at a time, other work beside them: not a "
            f"throughput figure, BENCHMARKS.md has those). Mean raw score of the games that ended in each window of "
            f"{window:,} agent steps (4 frames each), games in brackets; random play: all its games.\n\n"
            + "\n".join(lines) + "\n")
    Path(out).write_text(text)
    print(text)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    x = (np.arange(n_windows) + 0.5) * window * 4 / 1e6
    for name, means in curves.items():
        library = name.split(",")[0].split()[0]
        style, color = {"kerasrl": ("-", "tab:blue"), "sb3": (":", "tab:red")}.get(library, ("--", "gray"))
        if "Keras's" in name:
            style, color = "-.", "tab:cyan"
        values = np.full(n_windows, means[0]) if library == "random" else np.array(means)
        ax.plot(x, values, style, color=color, marker="" if library == "random" else "o", label=name,
                alpha=1.0 if name.endswith("0") else 0.6)
    ax.set_xlabel("frames (millions)")
    ax.set_ylabel("whole-game score in training")
    ax.set_title(f"{game}, PPO at RL Zoo's settings")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(Path(out).with_suffix(".png"), dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", choices=["kerasrl", "sb3", "random"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=240_000)
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--game", default="Breakout", choices=["Breakout", "Pong"])
    parser.add_argument("--json")
    parser.add_argument("--report")
    parser.add_argument("--runs", default="benchmarks/results/atari_learning")
    parser.add_argument("--window", type=int, default=WINDOW)
    args = parser.parse_args()
    if args.report:
        report(args.runs, args.report, args.window)
    elif args.worker == "kerasrl":
        run_kerasrl(args.seed, args.steps, args.backend, args.json, args.game)
    elif args.worker == "sb3":
        run_sb3(args.seed, args.steps, args.json, args.game)
    elif args.worker == "random":
        run_random(args.seed, args.steps, args.json, args.game)
    else:
        sys.exit("--worker or --report")


if __name__ == "__main__":
    main()
