#!/usr/bin/env python3
"""The two commands of the README, for a fresh machine with only Python 3.11 and pip.

    python3 run.py demo    install everything into .venv, train DQN on CartPole-v1, print the evaluation
    python3 run.py test    install everything into .venv, run the test suite (fast tier, every backend):
                           the JAX pass, and (when given no pytest arguments) the two steps below
                           beside it; two lanes side by side, one core each
    python3 run.py slow    the slow tier: learning runs to real thresholds, the other backends'
                           learning runs, the docs with every command in a fresh process, and the
                           fast-paths-off and lowest-versions steps below
    python3 run.py bench   install the benchmark peers (Stable-Baselines3, SBX) and run the benchmarks
    python3 run.py gpu     the GPU tier (tests marked `gpu`, tests/test_gpu.py) on every backend, on a
                           machine with a GPU and the frameworks' CUDA builds in .venv (docs/gpu.md);
                           where a backend sees no GPU its tests are skipped, saying so

Steps of `run.py test` and `run.py slow`, each also a command of its own:

    python3 run.py other-backends  the tests marked `backend` on TensorFlow and PyTorch
    python3 run.py cross-backend   the tests that start every backend in its own processes
    python3 run.py jax-beside      the other lane's tests under JAX, in one pytest process:
                                   the cross-backend and packaging tests, and the JAX pass's
                                   tests marked `other_lane` (Ray, hindsight, backend choice, tuning)
    python3 run.py no-fast-paths   parity and short learning tests with KERASRL_FAST_PATHS=0
                                   (public framework APIs only, as after a fast path fails)
    python3 run.py package         the README's install blocks as written, each into an empty
                                   virtual environment (the wheel with the jax extra alone; the
                                   checkout), and its quick start run there
    python3 run.py lowest          install the lowest versions that pyproject.toml allows
                                   (constraints-lowest.txt) into .venv-lowest and run a smoke
                                   subset on every backend there

Installation is skipped when pyproject.toml and the constraints file have not changed since the
last one.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
LOWEST_VENV = ROOT / ".venv-lowest"
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
    # JAX's persistent compilation cache: agents made afresh in test after test compile the same
    # programs again (new closures miss jit's in-memory cache; this one is keyed by the program).
    # Measured: the DQN and SARSA tests 15% faster from a cold cache in one run.
    "JAX_COMPILATION_CACHE_DIR": str(ROOT / ".jax_cache"),
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
}

# The fast-paths-off step: the tests that show the public-API paths give the same numbers and
# still learn. The DQN-family parity test runs every backend in its own process, so one run covers
# all three (the fast paths are the learners' shared compiled-function machinery; each backend's
# test_fast_paths_off_gives_the_results_of_the_fast_paths compares the two directly, so PPO's and
# the continuous learners' parity follow); one short learning check per algorithm (DQN with every
# variant flag, SARSA, Gaussian PPO) runs on the two backends that have fast paths.
PARITY_TESTS = ("tests/test_parity.py",)
LEARNING_TESTS = ("tests/agents/test_dqn.py", "tests/agents/test_sarsa.py",
                  "tests/agents/test_ppo.py")
LEARNING_SELECTION = ("(test_dqn and double_dueling_n_step_prioritized_learns) or"
                      " (test_sarsa and learns_identity_env) or (test_ppo and continuous_target)")

# The TensorFlow and PyTorch passes: the tests marked `backend`, except those marked
# `slow_on_other_backends` (learning runs and in-process resumes of the algorithms whose every
# update the parity tests show equal to JAX's: they run on JAX in the fast tier, on the other two
# in the slow tier).
OTHER_BACKENDS_FAST = "backend and not slow and not slow_on_other_backends"
# The JAX pass: everything of the fast tier but the tests that start every backend themselves and
# the clean installs (steps of their own).
JAX_PASS_MARKERS = "not slow and not cross_backend and not packaging and not other_lane"
# The other lane's tests under JAX (run.py jax-beside), in one pytest process: each pytest process
# pays about 10 s of starting and collecting the test files, and the lane ran three.
JAX_BESIDE_MARKERS = "not slow and (cross_backend or packaging or other_lane)"
OTHER_BACKENDS_SLOW = "backend and (slow or slow_on_other_backends)"

# CI's two lanes (`run.py test` without arguments), one core each, balanced by the last CI log's
# step times: the JAX pass and then JAX_LANE_AFTER in one, OTHER_LANE in the other. The CI of
# 2264844 here: JAX pass 1,571 s; TensorFlow and PyTorch 664 s, cross-backend 764 s, packaging
# 79 s. The cross-backend pass then took about 120 s less (its workers share one process per
# backend), so the JAX pass hands it test files (tests/conftest.py OTHER_LANE_FILES, marker
# `other_lane`; about 110 s). The CI of 09a484b: both lanes 1,298 s; TensorFlow's tracing then lost AutoGraph (its pass and
# workers about 60 s less), so the JAX pass hands over test_hindsight.py too (about 32 s). After
# five documents went to the slow tier (about 60 s of the JAX pass), test_backend_select.py and
# test_tune.py (about 16 s) went the other way.
JAX_LANE_AFTER: tuple[str, ...] = ()
OTHER_LANE = ("other-backends", "jax-beside")

# The lowest-versions step: a smoke subset of what differs most between library versions, a few
# minutes on every backend: keras.ops against numpy, Adam against Keras's, Gymnasium's vector API,
# short DQN and Gaussian PPO learning, Keras saving and loading (subclassed, conv + batch norm),
# exact resume of a SARSA checkpoint, and the TensorFlow backend's private-API fast paths. PyTorch's
# are left out: torch is pinned, and with Keras before 3.15 the DQN round runs eagerly (Keras's
# PyTorch slice_update reads its start index into Python), which those tests count as a failure.
LOWEST_TESTS = ("tests/test_losses.py", "tests/test_optim.py", "tests/envs/test_wrappers.py",
                "tests/agents/test_dqn.py", "tests/agents/test_sarsa.py",
                "tests/agents/test_ppo.py",
                "tests/test_policy_io.py", "tests/test_backend_tensorflow.py")
LOWEST_SELECTION = ("(test_losses or test_optim or test_wrappers or (test_dqn and identity_env)"
                    " or hard_sync or continuous_target or registered_subclassed_model_round"
                    " or conv_batchnorm or (checkpoint_resumes_exactly and not Expected)"
                    " or test_backend_tensorflow) and not pass_under and not fast_paths_off")
# Installed in .venv-lowest besides kerasrl[all]: the test runner, at the dev extra's floors.
LOWEST_TEST_TOOLS = ("pytest", "pytest-timeout")
# The requirements of pyproject.toml whose floors .venv-lowest installs.
LOWEST_EXTRAS = ("jax", "tensorflow", "torch")


def venv_python(folder: Path) -> Path:
    return folder / ("Scripts" if os.name == "nt" else "bin") / "python"


PYTHON = venv_python(VENV)
BIN = PYTHON.parent


def run(*cmd, env=None) -> int:
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.call([str(c) for c in cmd], cwd=ROOT, env=env)


def step(title: str, start: float, failed: int) -> int:
    print(f"== {title}: {'FAILED' if failed else 'passed'} in {time.monotonic() - start:.0f} s",
          flush=True)
    return failed


def install_into(folder: Path, constraints: str, requirements: list[str], stamp_name: str,
                 pip_options: tuple[str, ...] = ()) -> None:
    """Create `folder` and install `requirements` pinned by `constraints`, unless done already."""
    with _locked(folder):  # the lowest-versions venv may be installing in another lane
        _install_into(folder, constraints, requirements, stamp_name, pip_options)


@contextlib.contextmanager
def _locked(folder: Path):
    """An exclusive lock on `folder`'s installation (POSIX; elsewhere no lock is taken)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _install_into(folder: Path, constraints: str, requirements: list[str], stamp_name: str,
                  pip_options: tuple[str, ...]) -> None:
    digest = hashlib.sha256()
    for name in ("pyproject.toml", constraints):
        digest.update((ROOT / name).read_bytes())
    digest.update(" ".join([*requirements, *pip_options]).encode())
    stamp = folder / f".installed-{stamp_name}"
    if stamp.exists() and stamp.read_text() == digest.hexdigest():
        return
    python = venv_python(folder)
    if not python.exists():
        print(f"Creating {folder}", flush=True)
        venv.create(folder, with_pip=True)
    # pip compiles every installed module's bytecode on one core (about 110 s of a 205 s install
    # here); compileall does the same on every core afterwards (about 50 s on two).
    code = run(python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-compile",
               *pip_options, "-c", constraints, *requirements)
    if code:
        sys.exit(f"Installation into {folder.name} failed (exit {code}).")
    compile_bytecode(python)
    stamp.write_text(digest.hexdigest())


def compile_bytecode(python: Path) -> None:
    """Bytecode for every module installed for `python`, as pip's install would have written it
    (a file that does not compile, as some packages ship, is skipped, as pip skips it)."""
    site_packages = subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        text=True).strip()
    subprocess.call([str(python), "-m", "compileall", "-qq", "-j", "0", site_packages], cwd=ROOT)


def install(extras: str = "dev") -> None:
    """Create .venv and install kerasrl with `extras`, pinned by constraints.txt (torch==2.13.0)."""
    install_into(VENV, "constraints.txt", ["-e", f".[{extras}]"], extras)
    install_chromium()


CHROMIUM = Path("/usr/bin/chromium")


def install_chromium() -> None:
    """Debian's chromium, which the `kerasrl watch` browser tests drive through Playwright (it
    downloads no browser), when it is missing and apt-get is there to install it."""
    if CHROMIUM.exists() or not shutil.which("apt-get"):
        return
    apt = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if run("apt-get", "update", "-q", env=apt) or run("apt-get", "install", "-y", "-q", "chromium",
                                                       env=apt):
        print(f"Could not install chromium: the browser tests will fail until {CHROMIUM} exists "
              f"(apt-get install chromium, as root).", flush=True)


# ---------------------------------------------------------------------------------------------
# Floors: constraints-lowest.txt pins exactly the floors that pyproject.toml declares.

def _version(text: str) -> tuple:
    """A release number for comparison: "2.16" == "2.16.0"."""
    parts = [int(p) for p in text.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _pins(path: Path) -> dict[str, str]:
    """{name: version} of a constraints file of `name==version` lines."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[_normal(name)] = version.strip()
    return pins


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def declared_floors(pyproject: Path) -> tuple[dict[str, str], list[str]]:
    """{name: floor} of kerasrl's dependencies, its backend extras and its test runner (the dev
    extra's pytest and pytest-timeout), and the problems found while reading them."""
    project = tomllib.loads(pyproject.read_text())["project"]
    extras = project["optional-dependencies"]
    requirements = list(project["dependencies"])
    for extra in LOWEST_EXTRAS:
        requirements += extras[extra]
    requirements += [r for r in extras["dev"]
                     if _normal(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) in LOWEST_TEST_TOOLS]
    floors, problems = {}, []
    for requirement in requirements:
        match = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*>=\s*([0-9][0-9.]*)\s*(;.*)?$", requirement)
        if not match:
            problems.append(f"pyproject.toml: {requirement!r} has no plain `>=` floor")
            continue
        name, floor = _normal(match[1]), match[2]
        if name in floors and _version(floors[name]) != _version(floor):
            problems.append(f"pyproject.toml: {name} has two floors, {floors[name]} and {floor}")
        floors[name] = floor
    # One floor for TensorFlow: tensorflow-cpu on Linux x86-64 (installed here), tensorflow
    # elsewhere.
    if "tensorflow" in floors and _version(floors.pop("tensorflow")) != _version(
            floors.get("tensorflow-cpu", "0")):
        problems.append("pyproject.toml: the tensorflow and tensorflow-cpu floors differ")
    return floors, problems


def floor_problems(pyproject: Path = ROOT / "pyproject.toml",
                   lowest: Path = ROOT / "constraints-lowest.txt",
                   constraints: Path = ROOT / "constraints.txt") -> list[str]:
    """Where constraints-lowest.txt and pyproject.toml's floors disagree (empty when they agree).

    Every floor is pinned at exactly its version, with two exceptions: torch is this repository's
    one build (constraints.txt, never another: an unpinned torch is a multi-GB CUDA download) and
    must be at or above its floor; jaxlib is pinned at jax's version."""
    floors, problems = declared_floors(pyproject)
    pins = _pins(lowest)
    repository_torch = _pins(constraints).get("torch")
    for name, floor in floors.items():
        pin = pins.get(name)
        if pin is None:
            problems.append(f"{lowest.name} does not pin {name} (pyproject.toml: >={floor})")
        elif name == "torch":
            if pin != repository_torch:
                problems.append(f"{lowest.name} pins torch=={pin}, {constraints.name} "
                                f"torch=={repository_torch}: they must be the same build")
            if _version(pin) < _version(floor):
                problems.append(f"{lowest.name} pins torch=={pin}, below its floor {floor}")
        elif _version(pin) != _version(floor):
            problems.append(f"{lowest.name} pins {name}=={pin}, pyproject.toml's floor is {floor}")
    if "jaxlib" in pins and pins["jaxlib"] != pins.get("jax"):
        problems.append(f"{lowest.name}: jaxlib=={pins['jaxlib']} is not jax's version")
    for name in pins.keys() - floors.keys() - {"jaxlib"}:
        problems.append(f"{lowest.name} pins {name}, which pyproject.toml's floors do not name")
    return problems


def install_lowest() -> None:
    """Create .venv-lowest with the lowest versions that pyproject.toml allows."""
    problems = floor_problems()
    if problems:
        sys.exit("constraints-lowest.txt and pyproject.toml disagree:\n  " + "\n  ".join(problems))
    # Wheels only: old releases would otherwise build from source for minutes, or fail to.
    install_into(LOWEST_VENV, "constraints-lowest.txt",
                 ["-e", ".[" + ",".join(LOWEST_EXTRAS) + "]", *LOWEST_TEST_TOOLS], "lowest",
                 ("--only-binary=:all:",))


# ---------------------------------------------------------------------------------------------

def test_env(backend: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, **THREAD_ENV, "KERAS_BACKEND": backend, **extra}
    env.pop("PYTHONPATH", None)
    # Bytecode is written for the tests and kerasrl's sources (pytest's rewritten test modules
    # too): where the shell sets PYTHONDONTWRITEBYTECODE, every pytest process rewrote the asserts
    # of every test module again, about 2.5 s a process here, and every process compiled kerasrl.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def pytest_command(python: Path = PYTHON) -> list:
    # --durations: every CI log names the slowest tests, where the 30-minute budget goes.
    return [python, "-m", "pytest", "-p", "no:cacheprovider", "--durations=30"]


def demo() -> int:
    install()
    return run(BIN / "kerasrl", "train", "--preset", "cartpole-dqn", "--out", "runs/demo",
               env={**os.environ, **THREAD_ENV})


def test(extra_args: list[str]) -> int:
    """The fast tier: everything once on the default backend (JAX), every backend-dependent test
    (marker `backend`) on TensorFlow and PyTorch too, and the cross-backend tests.

    A pytest process holds one core (one thread per library), so CI runs two lanes side by side on
    the 2-core machine: the JAX pass (and JAX_LANE_AFTER) here, OTHER_LANE in the background."""
    install()
    start = time.monotonic()
    pytest = pytest_command()
    # The backend-module files rerun themselves under their own backend from a JAX-only pytest;
    # the TensorFlow and PyTorch passes run them natively, so the JAX pass leaves the reruns out.
    jax_pass = [*pytest, *extra_args, "-k", "not backend_tests_pass_under"]
    if extra_args:  # a developer's selection: the three passes one after another
        failed = run(*jax_pass, env=test_env("jax"))
        failed |= other_backends(extra_args)
        return step("fast tier on every backend", start, failed)
    other_lane = start_logged("lane", *OTHER_LANE)
    failed = step("JAX pass", start, run(*jax_pass, "-m", JAX_PASS_MARKERS, env=test_env("jax")))
    failed |= lane(JAX_LANE_AFTER)
    failed |= step(f"{', '.join(OTHER_LANE)} (the other lane)", start,
                   finish_logged(*other_lane))
    print(("All test runs passed" if not failed else "Some test runs FAILED") +
          f" ({time.monotonic() - start:.0f} s).", flush=True)
    return 1 if failed else 0


def jax_beside(extra_args: list[str]) -> int:
    """The other lane's tests under JAX in one pytest process (JAX_BESIDE_MARKERS): the
    cross-backend tests, the clean installs (`cross-backend` and `package` alone) and the JAX
    pass's tests marked `other_lane`."""
    install()
    start = time.monotonic()
    failed = run(*pytest_command(), *extra_args, "-m", JAX_BESIDE_MARKERS, env=test_env("jax"))
    return step("cross-backend, packaging and other-lane tests", start, failed)


def cross_backend(extra_args: list[str]) -> int:
    """The tests that run every backend in processes of their own (marker `cross_backend`:
    parity, same seed, cross-backend checkpoints and policies, `kerasrl compare`)."""
    install()
    start = time.monotonic()
    failed = run(*pytest_command(), *extra_args, "-m", "cross_backend and not slow",
                 env=test_env("jax"))
    return step("cross-backend tests", start, failed)


def other_backends(extra_args: list[str]) -> int:
    """Every backend-dependent test (marker `backend`) on TensorFlow and on PyTorch."""
    install()
    start = time.monotonic()
    failed = 0
    for name in BACKENDS[1:]:
        failed |= run(*pytest_command(), *extra_args, "-m", OTHER_BACKENDS_FAST,
                      env=test_env(name))
    return step("TensorFlow and PyTorch passes", start, failed)


def lane(commands: list[str]) -> int:
    """The run.py `commands` one after another (all of them, whatever fails); 1 if any failed."""
    return max((COMMANDS[command]([]) for command in commands), default=0)


def start_logged(command: str, *args: str) -> tuple[str, subprocess.Popen, Path]:
    """`python3 run.py command` in the background, its output to a log file under .venv-lowest/logs
    (printed whole by `finish_logged`, so that two steps' outputs do not interleave)."""
    logs = LOWEST_VENV / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{'-'.join((command, *args))}.log"
    print(f"+ run.py {command} (in the background, output to {log.relative_to(ROOT)})", flush=True)
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, __file__, command, *args], cwd=ROOT, stdout=out,
                                   stderr=subprocess.STDOUT)
    return command, process, log


def finish_logged(command: str, process: subprocess.Popen, log: Path) -> int:
    code = process.wait()
    print(f"---- run.py {command} (exit {code}) ----", flush=True)
    print(log.read_text(errors="replace"), flush=True)
    return 1 if code else 0


def no_fast_paths(extra_args: list[str]) -> int:
    """The parity tests and the short learning checks with KERASRL_FAST_PATHS=0: every private
    framework API off (TorchScript replay, make_fx and the oneDNN op on PyTorch; `_call_flat` and
    `_numpy` on TensorFlow), so the public fallback is known to give the same results."""
    install()
    start = time.monotonic()
    pytest = pytest_command()
    off = {"KERASRL_FAST_PATHS": "0"}
    failed = run(*pytest, *extra_args, *PARITY_TESTS, env=test_env("jax", **off))
    for name in BACKENDS[1:]:
        failed |= run(*pytest, *extra_args, "-m", "backend and not slow", "-k", LEARNING_SELECTION,
                      *LEARNING_TESTS, env=test_env(name, **off))
    return step("fast paths off (KERASRL_FAST_PATHS=0)", start, failed)


def package(extra_args: list[str]) -> int:
    """kerasrl as a user installs it (tests/test_packaging.py): the README's install blocks as
    written, each into an empty virtual environment (the wheel with the `jax` extra alone, and the
    checkout), and the README's quick start run in the wheel's."""
    install()
    start = time.monotonic()
    failed = run(*pytest_command(), *extra_args, "-m", "packaging and not slow",
                 "tests/test_packaging.py", env=test_env("jax"))
    return step("packaging (clean installs)", start, failed)


def lowest(extra_args: list[str]) -> int:
    """The smoke subset on every backend in .venv-lowest (the lowest allowed versions)."""
    start = time.monotonic()
    install_lowest()
    print(f"== .venv-lowest ready in {time.monotonic() - start:.0f} s", flush=True)
    pytest = pytest_command(venv_python(LOWEST_VENV))
    selection = ("-k", LOWEST_SELECTION, *LOWEST_TESTS) if not extra_args else ()
    failed = run(*pytest, *extra_args, *selection, env=test_env("jax"))
    for name in BACKENDS[1:]:
        failed |= run(*pytest, *extra_args, "-m", "backend and not slow", *selection,
                      env=test_env(name))
    return step("lowest versions (constraints-lowest.txt)", start, failed)


def slow(extra_args: list[str]) -> int:
    """The slow tier: every slow test on the default backend, the backend-dependent ones on
    TensorFlow and PyTorch too."""
    install()
    pytest = pytest_command()
    failed = run(*pytest, *extra_args, "-m", "slow", env=test_env("jax"))
    for name in BACKENDS[1:]:
        failed |= run(*pytest, *extra_args, "-m", OTHER_BACKENDS_SLOW, env=test_env(name))
    if not extra_args:
        # the docs once more, every command in a fresh process as a user types it
        failed |= run(*pytest, "tests/test_docs.py",
                      env=test_env("jax", KERASRL_DOC_CLI="subprocess"))
        failed |= no_fast_paths([])
        failed |= lowest([])
    return 1 if failed else 0


def bench(extra_args: list[str]) -> int:
    install("bench")
    return run(PYTHON, "benchmarks/run_all.py", *extra_args, env={**os.environ, **THREAD_ENV})


def gpu(extra_args: list[str]) -> int:
    """The GPU tier on each backend in its own process: CPU and GPU runs of one seed agree, DQN,
    PPO and SAC learn on the GPU, checkpoints cross between GPU and CPU, ONNX exports agree.
    JAX does not take 75 % of the GPU at start-up (XLA_PYTHON_CLIENT_PREALLOCATE=false): Keras
    imports JAX on every backend, and PyTorch's process needs the memory.

    `--here`: run with this Python and the packages it sees (a GPU machine with the frameworks'
    CUDA builds installed its own way; PYTHONPATH kept), installing nothing; `--backends B...`
    picks backends (default all three); `--parallel` runs the backends side by side."""
    import argparse

    options = argparse.ArgumentParser(prog="run.py gpu", add_help=False)
    options.add_argument("--here", action="store_true")
    options.add_argument("--parallel", action="store_true")
    options.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    opts, extra_args = options.parse_known_args(extra_args)  # the rest goes to pytest
    here, parallel, names = opts.here, opts.parallel, opts.backends
    if not here:
        install()
    python = Path(sys.executable) if here else PYTHON
    start = time.monotonic()

    def env_for(name: str) -> dict[str, str]:
        env = test_env(name, XLA_PYTHON_CLIENT_PREALLOCATE="false")
        if here and "PYTHONPATH" in os.environ:
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        return env

    commands = [[*pytest_command(python), *extra_args, "-m", "gpu", "tests/test_gpu.py", "-rA"]
                for _ in names]
    if not parallel:
        failed = 0
        for name, cmd in zip(names, commands):
            failed |= run(*cmd, env=env_for(name))
        return step("GPU tier", start, failed)
    procs = []
    for name, cmd in zip(names, commands):
        print("+", name, " ".join(map(str, cmd)), flush=True)
        log = open(ROOT / f".gpu-tier-{name}.log", "w")  # noqa: SIM115 - read back below
        procs.append((name, subprocess.Popen([str(c) for c in cmd], cwd=ROOT, env=env_for(name),
                                             stdout=log, stderr=subprocess.STDOUT), log))
    failed = 0
    for name, proc, log in procs:
        failed |= proc.wait()
        log.close()
        print(f"---- {name}", flush=True)
        print((ROOT / f".gpu-tier-{name}.log").read_text()[-6000:], flush=True)
    return step("GPU tier", start, failed)


COMMANDS = {"test": test, "slow": slow, "bench": bench, "gpu": gpu, "no-fast-paths": no_fast_paths,
            "lowest": lowest, "package": package, "other-backends": other_backends, "cross-backend": cross_backend,
            "jax-beside": jax_beside, "lane": lane}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in ("demo", "install", "install-lowest", *COMMANDS):
        print(__doc__)
        return 2
    command, rest = sys.argv[1], sys.argv[2:]
    if command == "install":
        install()
        return 0
    if command == "install-lowest":
        install_lowest()
        return 0
    if command == "demo":
        return demo()
    return COMMANDS[command](rest)


if __name__ == "__main__":
    sys.exit(main())
