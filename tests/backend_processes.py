"""Running code under each Keras backend, one process per backend (a process cannot switch).

Used by the parity tests (one worker per backend writes .npz results, the test compares them) and
by the backend-module tests, which rerun their file under their own backend from the default run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

BACKENDS = ("jax", "tensorflow", "torch")


def run_under_backend(backend: str, *args, timeout: int = 900, env: dict | None = None) -> None:
    """Run `python *args` with KERAS_BACKEND=backend (and the variables `env`); fail with its
    output if it fails."""
    env = {**os.environ, **(env or {}), "KERAS_BACKEND": backend}
    proc = subprocess.run([sys.executable, *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, (f"{backend} run of {args} failed:\n"
                                  f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")


def assert_backend_tests_pass(test_file: str, backend: str) -> None:
    """The `backend`-marked tests of `test_file` pass under `backend`."""
    run_under_backend(backend, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "backend",
                      test_file)


def selected_cases(request, module, cases, always=()) -> tuple:
    """The `case` parameters of `module`'s tests that the session runs, and `always` (the cases of
    tests without one), in `cases`' order: a case marked slow is run by its worker only in the
    slow tier."""
    params = [getattr(item, "callspec", None) for item in request.session.items
              if getattr(item, "module", None) is module]
    chosen = {callspec.params.get("case") for callspec in params if callspec is not None}
    return tuple(case for case in cases if case in chosen or case in always)


def _reader(out_dir: Path, prefix: str, failures: dict[str, str]):
    """`get(case) -> {backend: arrays}`: each backend's `{prefix}{case}-{backend}.npz` in
    `out_dir`, or the workers' failures."""
    def get(case):
        if failures:
            raise AssertionError("\n".join(f"the {backend} worker failed:\n{text}"
                                           for backend, text in failures.items()))
        runs = {}
        for backend in BACKENDS:
            with np.load(out_dir / f"{prefix}{case}-{backend}.npz", allow_pickle=False) as data:
                assert str(data["backend"]) == backend
                runs[backend] = {k: data[k] for k in data.files if k != "backend"}
        return runs

    return get


# -- one process per backend for every worker of the session -----------------------------------
JOBS_RUNNER = Path(__file__).with_name("backend_jobs.py")
# Functions (request, tmp_path_factory) -> [job] that add other workers' jobs to the session's
# processes (tests/checkpoint_runs.py adds the checkpoint worker's first half).
JOB_SOURCES: list = []


class ParityRun:
    """A parity module's worker (`python WORKER OUT_DIR CASE...` on each backend) and its cases.

    A module assigns one to `PARITY` and its fixture returns `PARITY.results(...)`. The session's
    first such fixture runs the workers of every module of the session that has one (and the
    `JOB_SOURCES`' jobs), all of them in one process per backend (tests/backend_jobs.py):
    starting Python and importing Keras with each backend, and warming each up, cost the five
    parity modules about 110 s of their 410 when each ran its own three processes. The workers
    are scripts that set no global state, so running them one after another in a process gives
    what a process each gives."""

    def __init__(self, worker: Path, cases, *, always=(), prefix: str = ""):
        self.worker, self.cases, self.always, self.prefix = worker, tuple(cases), always, prefix

    def results(self, request, tmp_path_factory):
        """`get(case) -> {backend: arrays}` for this module's cases."""
        out_dir, failures = session_jobs(request, tmp_path_factory)[request.module.__name__]
        return _reader(out_dir, self.prefix, failures)


def session_jobs(request, tmp_path_factory) -> dict:
    """Run every worker job of the session once, one process per backend; return
    {job name: (its output folder, {backend: failure text})}."""
    done = getattr(request.session, "_kerasrl_backend_jobs", None)
    if done is not None:
        return done
    jobs, modules = [], {}
    for item in request.session.items:
        module = getattr(item, "module", None)
        if isinstance(getattr(module, "PARITY", None), ParityRun):
            modules.setdefault(module.__name__, module)
    for name, module in modules.items():
        run = module.PARITY
        out_dir = tmp_path_factory.mktemp(name)
        cases = selected_cases(request, module, run.cases, run.always)
        jobs.append({"name": name, "worker": str(run.worker), "args": [str(out_dir), *cases],
                     "out_dir": str(out_dir)})
    for source in JOB_SOURCES:
        jobs.extend(source(request, tmp_path_factory))
    jobs_file = tmp_path_factory.mktemp("backend_jobs") / "jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    done = {job["name"]: (Path(job["out_dir"]), {}) for job in jobs}
    for backend in BACKENDS:
        output = _run_jobs(backend, jobs_file)
        for out_dir, failures in done.values():
            failed = out_dir / f"failed-{backend}.txt"
            if failed.exists():
                failures[backend] = failed.read_text()
            elif not (out_dir / f"done-{backend}").exists():  # the process died before the job
                failures[backend] = output
    request.session._kerasrl_backend_jobs = done
    return done


def _run_jobs(backend: str, jobs_file: Path, timeout: int = 1800) -> str:
    env = {**os.environ, "KERAS_BACKEND": backend}
    proc = subprocess.run([sys.executable, str(JOBS_RUNNER), str(jobs_file)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    return f"exit {proc.returncode}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"


def relative_difference(a, b) -> float:
    return float(np.max(np.abs(a - b) / (np.abs(b) + 1e-6)))


# -- the backends' fast paths against their public fallbacks ------------------------------------
def dqn_fast_path_worker(out: Path, start: Path, *, hidden_sizes, batches, fast_paths_used) -> None:
    """A DQN learner's training rounds and acting from the weights in `start` (written there by
    the first run), results to `out`. Run in a fresh process per KERASRL_FAST_PATHS setting by
    `assert_fast_paths_match_public`; `batches(rng, n_steps)` makes a round's batches and
    `fast_paths_used(learner)` says which fast paths the learner took."""
    import kerasrl

    learner = kerasrl.DQN("CartPole-v1", seed=0, hidden_sizes=hidden_sizes, double_q=True).learner
    if start.exists():
        with np.load(start) as arrays:
            learner.load_arrays(dict(arrays))
    else:
        np.savez(start, **learner.arrays())
    rng = np.random.default_rng(0)
    results = {}
    for i, (n_steps, tau) in enumerate([(2, 1.0), (2, 0.0), (2, 0.5)]):  # one signature
        loss, td = learner.train(batches(rng, n_steps), 1e-3 * (i + 1), tau)
        results[f"loss{i}"], results[f"td{i}"] = np.float32(loss), td
    obs = rng.standard_normal((5, 4)).astype(np.float32)
    results.update(q=learner.q_values(obs), actions=learner.greedy_actions(obs),
                   **learner.arrays())
    results["fast_paths_used"] = np.array(fast_paths_used(learner))
    np.savez(out, **results)


def assert_fast_paths_match_public(backend: str, test_file, tmp_path: Path, monkeypatch) -> None:
    """`test_file` run as a script (its `dqn_fast_path_worker`) with the fast paths on and with
    KERASRL_FAST_PATHS=0, from the same start: the same results within the parity tolerance, and
    only the first run on the fast paths."""
    runs = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("KERASRL_FAST_PATHS", mode)
        run_under_backend(backend, test_file, tmp_path / f"fast-{mode}.npz", tmp_path / "start.npz")
        runs[mode] = dict(np.load(tmp_path / f"fast-{mode}.npz"))
    fast, public = runs["1"], runs["0"]
    assert fast.pop("fast_paths_used").all() and not public.pop("fast_paths_used").any()
    assert sorted(fast) == sorted(public)
    for key in fast:
        if fast[key].dtype.kind == "f":
            # As the parity tests measure weights: relative to the array's largest magnitude.
            scale = np.max(np.abs(fast[key])) + 1e-6
            assert np.max(np.abs(public[key] - fast[key])) / scale <= 1e-5, key
        else:
            np.testing.assert_array_equal(public[key], fast[key], err_msg=key)


def dqn_batches(rng, n_steps, batch_size=32):
    """Random DQN training batches for CartPole-shaped learners: (n_steps, batch_size, ...)."""
    return {
        "observations": rng.standard_normal((n_steps, batch_size, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, (n_steps, batch_size)).astype(np.int32),
        "rewards": rng.standard_normal((n_steps, batch_size)).astype(np.float32),
        "next_observations": rng.standard_normal((n_steps, batch_size, 4)).astype(np.float32),
        "discounts": np.full((n_steps, batch_size), 0.99, np.float32),
        "weights": np.ones((n_steps, batch_size), np.float32),
    }
