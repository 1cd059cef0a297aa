"""Time to the snake-dqn reference's bar on the keras.ops Snake: `kerasrl train --preset NAME
--stop-at-return 100`, one process per (preset, backend, seed), each pinned to one core.

    python benchmarks/snake_compiled.py [--presets snake-dqn-compiled] [--backends jax tensorflow torch]
        [--seeds 0 1 2] [--core 1] [--out benchmarks/results/snake_compiled.md]

The bar is the reference's stopping rule: the mean return of the last 100 training episodes
reaches 100 (about 12 to 14 fruits a game). "train s" is the CLI's own figure, the wall time of
`fit` up to the stop, compilation included; "process s" adds start-up (imports, building the
agent) and the final 20-game greedy evaluation (100 steps without fruit truncate a game).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "KERASRL_TORCH_THREADS": "1",
           "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def run(preset: str, backend: str, seed: int, core: int, steps: int | None) -> dict:
    import os

    out = Path(tempfile.mkdtemp(prefix=f"snake-{preset}-{backend}-{seed}-"))
    command = ["taskset", "-c", str(core), sys.executable, "-m", "kerasrl.cli", "train", "--preset", preset,
               "--backend", backend, "--seed", str(seed), "--stop-at-return", "100", "--no-progress",
               "--out", str(out)]
    if steps:
        command += ["--steps", str(steps)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **THREADS})
    process_s = time.perf_counter() - start
    if done.returncode:
        return {"error": done.stderr[-2000:]}
    evaluation = json.loads((out / "evaluation.json").read_text())
    reached = re.search(r"reached 100 at step (\d+)", done.stdout)
    return {"preset": preset, "backend": backend, "seed": seed, "reached_step": int(reached.group(1)) if reached else None,
            "train_s": evaluation["train_time_s"], "steps_per_s": evaluation["steps_per_s"], "process_s": process_s,
            "eval_mean": evaluation["mean_return"], "eval_std": evaluation["std_return"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["snake-dqn-compiled"])
    parser.add_argument("--backends", nargs="+", default=["jax", "tensorflow", "torch"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--core", type=int, default=1)
    parser.add_argument("--steps", type=int, help="a budget other than the preset's")
    parser.add_argument("--reference", action="store_true",
                        help="also snake-dqn-fast (the Python loop, 16 games, snake_small) on JAX, seed 0 (minutes)")
    parser.add_argument("--out", default="benchmarks/results/snake_compiled.md")
    args = parser.parse_args()
    jobs = [(preset, backend, seed) for preset in args.presets for backend in args.backends for seed in args.seeds]
    if args.reference:
        jobs.append(("snake-dqn-fast", "jax", 0))
    rows = []
    for preset, backend, seed in jobs:
        row = run(preset, backend, seed, args.core, args.steps)
        row.update(preset=preset, backend=backend, seed=seed)
        print(json.dumps(row), flush=True)
        rows.append(row)
    lines = [f"# Time to the Snake bar (100-episode mean return of 100), one core each (`taskset -c {args.core}`)", "",
             f"CPU: {cpu_model()}. `kerasrl train --preset P --seed S --stop-at-return 100`; train s = fit's "
             "wall time to the stop, compilation included. Eval: 20 greedy games, 100 steps without fruit "
             "truncate.", "",
             "| preset | backend | seed | frames to bar | train s | frames/s | process s | eval return |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['preset']} | {r['backend']} | {r['seed']} | error: "
                         f"{r['error'].strip().splitlines()[-1][:120]} | | | | |")
            continue
        reached = f"{r['reached_step']:,}" if r["reached_step"] else "not reached"
        lines.append(f"| {r['preset']} | {r['backend']} | {r['seed']} | {reached} | {r['train_s']:.1f} | "
                     f"{r['steps_per_s']:,.0f} | {r['process_s']:.1f} | {r['eval_mean']:.1f} +/- {r['eval_std']:.1f} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    Path(args.out).with_suffix(".json").write_text(json.dumps(rows, indent=2))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
