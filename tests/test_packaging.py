"""kerasrl as a user installs it: the README's install blocks run as written in clean virtual
environments, then its quick start runs there (`python3 run.py package`; CI runs it in the JAX lane).

- The wheel block (`pip wheel --no-deps . -w dist`, then the wheel with the `jax` extra alone) runs
  in a copy of the repository's tracked files, into a virtual environment made empty for it: the
  wheel must carry everything kerasrl needs (the watch page's static files included), and the
  install must bring neither TensorFlow nor PyTorch.
- The quick start (README "Quick start": the Python block with its `fit` capped as the doc tests
  cap it, then the command block) runs in that environment, in a fresh folder: it trains on JAX,
  says so, and prints no TensorFlow or PyTorch log line.
- The checkout block (`pip install '.[jax]'`) runs in a second empty environment.
- Slow tier: every command of the README's "Command line" block on a JAX-only install with the
  extras those commands document (plot, export, ray), except those that name another backend.

pip reads `PIP_CONSTRAINT=constraints.txt` here, so CI installs the versions the rest of the suite
tests (the commands themselves are run exactly as the README writes them).
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

from test_docs import THREAD_ENV, _CapFitSteps, capped_command, command_lines

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
INSTALL_TIMEOUT_S = 900
RUN_TIMEOUT_S = 600
BACKEND_LINE = re.compile(r"backend:? jax", re.I)
FRAMEWORK_LOG_LINES = re.compile(r"oneDNN|TensorFlow binary|tensorflow/|cuda_|torch\._", re.I)


def readme_section(title: str) -> str:
    """The text of the README section `## title`, up to the next `## ` heading."""
    text = README.read_text()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README.md has no section '## {title}'"
    return match[1]


def fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.M | re.S)


def clean_env(home: Path) -> dict[str, str]:
    """The environment of a user's shell: no KERAS_BACKEND, nothing of the dev install's paths."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("KERAS_BACKEND", "PYTHONPATH", "VIRTUAL_ENV")
           and not key.startswith(("JAX_", "KERASRL_"))}
    env.update(THREAD_ENV, KERAS_HOME=str(home / ".keras"),
               PIP_CONSTRAINT=str(ROOT / "constraints.txt"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def run(argv: list, cwd: Path, env: dict, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, (
        f"`{shlex.join(map(str, argv))}` in {cwd} exited with {done.returncode}:\n"
        + "\n".join((done.stdout + done.stderr).strip().splitlines()[-40:]))
    return done


def copy_of_checkout(to: Path) -> Path:
    """The repository's files as a clone holds them (tracked, and new files git does not ignore),
    without the dev install's leftovers."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True)
    if listed.returncode == 0:
        for name in filter(None, listed.stdout.decode().split("\0")):
            source = ROOT / name
            if source.is_file():
                (to / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, to / name)
    else:  # not a git checkout (an unpacked archive): the files a build reads
        for name in ("pyproject.toml", "README.md", "constraints.txt", "src"):
            copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
            copy(ROOT / name, to / name)
        for leftover in to.glob("src/*.egg-info"):
            shutil.rmtree(leftover)
    return to


def python_of(folder: Path) -> Path:
    return folder / ("Scripts" if os.name == "nt" else "bin") / "python"


def run_install_block(block: str, venv_folder: Path, cwd: Path, env: dict) -> None:
    """Each line of an install block as a user types it, with the environment's own pip."""
    venv.create(venv_folder, with_pip=True)
    for line in command_lines(block):
        argv = shlex.split(line, comments=True)
        assert argv[0] == "pip", f"README install block: only pip lines run here, not `{line}`"
        run([python_of(venv_folder), "-m", "pip", *argv[1:]], cwd, env, INSTALL_TIMEOUT_S)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def wheel_python(tmp_path_factory, home) -> Path:
    """An empty virtual environment in which the README's wheel block has run."""
    blocks = fenced(readme_section("Install"), "bash")
    wheel_block = next(b for b in blocks if "pip wheel" in b)
    checkout = copy_of_checkout(tmp_path_factory.mktemp("checkout"))
    folder = tmp_path_factory.mktemp("wheel-venv")
    run_install_block(wheel_block, folder, checkout, clean_env(home))
    return python_of(folder)


def has_module(python: Path, name: str, env: dict) -> bool:
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({name!r}) is None)"
    return subprocess.run([str(python), "-c", code], env=env).returncode == 0


def test_the_wheel_with_the_jax_extra_brings_no_other_framework(wheel_python, home):
    env = clean_env(home)
    assert has_module(wheel_python, "kerasrl", env) and has_module(wheel_python, "jax", env)
    assert not has_module(wheel_python, "tensorflow", env)
    assert not has_module(wheel_python, "torch", env)
    # Package data: the watch page's files are in the wheel, not only in the checkout.
    code = ("import importlib.resources as r; "
            "print(sorted(p.name for p in r.files('kerasrl.watch').joinpath('static').iterdir()))")
    listed = run([wheel_python, "-c", code], home, env).stdout
    assert ".html" in listed and ".js" in listed, listed


def test_the_quick_start_runs_on_the_wheel_install(wheel_python, home, tmp_path):
    """README "Quick start", as written, in a fresh folder of the clean install."""
    section = readme_section("Quick start")
    (python_block,) = fenced(section, "python")
    tree = ast.fix_missing_locations(_CapFitSteps().visit(ast.parse(python_block)))
    script = tmp_path / "quick_start.py"
    # The harness's one line after the block: which backend the user's script ran on.
    script.write_text(ast.unparse(tree) + "\nimport keras\nprint('ran on', keras.backend.backend())\n")
    env = clean_env(home)
    done = run([wheel_python, script], tmp_path, env)
    output = done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "ran on jax", output[-2000:]
    assert not FRAMEWORK_LOG_LINES.search(output), output[-2000:]
    assert (tmp_path / "runs" / "cartpole").is_dir()

    kerasrl = wheel_python.with_name("kerasrl")
    (command_block,) = fenced(section, "bash")
    lines = command_lines(command_block)
    assert lines and all(line.startswith("kerasrl ") for line in lines)
    for line in lines:
        argv = capped_command(shlex.split(line, comments=True))
        done = run([kerasrl, *argv[1:]], tmp_path, env)
        assert not FRAMEWORK_LOG_LINES.search(done.stdout + done.stderr), done.stderr[-2000:]
        if argv[1] == "train":  # the backend is said once, when the agent is made
            assert BACKEND_LINE.search(done.stdout + done.stderr), done.stderr[-2000:]
    assert "mean_return" in done.stdout or "mean return" in done.stdout.lower(), done.stdout


@pytest.mark.slow  # a second clean install (about 40 s); the fast tier installs the wheel
def test_the_checkout_install_as_written(tmp_path, home):
    (block,) = [b for b in fenced(readme_section("Install"), "bash") if "pip wheel" not in b]
    checkout = copy_of_checkout(tmp_path / "checkout")
    folder = tmp_path / "venv"
    env = clean_env(home)
    run_install_block(block, folder, checkout, env)
    done = run([python_of(folder), "-c", "import kerasrl, keras; print(keras.backend.backend())"],
               tmp_path, env)
    assert done.stdout.strip().splitlines()[-1] == "jax"
    assert python_of(folder).with_name("kerasrl").is_file()


@pytest.mark.slow
def test_every_readme_command_on_a_jax_only_install(tmp_path, home):
    """The README's "Command line" block on `kerasrl[jax,...]` with the extras its commands
    document, except the lines that name another backend (none of TensorFlow or PyTorch here)."""
    checkout = copy_of_checkout(tmp_path / "checkout")
    folder = tmp_path / "venv"
    env = clean_env(home)
    run_install_block("pip install '.[jax,plot,export,ray]'\n", folder, checkout, env)
    assert not has_module(python_of(folder), "tensorflow", env)
    assert not has_module(python_of(folder), "torch", env)
    kerasrl = python_of(folder).with_name("kerasrl")
    work = tmp_path / "work"
    work.mkdir()
    blocks = [b for b in fenced(readme_section("Command line"), "bash")
              if any(line.startswith("kerasrl ") for line in command_lines(b))]
    assert blocks
    for block in blocks:
        for line in command_lines(block):
            argv = capped_command(shlex.split(line, comments=True))
            backends = [argv[i + 1] for i, token in enumerate(argv[:-1]) if token == "--backend"]
            if any(name != "jax" for name in backends):
                continue
            done = run([kerasrl, *argv[1:]], work, env)
            assert not FRAMEWORK_LOG_LINES.search(done.stdout + done.stderr), (
                f"`{line}`:\n{done.stderr[-2000:]}")
