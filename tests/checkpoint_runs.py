"""The checkpoint worker's runs (tests/checkpoint_worker.py), made once per test session.

Every backend's `first` (whole runs, first halves saved, policies saved), then on every backend in
a fresh process `second` (loads, second halves on the same and on other backends, cross-backend
policy loads). Several test modules read the results; a session fixture defined in each of them
would run the workers once per module, so the folder is cached here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).with_name("checkpoint_worker.py")
BACKENDS = ("jax", "tensorflow", "torch")
_DONE: dict[str, Path] = {}


def run_worker(mode: str, backend: str, path: Path, timeout=900, cases=None) -> None:
    env = {**os.environ, "KERAS_BACKEND": backend}
    if cases is not None:
        env["KERASRL_CHECKPOINT_CASES"] = ",".join(cases)
    proc = subprocess.run([sys.executable, str(WORKER), mode, str(path)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{backend} {mode} failed:\n{proc.stderr[-3000:]}"


def checkpoint_runs(request, tmp_path_factory) -> Path:
    """The folder of every worker result, made on the first call of the session: the cross-backend
    cases (DQN on CartPole, PPO) and the other cases that the session's tests ask for."""
    if "out" not in _DONE:
        out = tmp_path_factory.mktemp("checkpoint_runs")
        asked = [getattr(item, "callspec", None) for item in request.session.items]
        cases = {"cartpole", "ppo"} | {callspec.params.get("case") for callspec in asked
                                       if callspec is not None}
        for mode in ("first", "second"):
            for backend in BACKENDS:
                run_worker(mode, backend, out, cases=sorted(c for c in cases if c))
        _DONE["out"] = out
    return _DONE["out"]
