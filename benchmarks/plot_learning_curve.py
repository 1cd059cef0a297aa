"""Plot learning curves of runs with kerasrl's own plotting (the code behind `kerasrl plot`).

    python benchmarks/plot_learning_curve.py RUN [RUN ...] OUT.png [--title TEXT] [--target 100]
        [--metric return] [--smooth 20]

RUN is a run folder (`kerasrl train --out RUN`: its episodes.csv) or a CSV file, such as an older
run's metrics.csv (already a 100-episode running mean, drawn as it is). Runs that differ only in
their seed are drawn as one mean with a shaded band.
"""

from __future__ import annotations

import argparse

from kerasrl.plotting import plot_runs


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("runs", nargs="+", help="run folders or CSV files, then the output figure")
    p.add_argument("--title", default="")
    p.add_argument("--target", type=float)
    p.add_argument("--metric", default="return")
    p.add_argument("--smooth", type=int, default=20)
    args = p.parse_args()
    if len(args.runs) < 2:
        p.error("name at least one run and the output figure (.png or .svg)")
    *runs, out = args.runs
    plot_runs(runs, out, metric=args.metric, smooth=args.smooth, title=args.title or None,
              target=args.target)


if __name__ == "__main__":
    main()
