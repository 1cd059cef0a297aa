"""Training records: the History returned by `fit`, a live progress bar, a CSV and TensorBoard.

Every file is written in the training's own thread, so a write that fails (no space left, no
permission) stops the run at once with a `kerasrl.WriteError` naming the file; the run folder is
held (`kerasrl.runfiles.RunLock`) from the logger's start to its `close`, so no two processes write
one folder's logs.
"""

from __future__ import annotations

import csv
import math
import os
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kerasrl import backend
from kerasrl.runfiles import RunLock, WriteError, writing


@dataclass
class History:
    """What `fit` returns: one dict per finished episode, one per training round, and one per
    evaluation of `fit(eval_every=...)`."""

    episodes: list[dict] = field(default_factory=list)
    updates: list[dict] = field(default_factory=list)
    evaluations: list[dict] = field(default_factory=list)  # fit(eval_every=...): step and evaluate's figures

    @property
    def episode_returns(self) -> np.ndarray:
        """Undiscounted return of each finished episode, in order."""
        return np.array([e["return"] for e in self.episodes], dtype=np.float64)

    @property
    def losses(self) -> np.ndarray:
        """Mean loss of each training round, in order, for agents with one loss (DQN, PPO...);
        agents with several (SAC's critic_loss and actor_loss, NAF's q_loss) read them by name
        with `metric`."""
        if self.updates and "loss" not in self.updates[0]:
            names = self._recorded()
            raise KeyError(f"this agent's training rounds record no single 'loss' but {', '.join(names)}: "
                           f"read one with history.metric(name), e.g. history.metric({names[0]})")
        return self.metric("loss")

    def metric(self, name: str) -> np.ndarray:
        """One figure of each training round (a loss, an entropy...), in order."""
        if self.updates and name not in self.updates[0]:
            raise KeyError(f"the training rounds record no {name!r}; they record "
                           f"{', '.join(self._recorded())}")
        return np.array([u[name] for u in self.updates], dtype=np.float64)

    def _recorded(self) -> list[str]:
        """The figures the training rounds record, quoted, for an error message."""
        return [repr(k) for k in self.updates[0] if k != "step"]

    def mean_return(self, last: int = 100) -> float:
        """Mean return of the last `last` episodes (NaN before the first one ends)."""
        returns = self.episode_returns[-last:]
        return float(returns.mean()) if len(returns) else math.nan


def _interactive(stream) -> bool:
    """A terminal or a Jupyter kernel (where tqdm draws a widget): somewhere a redrawn bar reads
    as one line. Elsewhere (nohup, Slurm, CI logs) each redraw would be a line of its own."""
    if "ipykernel" in sys.modules:
        return True
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


def episodes(count: int) -> str:
    """'1 episode', '20 episodes'."""
    return f"{count} episode" + ("" if count == 1 else "s")


def env_figures(summary: dict) -> str:
    """The means of the figures an env reported at its episodes' ends in an evaluation summary
    (`evaluate()`'s mean_is_success, mean_fruits_eaten, ...), as ", is_success 0.95, ..."."""
    return "".join(f", {key[len('mean_'):]} {value:.2f}" for key, value in summary.items()
                   if key.startswith("mean_") and key not in ("mean_return", "mean_length"))


def evaluation_line(record: dict) -> str:
    """One evaluation of `History.evaluations` as a line of text."""
    return (f"step {record['step']}: evaluation over {episodes(record['episodes'])}, mean return "
            f"{record['mean_return']:.2f} +/- {record['std_return']:.2f}" + env_figures(record))


class RunLogger:
    """Feeds the History, the progress bar, `metrics.csv`, `episodes.csv` and TensorBoard.

    `metrics.csv` holds one row of running figures every `log_interval` env steps;
    `episodes.csv` one row per finished episode (step, return, length and the env's extras),
    which is what `kerasrl plot` draws; `evaluations.csv` one row per evaluation of
    `fit(eval_every=...)`.

    Args:
        total_steps: env steps this fit will run (for the bar and the log interval).
        out_dir: where `metrics.csv` and TensorBoard events go; None writes no files. The
            folder is locked for this process until `close` (RunLockedError if another holds it).
        progress: show a tqdm bar (where stderr is a terminal or Jupyter), else a line per log
            interval.
        log_interval: env steps between rows of the CSV and TensorBoard scalars.
        start_step: the env step count at which this fit starts (for resumed runs).
    """

    def __init__(self, total_steps: int, out_dir=None, progress=True, log_interval=None,
                 start_step=0, history: History | None = None):
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self._lock = RunLock(self.out_dir).acquire() if self.out_dir is not None else None
        self.history = history if history is not None else History()
        self.total_steps = total_steps
        self.log_interval = log_interval or max(1000, total_steps // 100)
        self.start_step = start_step
        self.recent = deque((e["return"] for e in self.history.episodes[-100:]), maxlen=100)
        # The last 100 values of each extra, from the episodes that have it: an env may report
        # one only as some episodes end (Atari's game_score, when a lost life ends the game).
        self.recent_extras: dict[str, deque] = {}
        for episode in self.history.episodes:
            for key, value in episode.items():
                if key not in ("step", "return", "length"):
                    self.recent_extras.setdefault(key, deque(maxlen=100)).append(value)
        self.scalars: dict[str, float] = {}
        self.next_log = start_step + self.log_interval
        self.start_time = time.perf_counter()
        self._bar = None
        if progress and _interactive(sys.stderr):
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total_steps, initial=0, unit="step", dynamic_ncols=True,
                             smoothing=0.05, mininterval=0.5)
        # A log file, a batch job's output: a line per log interval instead of a bar, as Keras's
        # fit prints one line per epoch there (`_print_progress`).
        self._plain = progress and self._bar is None
        self._printed_step = None
        self._tb = None
        self._metrics_csv = self._episodes_csv = self._evaluations_csv = None

    def episode(self, step: int, episode_return: float, length: int, **extras) -> None:
        """Record a finished episode."""
        record = {"step": int(step), "return": float(episode_return), "length": int(length)}
        record.update({k: float(v) for k, v in extras.items()})
        self.history.episodes.append(record)
        self.recent.append(record["return"])
        for key, value in extras.items():
            self.recent_extras.setdefault(key, deque(maxlen=100)).append(float(value))
        if self.out_dir is not None:
            self._write_episode(record)

    def _write_episode(self, record: dict) -> None:
        with writing("log", self.out_dir / "episodes.csv"):
            self._append_episode(record)

    def _append_episode(self, record: dict) -> None:
        if self._episodes_csv is None:
            # Appended to: a resumed run continues the same file (readers keep, for each step,
            # the rows written last, so the episodes replayed after a crash are not counted twice).
            self._episodes_csv = GrowingCsv(self.out_dir / "episodes.csv")
        self._episodes_csv.write(record)

    def update(self, step: int, **metrics) -> None:
        """Record a training round (loss and whatever else the agent reports)."""
        record = {"step": int(step), **{k: float(v) for k, v in metrics.items()}}
        self.history.updates.append(record)
        self.scalars.update(metrics)

    def evaluation(self, step: int, summary: dict) -> None:
        """Record an evaluation of `fit(eval_every=...)` (what `Agent.evaluate` returned): in the
        History, `evaluations.csv`, TensorBoard (`eval/...`) and a line above the bar."""
        record = {"step": int(step), **{k: int(v) if k == "episodes" else float(v) for k, v in summary.items()}}
        self.history.evaluations.append(record)
        self._say(f"kerasrl: {evaluation_line(record)}")
        if self.out_dir is None:
            return
        with writing("log", self.out_dir / "evaluations.csv"):
            if self._evaluations_csv is None:
                self._evaluations_csv = GrowingCsv(self.out_dir / "evaluations.csv")
            self._evaluations_csv.write(record)
            self._evaluations_csv.flush()
        with writing("log", self.out_dir / "tensorboard"):
            if self._tb is None:
                self._tb = _TensorBoardFile(self.out_dir / "tensorboard")
            self._tb.write(step, {f"eval/{key}": value for key, value in record.items() if key != "step"})

    def note(self, message: str) -> None:
        """A diagnostic (kerasrl.diagnostics): a line above the progress bar, and in
        `diagnostics.log` of the run's folder."""
        self._say(f"kerasrl: {message}")
        if self.out_dir is not None:
            with writing("log", self.out_dir / "diagnostics.log"), \
                    open(self.out_dir / "diagnostics.log", "a") as log:
                log.write(message + "\n")

    def _say(self, line: str) -> None:
        """A line above the bar (tqdm.write, on stdout), or on stdout where there is no bar."""
        if self._bar is not None:
            self._bar.write(line)
        elif self._plain:
            print(line, flush=True)

    def set(self, **scalars) -> None:
        """Current values to show and log (epsilon, learning rate, ...)."""
        self.scalars.update(scalars)

    def summary(self) -> dict[str, float]:
        """The figures shown on the bar and written to the CSV."""
        elapsed = time.perf_counter() - self.start_time
        row = {"episodes": len(self.history.episodes),
               "mean_return_100": float(np.mean(self.recent)) if self.recent else math.nan}
        for key, values in self.recent_extras.items():
            row[f"mean_{key}_100"] = float(np.mean(values)) if values else math.nan
        row.update(self.scalars)
        row["time_s"] = elapsed
        return row

    def advance(self, step: int, n: int) -> None:
        """Called after every vector step: `step` is the env step count now, `n` steps were taken."""
        if self._bar is not None:
            self._bar.update(n)
        if step >= self.next_log:
            self.next_log += self.log_interval * max(1, (step - self.next_log) // self.log_interval + 1)
            self._log(step)

    def _log(self, step: int) -> None:
        row = self.summary()
        elapsed = row["time_s"]
        row["steps_per_s"] = (step - self.start_step) / elapsed if elapsed > 0 else math.nan
        if self._bar is not None or self._plain:
            shown = {"ep": row["episodes"], "ret100": f"{row['mean_return_100']:.1f}"}
            for key in row:
                if key.startswith("mean_") and key != "mean_return_100":
                    shown[key[5:-4]] = f"{row[key]:.2f}"
            for key in ("epsilon", "loss"):
                if key in row:
                    shown[key[:3] if key == "epsilon" else key] = f"{row[key]:.3g}"
            if self._bar is not None:
                self._bar.set_postfix(shown, refresh=False)
            else:
                self._print_progress(step, row, shown)
        if self.out_dir is None:
            return
        with writing("log", self.out_dir / "metrics.csv"):
            if self._metrics_csv is None:
                self._metrics_csv = GrowingCsv(self.out_dir / "metrics.csv")
            self._metrics_csv.write({"step": step, **row})
            self._metrics_csv.flush()
        if self._episodes_csv is not None:
            with writing("log", self.out_dir / "episodes.csv"):
                self._episodes_csv.flush()
        with writing("log", self.out_dir / "tensorboard"):
            if self._tb is None:
                self._tb = _TensorBoardFile(self.out_dir / "tensorboard")
            self._tb.write(step, {f"train/{key}": value for key, value in row.items()
                                  if isinstance(value, (int, float)) and math.isfinite(value)})

    def _print_progress(self, step: int, row: dict, shown: dict) -> None:
        """The bar's line where there is no bar: steps done of this fit's, rate, time elapsed and
        left, the bar's figures; on stderr, where tqdm draws. Once per step (close logs again)."""
        if step == self._printed_step:
            return
        self._printed_step = step
        done, rate = step - self.start_step, row["steps_per_s"]
        left = (self.total_steps - done) / rate if rate > 0 else math.nan
        figures = ", ".join(f"{key}={value}" for key, value in shown.items())
        print(f"{done}/{self.total_steps} steps ({100 * done / max(1, self.total_steps):.0f}%), {rate:.0f} "
              f"steps/s, {_duration(row['time_s'])} elapsed, {_duration(left)} left: {figures}",
              file=sys.stderr, flush=True)

    def close(self, step: int, quiet: bool = False) -> None:
        """Write the last row, close the files and let the run folder go. A write that fails
        raises WriteError after everything is closed; `quiet` (fit ending on another error, the
        one to report) drops it."""
        failed = None
        try:
            self._log(step)
        except WriteError as error:
            failed = error
        if self._bar is not None:
            self._bar.close()
        for name, file in (("metrics.csv", self._metrics_csv), ("episodes.csv", self._episodes_csv),
                           ("evaluations.csv", self._evaluations_csv), ("tensorboard", self._tb)):
            if file is not None:
                try:
                    with writing("log", self.out_dir / name):
                        file.close()
                except WriteError as error:
                    failed = failed or error
        self._metrics_csv = self._tb = self._episodes_csv = self._evaluations_csv = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        if failed is not None and not quiet:
            raise failed


class GrowingCsv:
    """A CSV appended to row by row whose columns may grow: a row with a column the file lacks
    (an env figure first reported at the 50th episode, a running mean that starts with it)
    rewrites the file once with the wider header, earlier rows blank there, atomically (a
    temporary file replaces it), so nothing written is lost. A file that exists is continued
    under its own header."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.fields: list[str] = []
        self._file = self._writer = None

    def write(self, row: dict) -> None:
        if self._file is None:
            self._open()
        new = [key for key in row if key not in self.fields]
        if new:
            self._widen(new)
        self._writer.writerow(row)

    def _open(self) -> None:
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, newline="") as existing:
                self.fields = next(csv.reader(existing), [])
        self._file = open(self.path, "a", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=self.fields)

    def _widen(self, new: list[str]) -> None:
        self._file.close()
        rows = []
        if self.fields:
            with open(self.path, newline="") as existing:
                rows = list(csv.DictReader(existing))
        self.fields = self.fields + new
        wider = self.path.with_name(self.path.name + ".tmp")
        with open(wider, "w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=self.fields)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(wider, self.path)
        self._open()

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = self._writer = None


class _TensorBoardFile:
    """TensorBoard scalars written and flushed in the caller's thread (tensorboardX's
    SummaryWriter writes in a thread of its own, where a full disk kills the thread and the next
    rows block on its queue instead of raising)."""

    def __init__(self, folder: Path):
        with backend.unused_frameworks_hidden():  # tensorboardX imports PyTorch if it can
            from tensorboardX.event_file_writer import EventsWriter

        folder.mkdir(parents=True, exist_ok=True)
        self._writer = EventsWriter(str(folder / "events"))  # events.out.tfevents.<time>.<host>

    def write(self, step: int, scalars: dict[str, float]) -> None:
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.summary import scalar

        now = time.time()
        for tag, value in scalars.items():
            self._writer.write_event(Event(wall_time=now, step=int(step), summary=scalar(tag, value)))
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
