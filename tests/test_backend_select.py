"""Choosing the Keras backend: clear errors for unknown or missing backends, jax by default."""

import importlib.util
import logging
import os
import subprocess
import sys

import pytest

import kerasrl.backend
from kerasrl.backend import SUPPORTED, BackendError, check_backend_name


def clean_env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env["KERAS_HOME"] = str(tmp_path / "keras_home")
    env.update(extra)
    return env


def test_unknown_backend_names_the_supported_ones():
    with pytest.raises(BackendError) as error:
        check_backend_name("foo")
    message = str(error.value)
    assert "'foo'" in message
    for name in SUPPORTED:
        assert name in message
    assert "KERAS_BACKEND" in message


def test_supported_and_installed_backends_pass():
    for name in ("jax", "tensorflow", "torch"):
        assert check_backend_name(name) == name
    assert kerasrl.backend.installed_backends() == ["jax", "tensorflow", "torch"]


def test_missing_framework_says_how_to_install(monkeypatch):
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == "torch" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(kerasrl.backend.importlib.util, "find_spec", find_spec)
    with pytest.raises(BackendError) as error:
        check_backend_name("torch")
    assert "pip install 'kerasrl[torch]'" in str(error.value)
    assert check_backend_name("jax") == "jax"
    assert kerasrl.backend.installed_backends() == ["jax", "tensorflow"]


def test_unknown_keras_backend_env_fails_on_import(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", "import kerasrl; kerasrl.DQN"],
        env=clean_env(tmp_path, KERAS_BACKEND="foo"), capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "BackendError" in result.stderr
    assert "Unknown Keras backend 'foo'" in result.stderr
    assert "jax, tensorflow, torch" in result.stderr


def test_default_backend_is_jax(tmp_path):
    code = ("import sys, os, kerasrl; assert 'keras' not in sys.modules; "
            "print(kerasrl.backend.NAME, os.environ['KERAS_BACKEND'])")
    result = subprocess.run([sys.executable, "-c", code], env=clean_env(tmp_path),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["jax", "jax"]


def test_chosen_backend_is_respected(tmp_path):
    code = "import kerasrl, keras; print(kerasrl.backend.NAME, keras.backend.backend())"
    result = subprocess.run([sys.executable, "-c", code], env=clean_env(tmp_path, KERAS_BACKEND="torch"),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["torch", "torch"]


def _name_and_reason(code, env):
    result = subprocess.run([sys.executable, "-c", code + "; import kerasrl.backend as b; "
                             "print(b.NAME); print(b.REASON)"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-2:]


def test_the_reason_is_the_fastest_installed_when_nothing_chose(tmp_path):
    name, reason = _name_and_reason("import kerasrl", clean_env(tmp_path))
    assert name == "jax"
    assert reason == "the fastest installed of jax, tensorflow, torch; set KERAS_BACKEND to choose"


def test_the_reason_is_keras_backend_when_set(tmp_path):
    name, reason = _name_and_reason("import kerasrl", clean_env(tmp_path, KERAS_BACKEND="torch"))
    assert (name, reason) == ("torch", "KERAS_BACKEND=torch")


def test_keras_imported_first_keeps_its_backend_and_says_so(tmp_path):
    """`import keras` before `import kerasrl`, nothing set: Keras's own default (TensorFlow)
    stands, and the reason names the import order and how to get the fastest."""
    name, reason = _name_and_reason("import keras, kerasrl", clean_env(tmp_path))
    assert name == "tensorflow"
    assert reason.startswith("Keras was imported before kerasrl and chose it")
    assert "set KERAS_BACKEND=jax, or import kerasrl before keras" in reason


def test_use_gives_its_reason(monkeypatch):
    monkeypatch.setattr(kerasrl.backend, "NAME", kerasrl.backend.NAME)
    monkeypatch.setattr(kerasrl.backend, "REASON", kerasrl.backend.REASON)
    monkeypatch.setattr(kerasrl.backend, "COMPILED_LOOPS", kerasrl.backend.COMPILED_LOOPS)
    monkeypatch.setenv("KERAS_BACKEND", kerasrl.backend.NAME)
    kerasrl.backend.use(kerasrl.backend.NAME)  # the running backend: a process cannot switch
    assert kerasrl.backend.REASON == "chosen with --backend, or kerasrl.backend.use"


def test_the_backend_is_announced_once_per_process(monkeypatch, caplog):
    monkeypatch.setattr(kerasrl.backend, "_ANNOUNCED", False)
    with caplog.at_level(logging.INFO, logger="kerasrl"):
        kerasrl.backend.announce()
        kerasrl.backend.announce()
    said = [r.getMessage() for r in caplog.records if r.name == "kerasrl"]
    assert said == [f"Keras backend: {kerasrl.backend.NAME} ({kerasrl.backend.REASON})."]
