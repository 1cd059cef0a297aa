"""Runs worker scripts one after another in this process, under its KERAS_BACKEND.

    python tests/backend_jobs.py JOBS.json

JOBS.json is a list of {"name", "worker", "args", "out_dir", "env" (optional)}: each job runs
`worker` as `KEY=VALUE... python worker *args` would (as __main__, with that sys.argv and those
environment variables). A job that raises writes `failed-<backend>.txt` in its out_dir (the
traceback) and the next job still runs; one that finishes writes `done-<backend>` there (its
seconds, where the cross-backend pass's time goes). See
backend_processes.session_jobs.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the workers import their neighbours


def main(jobs_file: str) -> int:
    from kerasrl import backend

    failed = 0
    for job in json.loads(Path(jobs_file).read_text()):
        out_dir = Path(job["out_dir"])
        environ = dict(os.environ)
        os.environ.update(job.get("env", {}))
        sys.argv = [job["worker"], *job["args"]]
        start = time.perf_counter()
        try:
            runpy.run_path(job["worker"], run_name="__main__")
        except BaseException:  # noqa: BLE001 - recorded for the job's tests, the next job runs
            (out_dir / f"failed-{backend.NAME}.txt").write_text(traceback.format_exc())
            failed = 1
        else:
            (out_dir / f"done-{backend.NAME}").write_text(f"{time.perf_counter() - start:.1f} s\n")
        finally:
            os.environ.clear()
            os.environ.update(environ)
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
