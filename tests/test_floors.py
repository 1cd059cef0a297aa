"""The floors of pyproject.toml are the versions that the lowest-versions CI step installs
(constraints-lowest.txt, `python3 run.py lowest`): neither can change without the other."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run_py():
    spec = importlib.util.spec_from_file_location("kerasrl_run_py", ROOT / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_constraints_lowest_pins_every_floor_of_pyproject(run_py):
    assert run_py.floor_problems() == []


@pytest.fixture
def copies(tmp_path):
    for name in ("pyproject.toml", "constraints-lowest.txt", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def problems(run_py, folder):
    return run_py.floor_problems(folder / "pyproject.toml", folder / "constraints-lowest.txt",
                                 folder / "constraints.txt")


def replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_a_raised_floor_without_its_pin_is_caught(run_py, copies):
    pyproject = copies / "pyproject.toml"
    pyproject.write_text(re.sub(r'"keras>=[0-9.]+', '"keras>=99.0', pyproject.read_text()))
    assert any("keras" in p and "99.0" in p for p in problems(run_py, copies))


def test_a_pin_without_its_floor_is_caught(run_py, copies):
    replace(copies / "constraints-lowest.txt", "gymnasium==", "gymnasium==9")
    assert any("gymnasium" in p for p in problems(run_py, copies))
    (copies / "constraints-lowest.txt").write_text(
        (ROOT / "constraints-lowest.txt").read_text() + "scipy==1.0\n")
    assert problems(run_py, copies) == ["constraints-lowest.txt pins scipy, which pyproject.toml's "
                                        "floors do not name"]


def test_torch_is_the_repository_build(run_py, copies):
    replace(copies / "constraints-lowest.txt", "torch==", "torch==1")
    assert any("same build" in p for p in problems(run_py, copies))


def test_the_two_tensorflow_floors_agree(run_py, copies):
    replace(copies / "pyproject.toml", '"tensorflow>=', '"tensorflow>=1')
    assert any("tensorflow" in p for p in problems(run_py, copies))
