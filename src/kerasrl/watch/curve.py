"""A run's learning curve, read live from the `metrics.csv` that `kerasrl.logger.RunLogger` appends to."""

from __future__ import annotations

import csv
import math
from pathlib import Path

METRICS_FILE = "metrics.csv"
CURVE_FIELDS = ("step", "episodes", "mean_return_100")
"""The columns of metrics.csv that the page plots (env step, episodes ended, mean return of the
last 100 episodes)."""


def find_run_dir(path) -> Path | None:
    """The run folder of a run, one of its checkpoints or its best/ policy; None for a policy
    saved elsewhere. A run folder has config.json (written when `kerasrl train` starts) or
    metrics.csv (written by `fit(log_dir=...)`)."""
    path = Path(path)
    for folder in (path, path.parent, path.parent.parent):
        if (folder / "config.json").is_file() or (folder / METRICS_FILE).is_file():
            return folder
    return None


class MetricsTail:
    """Reads the rows added to a run's metrics.csv since the last call (the file may not exist yet:
    a run writes its first row after its first log interval).

    `read()` returns whole new rows only, as {field: float} for CURVE_FIELDS; a file that shrank
    (a new run in the same folder) or whose header changed (a column added) is read again from
    its start, and `restarted` says so.
    """

    def __init__(self, path):
        self.path = Path(path)
        self._offset = 0
        self._fields: list[str] | None = None
        self.restarted = False

    def read(self) -> list[dict[str, float]]:
        """The rows appended since the last call, in order."""
        self.restarted = False
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size == self._offset:
            return []  # nothing new: the usual poll, answered without opening the file
        if size < self._offset or (self._fields is not None and self._header() != self._fields):
            # A new run in the folder, or the logger widened the file for a new column
            # (kerasrl.logger.GrowingCsv rewrites it whole): read it again from its start.
            self._offset, self._fields, self.restarted = 0, None, True
        with open(self.path, "rb") as file:
            file.seek(self._offset)
            data = file.read(size - self._offset)
        complete = data[:data.rfind(b"\n") + 1]  # a row still being written waits for next time
        self._offset += len(complete)
        rows = []
        for values in csv.reader(complete.decode("utf-8", errors="replace").splitlines()):
            if not values:
                continue
            if self._fields is None:
                self._fields = values
                continue
            row = dict(zip(self._fields, values))
            point = {name: _number(row.get(name)) for name in CURVE_FIELDS}
            if math.isfinite(point["step"]):
                rows.append(point)
        return rows

    def _header(self) -> list[str] | None:
        with open(self.path, newline="", encoding="utf-8", errors="replace") as file:
            return next(csv.reader([file.readline()]), None)


def _number(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan
