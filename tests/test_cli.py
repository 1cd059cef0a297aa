"""The `kerasrl` command, run as a user runs it: in a subprocess, each choosing its own backend."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

KERASRL = Path(sys.executable).parent / "kerasrl"


def cli(*args, tmp_path, backend_env=None, timeout=300):
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env.update(KERAS_HOME=str(tmp_path / "keras_home"), OMP_NUM_THREADS="1", KERASRL_TORCH_THREADS="1")
    if backend_env:
        env["KERAS_BACKEND"] = backend_env
    command = [str(KERASRL)] if KERASRL.exists() else [sys.executable, "-m", "kerasrl.cli"]
    return subprocess.run([*command, *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("backend_env, active", [(None, "jax"), ("torch", "torch")])
def test_backends_lists_all_and_the_active_one(tmp_path, backend_env, active):
    result = cli("backends", tmp_path=tmp_path, backend_env=backend_env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for name in ("jax", "tensorflow", "torch"):
        (line,) = [line for line in lines if line.replace("*", " ").split()[:1] == [name]]
        assert "installed" in line
        assert line.lstrip().startswith("*") == (name == active), line
    assert f"Active: {active}" in result.stdout


def test_train_writes_the_run_folder(tmp_path):
    out = tmp_path / "run"
    result = cli("train", "dqn", "--env", "CartPole-v1", "--backend", "jax", "--steps", 1500,
                 "--set", "learning_starts=500", "--set", "train_freq=4", "--out", out,
                 "--no-progress", "--eval-episodes", 2, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]

    config = json.loads((out / "config.json").read_text())
    assert config["algorithm"] == "dqn" and config["env"] == "CartPole-v1"
    assert config["total_steps"] == 1500 and config["backend"] == "jax"
    assert config["config"]["learning_starts"] == 500 and config["config"]["train_freq"] == 4

    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert len(rows) >= 2, rows
    header = rows[0]
    assert "step" in header or any("step" in h for h in header), header
    assert all(len(row) == len(header) for row in rows[1:])

    events = [p for p in out.rglob("events.out.tfevents.*") if p.is_file()]
    assert events, sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert (out / "model.keras").stat().st_size > 0

    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["episodes"] == 2
    assert evaluation["backend"] == "jax"
    assert evaluation["min_return"] <= evaluation["mean_return"] <= evaluation["max_return"]
    assert "mean return" in result.stdout


def test_bad_setting_exits_2_naming_the_field(tmp_path):
    result = cli("train", "dqn", "--env", "CartPole-v1", "--steps", 100, "--set", "tau=5",
                 "--out", tmp_path / "run", "--no-progress", tmp_path=tmp_path)
    assert result.returncode == 2
    assert "tau" in result.stderr
    assert "kerasrl: error:" in result.stderr
    assert not (tmp_path / "run" / "config.json").exists()


def test_backend_flag_is_honoured(tmp_path):
    out = tmp_path / "run"
    # KERAS_BACKEND says jax; --backend torch wins.
    result = cli("train", "dqn", "--env", "CartPole-v1", "--backend", "torch", "--steps", 200,
                 "--set", "learning_starts=100", "--out", out, "--no-progress", "--eval-episodes", 1,
                 tmp_path=tmp_path, backend_env="jax")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out / "config.json").read_text())["backend"] == "torch"
    assert json.loads((out / "evaluation.json").read_text())["backend"] == "torch"
    assert "backend torch" in result.stdout
