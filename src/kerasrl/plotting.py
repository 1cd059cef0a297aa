"""Learning curves from run folders: `kerasrl plot RUN [RUN ...] -o curve.png`.

A run folder written by `kerasrl train --out RUN` or `agent.fit(log_dir=RUN)` holds
`episodes.csv` (one row per finished episode: env step, return, length, the env's extras) and
`config.json` (algorithm, env, config). Curves are the return of each episode against the env step
at which it ended, smoothed by a moving mean over the last `smooth` episodes. Runs whose
configuration differs only in the seed are one curve: the mean of the seeds, with a shaded band
(their standard deviation, or their min and max); several configurations share one figure. Runs
without a config.json (`fit(log_dir=...)` writes none) are grouped by the labels given to them.

    from kerasrl.plotting import plot_runs
    plot_runs(["runs/a-seed0", "runs/a-seed1", "runs/b-seed0"], "curve.svg")

matplotlib is imported only when a figure is drawn (`pip install 'kerasrl[plot]'`).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FORMATS = (".png", ".svg")
# Config fields that tell runs of one configuration apart without changing it.
SEED_FIELDS = ("seed",)


@dataclass
class Curve:
    """One run's episodes: `steps[i]` is the env step at which episode i ended (shape [episodes])."""

    name: str
    steps: np.ndarray
    values: np.ndarray
    smoothed: bool = False
    """True when `values` is already a running mean (a metrics.csv of an older run)."""
    config: dict = field(default_factory=dict)
    """config.json of the run (empty when it has none)."""


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _last_written(steps: np.ndarray) -> np.ndarray:
    """Indices of the rows to keep when a resumed run appended rows it had already written.

    A run resumed from a checkpoint replays the episodes after it, so the file's steps drop back;
    each row is kept only if no later row has a step at or below its own (the later row replaced it).
    """
    later_min = np.minimum.accumulate(steps[::-1])[::-1]
    keep = np.ones(len(steps), dtype=bool)
    keep[:-1] = steps[:-1] < later_min[1:]
    return np.flatnonzero(keep)


def read_run(source, metric: str = "return") -> Curve:
    """The curve of a run folder, of its `episodes.csv`, or of a `metrics.csv` (older runs).

    `metric` is a column of episodes.csv: "return" (default), "length", or an extra the env reports
    (e.g. "fruits_eaten" for Snake). A metrics.csv gives its `mean_<metric>_100` column, which is
    already a 100-episode mean.
    """
    path = Path(source)
    if path.is_dir():
        for name in ("episodes.csv", "metrics.csv"):
            if (path / name).is_file():
                csv_path = path / name
                break
        else:
            raise ValueError(f"{path} has neither episodes.csv nor metrics.csv: pass a run folder "
                             f"written by `kerasrl train --out RUN` or `agent.fit(log_dir=RUN)`.")
        run_dir = path
    elif path.is_file() and path.suffix == ".csv":
        csv_path, run_dir = path, path.parent
    else:
        raise ValueError(f"No such run folder or CSV file: {path}")
    rows = _read_csv(csv_path)
    if not rows:
        raise ValueError(f"{csv_path} has no rows yet: no episode of this run has ended.")
    smoothed = metric not in rows[0]
    column = f"mean_{metric}_100" if smoothed else metric
    if column not in rows[0]:
        raise ValueError(f"{csv_path} has no {metric!r} column; it has: {', '.join(rows[0])}.")
    steps = np.array([int(float(r["step"])) for r in rows], dtype=np.int64)
    values = np.array([float(r[column]) if r[column] not in ("", "nan") else np.nan
                       for r in rows], dtype=np.float64)
    keep = _last_written(steps)
    steps, values = steps[keep], values[keep]
    finite = np.isfinite(values)  # metrics.csv rows before the first episode ended are NaN
    config = {}
    if (run_dir / "config.json").is_file():
        config = json.loads((run_dir / "config.json").read_text())
    name = run_dir.name if path.is_dir() or csv_path.name in ("episodes.csv", "metrics.csv", "evaluations.csv") \
        else csv_path.stem
    return Curve(name, steps[finite], values[finite], smoothed, config)


def moving_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of each value and the `window - 1` before it (fewer at the start: only those that
    exist, never zero padding), shape [n] like `values`."""
    if window < 1:
        raise ValueError(f"smooth must be at least 1 episode, got {window}.")
    values = np.asarray(values, dtype=np.float64)
    sums = np.cumsum(np.concatenate([[0.0], values]))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(0, ends - window)
    return (sums[ends] - sums[starts]) / (ends - starts)


def configuration_key(curve: Curve) -> str:
    """What a run trains, without its seed: runs with the same key are seeds of one configuration.
    Runs without a config.json are each their own configuration."""
    if not curve.config:
        return f"run:{curve.name}"
    config = dict(curve.config)
    inner = {k: v for k, v in dict(config.pop("config", {}) or {}).items() if k not in SEED_FIELDS}
    return json.dumps({**config, "config": inner}, sort_keys=True, default=str)


def _labels(groups: dict[str, list[Curve]]) -> dict[str, str]:
    """A short label per configuration: the settings in which the configurations differ."""
    keys = list(groups)
    if len(keys) == 1:
        curve = groups[keys[0]][0]
        c = curve.config
        return {keys[0]: f"{c['algorithm']} on {c['env']}" if "algorithm" in c and "env" in c
                else curve.name}
    flat = {}
    for key in keys:
        config = groups[key][0].config
        if not config:
            flat[key] = None
            continue
        inner = {k: v for k, v in dict(config.get("config", {}) or {}).items()
                 if k not in SEED_FIELDS}
        flat[key] = {**{k: v for k, v in config.items() if k not in ("config", "total_steps")},
                     **inner}
    with_config = [f for f in flat.values() if f is not None]
    differing = sorted({k for f in with_config for k in f
                        if len({json.dumps(g.get(k), sort_keys=True, default=str)
                                for g in with_config}) > 1})
    labels = {}
    for key in keys:
        f = flat[key]
        if f is None or not differing:
            labels[key] = groups[key][0].name
        else:
            labels[key] = ", ".join(f"{k}={f.get(k)}" for k in differing)
    return labels


@dataclass
class Band:
    """A configuration's curve on a step grid: the seeds' mean and band, shapes [points]."""

    label: str
    steps: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    seeds: int
    window: int
    """Episodes in each smoothed point (100 for a metrics.csv's running mean)."""


def combine(curves: list[Curve], smooth: int = 20, band: str = "std", points: int = 200,
            label: str = "") -> Band:
    """Several seeds of one configuration as a mean and a band on a common step grid.

    Each seed's returns are smoothed (a moving mean over `smooth` episodes; none for a curve that
    is already a running mean), then interpolated on `points` steps from the latest first episode
    to the earliest last episode of the seeds, where every seed has data. The band is the mean
    plus or minus the seeds' standard deviation (`band="std"`) or their min and max ("minmax").
    """
    window = 100 if all(c.smoothed for c in curves) else smooth
    if band not in ("std", "minmax"):
        raise ValueError(f"band must be 'std' or 'minmax', got {band!r}.")
    smoothed = [c.values if c.smoothed else moving_mean(c.values, smooth) for c in curves]
    if any(len(c.steps) == 0 for c in curves):
        empty = [c.name for c in curves if len(c.steps) == 0]
        raise ValueError(f"No finished episode in {', '.join(empty)}: nothing to plot.")
    start = max(int(c.steps[0]) for c in curves)
    stop = min(int(c.steps[-1]) for c in curves)
    if len(curves) == 1 or stop <= start:
        if len(curves) > 1:
            raise ValueError(
                f"The seeds {', '.join(c.name for c in curves)} share no range of env steps "
                f"(one ends before another's first episode): plot them as separate runs.")
        c = curves[0]
        return Band(label, c.steps.astype(np.float64), smoothed[0], smoothed[0], smoothed[0], 1,
                    window)
    grid = np.linspace(start, stop, points)  # [points]
    ys = np.stack([np.interp(grid, c.steps, s) for c, s in zip(curves, smoothed)])  # [seeds, points]
    mean = ys.mean(axis=0)
    if band == "std":
        spread = ys.std(axis=0)
        low, high = mean - spread, mean + spread
    else:
        low, high = ys.min(axis=0), ys.max(axis=0)
    return Band(label, grid, mean, low, high, len(curves), window)


def group_runs(curves: list[Curve]) -> dict[str, list[Curve]]:
    """Curves grouped by configuration (see `configuration_key`), in the order first seen."""
    groups: dict[str, list[Curve]] = {}
    for curve in curves:
        groups.setdefault(configuration_key(curve), []).append(curve)
    return groups


def learning_curves(runs, metric: str = "return", smooth: int = 20, band: str = "std",
                    labels: list[str] | None = None) -> list[Band]:
    """The Bands that `plot_runs` draws: one per configuration among `runs`.

    Without `labels`, runs are grouped by their config.json (see `configuration_key`). With
    `labels`, one per run, runs that share a label are one configuration (its seeds): the way to
    group runs of `agent.fit(log_dir=...)`, which writes no config.json.
    """
    runs = list(runs)
    if not runs:
        raise ValueError("Name at least one run folder to plot.")
    if labels is not None and len(labels) != len(runs):
        raise ValueError(f"{len(labels)} labels given for {len(runs)} runs: give one per run "
                         f"(runs sharing a label are seeds of one configuration).")
    curves = [read_run(run, metric) for run in runs]
    if labels is not None:
        groups: dict[str, list[Curve]] = {}
        for curve, label in zip(curves, labels):
            groups.setdefault(label, []).append(curve)
        names = list(groups)
    else:
        groups = group_runs(curves)
        names = list(_labels(groups).values())
    return [combine(group, smooth, band, label=name) for group, name in zip(groups.values(), names)]


def plot_runs(runs, output=None, *, metric: str = "return", smooth: int = 20, band: str = "std",
              labels: list[str] | None = None, title: str | None = None,
              target: float | None = None, figsize=(7.0, 4.2)):
    """Draw the learning curves of `runs` (run folders or CSV files) and save them to `output`
    (.png or .svg) when given. Returns the matplotlib Figure."""
    if output is not None and Path(output).suffix.lower() not in FORMATS:
        raise ValueError(f"Cannot write a figure to {output}: name a .png or .svg file.")
    bands = learning_curves(runs, metric, smooth, band, labels)
    try:
        import matplotlib
    except ImportError:
        raise ImportError("Plotting needs matplotlib: pip install 'kerasrl[plot]'.") from None
    matplotlib.use("Agg")  # files only: no display needed on a server or in CI
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    for b in bands:
        label = b.label + (f" ({b.seeds} seeds)" if b.seeds > 1 else "")
        (line,) = ax.plot(b.steps, b.mean, label=label)
        if b.seeds > 1:
            ax.fill_between(b.steps, b.low, b.high, color=line.get_color(), alpha=0.2, linewidth=0)
    if target is not None:
        ax.axhline(target, color="grey", linestyle="--", label=f"target {target:g}")
    ax.set_xlabel("env steps")
    windows = {b.window for b in bands}
    over = f"{windows.pop()} episodes" if len(windows) == 1 else "episodes"
    ax.set_ylabel(f"{metric}, moving mean over {over}")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    if output is not None:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(output, dpi=100)
    return fig
