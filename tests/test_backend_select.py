"""Choosing the Keras backend: clear errors for unknown or missing backends, jax by default."""

import importlib.util
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
