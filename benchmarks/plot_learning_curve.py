"""Plot a run's learning curve from its metrics.csv (written by `kerasrl train --out RUN`).

    python benchmarks/plot_learning_curve.py RUN/metrics.csv OUT.png [--title TEXT] [--target 100]
"""

from __future__ import annotations

import argparse
import csv

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("out")
    p.add_argument("--title", default="")
    p.add_argument("--target", type=float)
    args = p.parse_args()
    with open(args.csv) as f:
        rows = list(csv.DictReader(f))
    steps = [int(r["step"]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, [float(r["mean_return_100"]) for r in rows], label="mean return, last 100 episodes")
    if rows and "mean_fruits_eaten_100" in rows[0]:
        ax.plot(steps, [float(r["mean_fruits_eaten_100"]) for r in rows], label="mean fruits, last 100")
    if args.target is not None:
        ax.axhline(args.target, color="grey", linestyle="--", label=f"target {args.target:g}")
    ax.set_xlabel("env steps (frames)")
    ax.set_title(args.title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)


if __name__ == "__main__":
    main()
