"""Steps per second of the Snake envs on one core: SnakeVectorEnv against a Python loop over Snake.

Random actions on the reference 9x9 board (one fruit, length 2, auto-reset on). "Steps" counts
game steps: num_envs games x vector steps. Writes a markdown table to
benchmarks/results/snake_env_speed.md.

    python benchmarks/snake_env_speed.py [--seconds 3]
"""

import os

# One thread, set before numpy is imported (this machine has 2 cores; see STYLE.md).
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse
import pathlib
import platform
import time

import numpy as np

from kerasrl.envs.snake import Snake
from kerasrl.envs.snake_vector import SnakeVectorEnv

RESULTS = pathlib.Path(__file__).parent / "results" / "snake_env_speed.md"


def time_vector(num_envs: int, seconds: float, autoreset_mode: str = "NextStep") -> float:
    """Game steps per second of SnakeVectorEnv with num_envs games."""
    envs = SnakeVectorEnv(num_envs, autoreset_mode=autoreset_mode)
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 3, size=(64, num_envs))  # (64, num_envs), reused cyclically
    for i in range(20):  # warm up
        envs.step(actions[i % 64])
    steps, start = 0, time.perf_counter()
    while True:
        for i in range(64):
            envs.step(actions[i])
        steps += 64
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps * num_envs / elapsed


def time_single(seconds: float) -> float:
    """Steps per second of one Snake stepped in a plain Python loop, resetting on episode end."""
    game = Snake()
    game.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 3, size=4096).tolist()
    steps, start = 0, time.perf_counter()
    while True:
        for action in actions:
            _, _, terminated, truncated, _ = game.step(action)
            if terminated or truncated:
                game.reset()
        steps += len(actions)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="timing length per row")
    args = parser.parse_args()

    rows = [("Snake, Python loop", 1, time_single(args.seconds))]
    for num_envs in (1024, 4096):
        rows.append(("SnakeVectorEnv, NEXT_STEP", num_envs, time_vector(num_envs, args.seconds)))
    for num_envs in (1024, 4096):
        rows.append(("SnakeVectorEnv, SAME_STEP", num_envs, time_vector(num_envs, args.seconds, "SameStep")))
    base = rows[0][2]
    lines = [
        "# Snake env speed (one thread, 9x9 board, random actions)",
        "",
        f"numpy {np.__version__}, Python {platform.python_version()}, {platform.processor() or platform.machine()}",
        "",
        "| env | games | steps/s | vs single |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {name} | {n} | {rate:,.0f} | {rate / base:,.0f}x |" for name, n, rate in rows]
    table = "\n".join(lines) + "\n"
    print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(table)


if __name__ == "__main__":
    main()
