#!/usr/bin/env python3
"""The two commands of the README, for a fresh machine with only Python 3.11 and pip.

    python3 run.py demo    install everything into .venv, train DQN on CartPole-v1, print the evaluation
    python3 run.py test    install everything into .venv, run the test suite (fast tier, every backend)
    python3 run.py slow    the slow tier: learning runs to real thresholds
    python3 run.py bench   install the benchmark peers (Stable-Baselines3, SBX) and run the benchmarks

Installation is skipped when pyproject.toml and constraints.txt have not changed since the last one.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / "python"
BACKENDS = ("jax", "tensorflow", "torch")

# Small networks on a 2-core machine: one thread per library (PyTorch ran 15x slower at its default).
THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "KERASRL_TORCH_THREADS": "1",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1",
    # Keras writes its config under KERAS_HOME; keep it inside the repository.
    "KERAS_HOME": str(ROOT / ".keras_home"),
}


def run(*cmd, env=None) -> int:
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.call([str(c) for c in cmd], cwd=ROOT, env=env)


def install(extras: str = "dev") -> None:
    """Create .venv and install kerasrl with `extras`, pinned by constraints.txt (torch==2.13.0)."""
    digest = hashlib.sha256()
    for name in ("pyproject.toml", "constraints.txt"):
        digest.update((ROOT / name).read_bytes())
    digest.update(extras.encode())
    stamp = VENV / f".installed-{extras}"
    if stamp.exists() and stamp.read_text() == digest.hexdigest():
        return
    if not PYTHON.exists():
        print(f"Creating {VENV}", flush=True)
        venv.create(VENV, with_pip=True)
    code = run(PYTHON, "-m", "pip", "install", "--disable-pip-version-check", "-q",
               "-c", "constraints.txt", "-e", f".[{extras}]")
    if code:
        sys.exit(f"Installation failed (exit {code}).")
    stamp.write_text(digest.hexdigest())


def test_env(backend: str) -> dict[str, str]:
    env = {**os.environ, **THREAD_ENV, "KERAS_BACKEND": backend}
    env.pop("PYTHONPATH", None)
    return env


def demo() -> int:
    install()
    return run(BIN / "kerasrl", "train", "--preset", "cartpole-dqn", "--out", "runs/demo",
               env={**os.environ, **THREAD_ENV})


def test(extra_args: list[str]) -> int:
    """The fast tier: everything once on the default backend (JAX), then every backend-dependent
    test (marker `backend`) on TensorFlow and PyTorch too."""
    install()
    pytest = [PYTHON, "-m", "pytest", "-p", "no:cacheprovider", *extra_args]
    failed = run(*pytest, env=test_env("jax"))
    for name in BACKENDS[1:]:
        failed |= run(*pytest, "-m", "backend and not slow", env=test_env(name))
    print("All test runs passed." if not failed else "Some test runs FAILED.", flush=True)
    return 1 if failed else 0


def slow(extra_args: list[str]) -> int:
    """The slow tier: every slow test on the default backend, the backend-dependent ones on
    TensorFlow and PyTorch too."""
    install()
    pytest = [PYTHON, "-m", "pytest", "-p", "no:cacheprovider", *extra_args]
    failed = run(*pytest, "-m", "slow", env=test_env("jax"))
    for name in BACKENDS[1:]:
        failed |= run(*pytest, "-m", "slow and backend", env=test_env(name))
    return 1 if failed else 0


def bench(extra_args: list[str]) -> int:
    install("bench")
    return run(PYTHON, "benchmarks/run_all.py", *extra_args, env={**os.environ, **THREAD_ENV})


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in ("demo", "test", "slow", "bench", "install"):
        print(__doc__)
        return 2
    command, rest = sys.argv[1], sys.argv[2:]
    if command == "install":
        install()
        return 0
    if command == "demo":
        return demo()
    return {"test": test, "slow": slow, "bench": bench}[command](rest)


if __name__ == "__main__":
    sys.exit(main())
