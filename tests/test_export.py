"""Exports reproduce the policy: ONNX on every backend, SavedModel on JAX and TensorFlow (and a
clear error on PyTorch); DQN (MLP, subclassed, batch norm + dropout, the default CNN on uint8
images, the Snake conv net) and PPO policies (discrete, and Gaussian with observation statistics),
from Python and from `kerasrl export`. The published tolerance is 1e-5 on values, no action
differing (docs/checkpoints.md)."""

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
from image_env import QuadrantEnv
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
def test_masked_policy_exports_take_the_mask(tmp_path, fmt):
    """action_mask=True: the artifact's second input is the mask, and its argmax obeys it."""
    from kerasrl.envs.testing import MaskedChoiceEnv

    for agent_class in (kerasrl.DQN, kerasrl.PPO):
        policy = agent_class(lambda: MaskedChoiceEnv(4), seed=0, check_env=False).policy
        suffix = ".onnx" if fmt == "onnx" else ""
        path = policy.export(tmp_path / f"{agent_class.__name__}{suffix}", format=fmt,
                             include_values=True, action_mask=True)
        figures = compare_export(policy, path, fmt, n=1000, action_mask=True)
        assert figures["actions_differing"] == 0 and figures["max_value_diff"] <= 1e-5
    with pytest.raises(ExportError, match="action_mask=True needs a Discrete"):
        kerasrl.PPO("Pendulum-v1", seed=0, check_env=False).policy.export(
            tmp_path / "x", format=fmt, action_mask=True)


@pytest.mark.parametrize("fmt", FORMATS)
def test_ppo_policy_exports_match(tmp_path, fmt):
    agent = kerasrl.PPO("CartPole-v1", seed=0, n_steps=32, batch_size=16, n_epochs=1,
                        normalize_observations=True)
    agent.fit(total_steps=64, progress=False)
    path = agent.policy.export(tmp_path / ("ppo.onnx" if fmt == "onnx" else "ppo"), format=fmt,
                               include_values=True)
    figures = compare_export(agent.policy, path, fmt, n=1000)
    assert figures["actions_differing"] == 0 and figures["max_value_diff"] <= 1e-5


class Target(gym.Env):
    """Continuous actions in [-2, 2]^2; observations far from zero mean and unit scale, so that
    the observation statistics matter."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.action_space = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def _obs(self):
        return (5.0 + 3.0 * self.np_random.standard_normal(3)).astype(np.float32)

    def step(self, action):
        self._t += 1
        return self._obs(), -float(np.sum(np.square(action))), False, self._t >= 16, {}


@pytest.mark.parametrize("fmt", FORMATS)
def test_continuous_ppo_policy_exports_match(tmp_path, fmt):
    """Gaussian PPO: normalization by the saved statistics, the mean, the clip to the bounds."""
    agent = kerasrl.PPO(Target, seed=0, n_envs=2, n_steps=32, batch_size=32, n_epochs=1,
                        normalize_observations=True, log_std_init=-0.3)
    agent.fit(total_steps=128, progress=False)
    policy = agent.policy
    assert abs(policy.obs_rms.mean.mean() - 5.0) < 1.0  # the statistics are not the identity
    path = policy.export(tmp_path / ("ppo.onnx" if fmt == "onnx" else "ppo"), format=fmt,
                         include_values=True)
    figures = compare_export(policy, path, fmt, n=1000)
    assert figures["max_action_diff"] <= 1e-5 and figures["max_value_diff"] <= 1e-5, figures
    # Some of the 1000 observations are clipped to the bounds by the exported graph too.
    from kerasrl.export import run_export, sample_observations

    obs = sample_observations(policy.observation_space, 1000, seed=1) * 50.0
    actions = run_export(path, fmt, obs)[0].reshape(1000, 2)
    np.testing.assert_allclose(actions, policy.predict(obs), atol=1e-5)


@pytest.fixture(scope="module")
def cnn_policies():
    """The default CNN on uint8 images (with its 1/255 scaling) and the Snake conv net, trained
    once for both formats."""
    image = kerasrl.DQN(QuadrantEnv, seed=0, learning_starts=32, buffer_size=200, batch_size=8,
                        train_freq=4)
    image.fit(total_steps=96, progress=False)
    snake = kerasrl.DQN("kerasrl/Snake-v0", seed=0, learning_starts=32, buffer_size=200,
                        batch_size=8, train_freq=4,
                        model=kerasrl.networks.model_builder("snake_small"))
    snake.fit(total_steps=96, progress=False)
    return {"default_cnn_uint8": image.policy, "snake_small": snake.policy}


@pytest.mark.parametrize("fmt", FORMATS)
def test_cnn_policy_exports_match(tmp_path, fmt, cnn_policies):
    for name, policy in cnn_policies.items():
        assert any("Conv" in type(layer).__name__ for layer in policy.model.layers), name
        suffix = ".onnx" if fmt == "onnx" else ""
        path = policy.export(tmp_path / f"{name}{suffix}", format=fmt, include_values=True)
        figures = compare_export(policy, path, fmt, n=1000)
        assert figures["actions_differing"] == 0 and figures["max_value_diff"] <= 1e-5, name


def test_cli_export_saved_model(tmp_path, capsys):
    """`kerasrl export RUN --format saved_model -o DIR`: from JAX and TensorFlow a SavedModel that
    TensorFlow serves with the policy's actions; from PyTorch an error that names the way."""
    from kerasrl.cli import main

    agent = kerasrl.DQN("CartPole-v1", seed=0, learning_starts=20, buffer_size=100, batch_size=8)
    agent.fit(total_steps=40, progress=False)
    agent.save(tmp_path / "run")
    out = tmp_path / "saved_model"
    code = main(["export", str(tmp_path / "run"), "--format", "saved_model", "-o", str(out),
                 "--include-values"])
    captured = capsys.readouterr()
    if backend.NAME == "torch":
        assert code == 1 and "KERAS_BACKEND=jax" in captured.err, captured.err
        return
    assert code == 0, captured.err[-2000:]
    assert (out / "saved_model.pb").is_file()
    assert "'actions_differing': 0" in captured.out, captured.out
    figures = compare_export(agent.policy, out, "saved_model", n=1000)
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
        policy.export(path, format="saved_model")  # an earlier SavedModel is replaced
        # A folder of the user's is not (before: removed with all in it), nor a file.
        results = tmp_path / "results"
        results.mkdir()
        (results / "scores.csv").write_text("1,2")
        notes = tmp_path / "notes.txt"
        notes.write_text("mine")
        with pytest.raises(ExportError, match=r"Not exporting to .*results: it is a folder that is not a SavedModel "
                                              r"\(it holds scores.csv\), and the export would replace it"):
            policy.export(results, format="saved_model")
        with pytest.raises(ExportError, match=r"notes.txt: it is a file"):
            policy.export(notes, format="saved_model")
        assert (results / "scores.csv").read_text() == "1,2" and notes.read_text() == "mine"


def test_a_wrong_export_is_refused(tmp_path):
    policy = q_policies()["mlp"]
    path = policy.export(tmp_path / "m.onnx", include_values=True)
    policy.model.layers[-1].kernel.assign(policy.model.layers[-1].kernel.numpy() * -1.0
                                          if hasattr(policy.model.layers[-1].kernel, "numpy")
                                          else -keras.ops.convert_to_numpy(policy.model.layers[-1].kernel))
    with pytest.raises(ExportError, match="different actions"):
        compare_export(policy, path, "onnx")


def test_the_value_tolerance_is_relative_beyond_one():
    """Float32 rounds relative to a number's size: values of about 100 may part by 1.1e-5 between
    two correct graphs (a CartPole Rainbow's exported Q-values did, on PyTorch), and are checked
    to 1e-5 of their size; values under 1 to 1e-5 itself."""
    from kerasrl.export import tolerance_for

    assert tolerance_for(np.array([0.5, -0.2])) == pytest.approx(1e-5)
    assert tolerance_for(np.array([[99.0, -120.0]])) == pytest.approx(1.2e-3)
    assert tolerance_for(np.zeros((0,))) == pytest.approx(1e-5)


FRAMEWORKS = ("keras", "kerasrl", "jax", "tensorflow", "torch")


def test_onnx_example_runs_with_numpy_and_onnxruntime_only(tmp_path):
    """examples/onnx_inference.py in a fresh process: it reproduces the policy's actions, and
    neither Keras, kerasrl nor any backend was imported to do it."""
    policy = q_policies()["mlp"]
    path = policy.export(tmp_path / "cartpole.onnx")
    example = Path(__file__).parents[1] / "examples" / "onnx_inference.py"
    code = (f"import runpy, sys\n"
            f"sys.argv = [{str(example)!r}, {str(path)!r}]\n"
            f"runpy.run_path({str(example)!r}, run_name='__main__')\n"
            f"print('imported=' + ','.join(sorted(m for m in sys.modules "
            f"if m.split('.')[0] in {FRAMEWORKS!r})))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "imported=", lines[-1]
    obs = np.asarray(eval(lines[0].split("=", 1)[1]), np.float32)  # noqa: S307
    actions = [int(a) for a in lines[1].split("=", 1)[1].split(",")]
    np.testing.assert_array_equal(actions, policy.predict(obs))


@pytest.mark.skipif(backend.NAME != "jax", reason="jax2onnx's plugins: the JAX backend's ONNX exporter")
def test_a_jax_onnx_export_loads_only_the_converter_plugins_a_keras_model_needs(tmp_path):
    """jax2onnx's equinox plugins build example modules when imported (96 XLA programs, 6 s of a
    9 s export on one core): an ONNX export from JAX leaves them out, and the CNN and MLP
    artifacts still match their policies."""
    code = (
        "import sys, kerasrl\n"
        "from kerasrl.export import compare_export\n"
        "from image_env import QuadrantEnv\n"
        "for name, make in (('mlp', 'CartPole-v1'), ('cnn', QuadrantEnv)):\n"
        "    policy = kerasrl.DQN(make, seed=0, check_env=False).policy\n"
        f"    path = policy.export(r'{tmp_path}/' + name + '.onnx', include_values=True)\n"
        "    figures = compare_export(policy, path, 'onnx', n=200)\n"
        "    assert figures['actions_differing'] == 0 and figures['max_value_diff'] <= 1e-5, name\n"
        "loaded = sorted({m.split('.')[2] for m in sys.modules if m.startswith('jax2onnx.plugins.')})\n"
        "print(loaded)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).parent, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = done.stdout.strip().splitlines()[-1]
    assert "'jax'" in loaded and "equinox" not in loaded and "examples" not in loaded, loaded


@pytest.mark.skipif(backend.NAME != "jax", reason="jax2onnx's plugins: the JAX backend's ONNX exporter")
def test_an_export_that_needs_a_plugin_left_out_loads_them_all_and_succeeds(tmp_path, monkeypatch):
    """Where the narrowed plugins are not enough (the conversion raises), every plugin is loaded
    and the export runs again."""
    from kerasrl import export
    from kerasrl.backend import jax as jax_backend

    calls = []
    monkeypatch.setattr(jax_backend, "narrow_onnx_plugins", lambda: True)
    monkeypatch.setattr(backend, "narrow_onnx_plugins", jax_backend.narrow_onnx_plugins)
    monkeypatch.setattr(backend, "widen_onnx_plugins", lambda: calls.append("widened"))

    class NeedsMore(keras.Model):  # the first conversion fails, as a missing plugin makes it
        def export(self, path, **kwargs):
            calls.append("export")
            if calls.count("export") == 1:
                raise NotImplementedError("no ONNX plugin for primitive 'custom'")
            Path(path).write_bytes(b"onnx")

    export._export_onnx(NeedsMore(), tmp_path / "m.onnx")
    assert calls == ["export", "widened", "export"] and (tmp_path / "m.onnx").exists()
    monkeypatch.setattr(backend, "narrow_onnx_plugins", lambda: False)  # not narrowed: no retry
    calls.clear()
    with pytest.raises(NotImplementedError, match="no ONNX plugin"):
        export._export_onnx(NeedsMore(), tmp_path / "n.onnx")
    assert calls == ["export"]
