"""Running code under each Keras backend, one process per backend (a process cannot switch).

Used by the parity tests (one worker per backend writes .npz results, the test compares them) and
by the backend-module tests, which rerun their file under their own backend from the default run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

BACKENDS = ("jax", "tensorflow", "torch")


def run_under_backend(backend: str, *args, timeout: int = 900) -> None:
    """Run `python *args` with KERAS_BACKEND=backend; fail with its output if it fails."""
    env = {**os.environ, "KERAS_BACKEND": backend}
    proc = subprocess.run([sys.executable, *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, (f"{backend} run of {args} failed:\n"
                                  f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")


def assert_backend_tests_pass(test_file: str, backend: str) -> None:
    """The `backend`-marked tests of `test_file` pass under `backend`."""
    run_under_backend(backend, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "backend",
                      test_file)


def parity_results(worker: Path, out_dir: Path, cases, prefix: str = ""):
    """Run `worker out_dir *cases` on every backend; return `get(case) -> {backend: arrays}`."""
    for backend in BACKENDS:
        run_under_backend(backend, worker, out_dir, *cases)

    def get(case):
        runs = {}
        for backend in BACKENDS:
            with np.load(out_dir / f"{prefix}{case}-{backend}.npz", allow_pickle=False) as data:
                assert str(data["backend"]) == backend
                runs[backend] = {k: data[k] for k in data.files if k != "backend"}
        return runs

    return get


def relative_difference(a, b) -> float:
    return float(np.max(np.abs(a - b) / (np.abs(b) + 1e-6)))
