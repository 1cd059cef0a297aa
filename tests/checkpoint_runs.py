"""The checkpoint worker's runs (tests/checkpoint_worker.py), made once per test session.

Every backend's `first` (whole runs, first halves saved, policies saved), then on every backend in
a fresh process `second` (loads, second halves on the same and on other backends, cross-backend
policy loads). Several test modules read the results; a session fixture defined in each of them
would run the workers once per module, so the folder is cached here.
"""

from __future__ import annotations

from pathlib import Path

from backend_processes import BACKENDS, JOB_SOURCES, run_under_backend, session_jobs

WORKER = Path(__file__).with_name("checkpoint_worker.py")
_DONE: dict[str, Path] = {}


def run_worker(mode: str, backend: str, path: Path, timeout=900, cases=None) -> None:
    env = None if cases is None else {"KERASRL_CHECKPOINT_CASES": ",".join(cases)}
    run_under_backend(backend, WORKER, mode, path, timeout=timeout, env=env)


def checkpoint_runs(request, tmp_path_factory) -> Path:
    """The folder of every worker result, made on the first call of the session: the cross-backend
    cases (DQN on CartPole, PPO) and the other cases that the session's tests ask for. The first
    halves run with the session's other workers (backend_processes.session_jobs), the second
    halves in fresh processes of their own after them."""
    if "out" not in _DONE:
        out, failures = session_jobs(request, tmp_path_factory)["checkpoint_runs"]
        assert not failures, "\n".join(f"{backend} first failed:\n{text}"
                                        for backend, text in failures.items())
        for backend in BACKENDS:
            run_worker("second", backend, out, cases=_cases(request))
        _DONE["out"] = out
    return _DONE["out"]


def _cases(request) -> list[str]:
    asked = [getattr(item, "callspec", None) for item in request.session.items]
    cases = {"cartpole", "ppo"} | {callspec.params.get("case") for callspec in asked
                                   if callspec is not None}
    return sorted(c for c in cases if c)


def first_halves_job(request, tmp_path_factory) -> list[dict]:
    """The worker's `first` as a job of the session's backend processes, when a test of the
    session reads the results (its fixture `worker_runs`)."""
    items = request.session.items
    if not any("worker_runs" in getattr(item, "fixturenames", ()) for item in items):
        return []
    out = tmp_path_factory.mktemp("checkpoint_runs")
    return [{"name": "checkpoint_runs", "worker": str(WORKER), "args": ["first", str(out)],
             "out_dir": str(out), "env": {"KERASRL_CHECKPOINT_CASES": ",".join(_cases(request))}}]


JOB_SOURCES.append(first_halves_job)
