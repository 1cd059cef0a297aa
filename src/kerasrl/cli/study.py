"""`kerasrl compare`, `kerasrl plot` and `kerasrl tune`: one configuration across backends, runs'
learning curves, and a hyperparameter search."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kerasrl import backend, registry
from kerasrl.cli.common import add_env_arguments, add_env_kwargs_argument, count, parse_assignment


def add_commands(commands) -> None:
    """The `compare`, `plot` and `tune` commands."""
    p = commands.add_parser(
        "compare", help="Train one configuration on every installed backend and report where the "
                        "runs part (the first differing update, action and weights).")
    p.add_argument("algorithm", help=", ".join(registry.ALGORITHMS))
    add_env_arguments(p, "Gymnasium id", required=True)
    p.add_argument("--steps", type=count, default=5_000, help="env steps per backend (default 5000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", type=parse_assignment, action="append", default=[],
                   metavar="NAME=VALUE", help="a config field (repeatable)")
    add_env_kwargs_argument(p, "on every backend")
    p.add_argument("--backends", nargs="+", choices=backend.SUPPORTED,
                   help="the backends to compare (default: every installed one; the first is "
                        "the reference)")
    p.add_argument("--tolerance", type=float, default=1e-5,
                   help="relative loss difference counted as parting (default 1e-5)")
    p.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    p.set_defaults(run=cmd_compare)

    p = commands.add_parser("plot", help="Plot learning curves of runs (return against env steps).")
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="run folders (their episodes.csv) or CSV files; runs that differ only in "
                        "the seed are drawn as one mean with a shaded band")
    p.add_argument("-o", "--output", required=True, help="the figure: a .png or .svg file")
    p.add_argument("--smooth", type=int,
                   help="moving mean over this many episodes (default 20; 1 with --evaluations)")
    p.add_argument("--evaluations", action="store_true",
                   help="plot each run's evaluations (RUN/evaluations.csv, written with --eval-every), "
                        "their mean return unless --metric names another column")
    p.add_argument("--band", choices=("std", "minmax"), default="std",
                   help="shaded band over seeds: mean +- standard deviation, or min to max")
    p.add_argument("--metric", default="return",
                   help="an episodes.csv column: return (default), length, or an env's extra")
    p.add_argument("--label", action="append",
                   help="legend label of each RUN, in order (repeat once per run); runs sharing a "
                        "label are seeds of one configuration (default: grouped by config.json)")
    p.add_argument("--title")
    p.add_argument("--target", type=float, help="draw a dashed line at this value")
    p.set_defaults(run=cmd_plot)

    p = commands.add_parser("tune", help="Search hyperparameters with Optuna (TPE, median pruner).")
    p.add_argument("algorithm", choices=tuple(registry.SEARCH_SPACES),
                   help="an algorithm with a search space")
    add_env_arguments(p, "Gymnasium id (default CartPole-v1)")
    p.add_argument("--trials", type=int, default=20,
                   help="finished trials the study should hold (a resumed study runs the rest)")
    p.add_argument("--steps", type=count, default=20_000, help="env steps per trial")
    p.add_argument("--eval-every", type=count, help="env steps between evaluations (default steps/10)")
    p.add_argument("--eval-episodes", type=int, default=10, help="episodes per evaluation")
    p.add_argument("--storage", help="Optuna storage, e.g. sqlite:///tune.db (resumable); "
                                     "default: in memory")
    p.add_argument("--study-name", help="default ALGO-ENV")
    p.add_argument("--out", default="tune", help="folder of trials.csv and best_preset.json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", type=float, help="show the first evaluated step reaching this return")
    p.add_argument("--baseline", action="store_true",
                   help="run the default configuration as the first trial, to compare")
    p.add_argument("--set", type=parse_assignment, action="append", metavar="NAME=VALUE",
                   help="a config field fixed in every trial, outside the search (repeatable)")
    add_env_kwargs_argument(p, "in every trial, and in the preset file written")
    p.add_argument("--backend", choices=backend.SUPPORTED, help="Keras backend")
    p.set_defaults(run=cmd_tune)


def cmd_compare(args) -> int:
    from kerasrl.compare import compare

    if args.steps < 1:
        print("error: --steps must be at least 1.", file=sys.stderr)
        return 2
    try:
        comparison = compare(args.algorithm, args.env, args.steps, seed=args.seed,
                             settings=dict(args.set), backends=args.backends,
                             tolerance=args.tolerance, env_kwargs=dict(args.env_kwargs or []))
    except (ValueError, TypeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(comparison.report())
    if args.json:
        Path(args.json).write_text(json.dumps(comparison.to_dict(), indent=2))
    return 0


def cmd_plot(args) -> int:
    from kerasrl.plotting import learning_curves, plot_runs

    if args.evaluations:  # the runs' evaluations.csv, one point per evaluation: unsmoothed
        args.runs = [str(Path(run) / "evaluations.csv") if Path(run).is_dir() else run for run in args.runs]
        args.metric = "mean_return" if args.metric == "return" else args.metric
    if args.smooth is None:
        args.smooth = 1 if args.evaluations else 20

    plot_runs(args.runs, args.output, metric=args.metric, smooth=args.smooth, band=args.band,
              labels=args.label, title=args.title, target=args.target)
    bands = learning_curves(args.runs, args.metric, args.smooth, args.band, args.label)
    for b in bands:
        print(f"{b.label}: {b.seeds} seed(s), steps {b.steps[0]:.0f} to {b.steps[-1]:.0f}, "
              f"last smoothed {args.metric} {b.mean[-1]:.2f}")
    print(f"Wrote {args.output}")
    return 0


def cmd_tune(args) -> int:
    if args.backend:
        backend.use(args.backend)
    from kerasrl.tune import tune

    args.env = args.env or "CartPole-v1"
    print(f"Tuning {args.algorithm.upper()} on {args.env}: {args.trials} trials of {args.steps} "
          f"steps, backend {backend.NAME}", flush=True)
    result = tune(args.algorithm, args.env, args.trials, args.steps, out=args.out,
                  storage=args.storage, study_name=args.study_name, eval_every=args.eval_every,
                  eval_episodes=args.eval_episodes, seed=args.seed, fixed=dict(args.set or []),
                  target=args.target, baseline=args.baseline, env_kwargs=dict(args.env_kwargs or []))
    print(result.table())
    best = result.best
    print(f"Best: trial {best['trial']}, mean evaluation return {best['value']:.2f}"
          + (f", reached {args.target:g} at step {best['steps_to_target']}"
             if best["steps_to_target"] is not None else ""))
    print(f"Table {result.table_path}; best configuration {result.preset_path} "
          f"(kerasrl train --preset {result.preset_path})")
    return 0
