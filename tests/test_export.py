"""Exports reproduce the policy: ONNX on every backend, SavedModel on JAX and TensorFlow (and a
clear error on PyTorch); DQN (MLP, subclassed, batch norm + dropout) and PPO policies."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import keras
import numpy as np
import pytest

import kerasrl
from kerasrl import backend
from kerasrl.export import ExportError, compare_export
from test_policy_io import SPACES, TwoHeads, built

pytestmark = pytest.mark.backend
FORMATS = ("onnx",) if backend.NAME == "torch" else ("onnx", "saved_model")


def bn_dropout_model():
    inputs = keras.Input((4,))
    x = keras.layers.Dense(16, activation="relu")(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Dropout(0.5)(x)
    return keras.Model(inputs, keras.layers.Dense(2)(x))


def q_policies():
    agent = kerasrl.DQN("CartPole-v1", seed=0, learning_starts=20, buffer_size=100, batch_size=8)
    agent.fit(total_steps=40, progress=False)
    return {"mlp": agent.policy,
            "subclassed": kerasrl.QPolicy(built(TwoHeads(width=8)), *SPACES),
            "batchnorm_dropout": kerasrl.QPolicy(built(bn_dropout_model()), *SPACES)}


@pytest.mark.parametrize("fmt", FORMATS)
def test_q_policy_exports_match(tmp_path, fmt):
    for name, policy in q_policies().items():
        suffix = ".onnx" if fmt == "onnx" else ""
        path = policy.export(tmp_path / f"{name}{suffix}", format=fmt, include_values=True)
        figures = compare_export(policy, path, fmt, n=1000)
        assert figures["actions_differing"] == 0 and figures["max_value_diff"] <= 1e-5, name


@pytest.mark.parametrize("fmt", FORMATS)
def test_ppo_policy_exports_match(tmp_path, fmt):
    agent = kerasrl.PPO("CartPole-v1", seed=0, n_steps=32, batch_size=16, n_epochs=1,
                        normalize_observations=True)
    agent.fit(total_steps=64, progress=False)
    path = agent.policy.export(tmp_path / ("ppo.onnx" if fmt == "onnx" else "ppo"), format=fmt,
                               include_values=True)
    figures = compare_export(agent.policy, path, fmt, n=1000)
    assert figures["actions_differing"] == 0 and figures["max_value_diff"] <= 1e-5


def test_saved_model_works_or_says_what_works(tmp_path):
    """SavedModel export works from JAX and TensorFlow; from PyTorch it names the way that works."""
    policy = q_policies()["mlp"]
    if backend.NAME == "torch":
        with pytest.raises(ExportError, match="KERAS_BACKEND=jax"):
            policy.export(tmp_path / "sm", format="saved_model")
    else:
        path = policy.export(tmp_path / "sm", format="saved_model")
        assert compare_export(policy, path, "saved_model")["actions_differing"] == 0


def test_a_wrong_export_is_refused(tmp_path):
    policy = q_policies()["mlp"]
    path = policy.export(tmp_path / "m.onnx", include_values=True)
    policy.model.layers[-1].kernel.assign(policy.model.layers[-1].kernel.numpy() * -1.0
                                          if hasattr(policy.model.layers[-1].kernel, "numpy")
                                          else -keras.ops.convert_to_numpy(policy.model.layers[-1].kernel))
    with pytest.raises(ExportError, match="different actions"):
        compare_export(policy, path, "onnx")


def test_onnx_example_runs_with_numpy_and_onnxruntime_only(tmp_path):
    policy = q_policies()["mlp"]
    path = policy.export(tmp_path / "cartpole.onnx")
    example = Path(__file__).parents[1] / "examples" / "onnx_inference.py"
    proc = subprocess.run([sys.executable, str(example), str(path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    obs = np.asarray(eval(proc.stdout.splitlines()[0].split("=", 1)[1]), np.float32)  # noqa: S307
    actions = [int(a) for a in proc.stdout.splitlines()[1].split("=", 1)[1].split(",")]
    np.testing.assert_array_equal(actions, policy.predict(obs))
    assert "keras" not in proc.stdout
