"""Devices (kerasrl.devices, docs/gpu.md): `device=` is checked where it is given, "auto" on a
CPU-only machine is no device scope at all, every backend makes its tensors on the `keras.device`
in scope, and an agent on the second of two devices keeps everything there.

Two CPU devices stand in for a GPU: JAX with XLA_FLAGS=--xla_force_host_platform_device_count=2
and TensorFlow with two logical CPUs, each in a process of its own (tests/device_worker.py), since
both must be set before the framework starts. JAX refuses a jitted call on arrays committed to two
devices, so an array left on the wrong one raises there. PyTorch has one CPU device; its checks use
the "meta" device. The same checks on a real GPU are in tests/test_gpu.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import kerasrl
from kerasrl import backend, devices

WORKER = Path(__file__).with_name("device_worker.py")


def run_worker(backend_name: str, what: str, out: Path) -> None:
    env = {**os.environ, "KERAS_BACKEND": backend_name}
    proc = subprocess.run([sys.executable, str(WORKER), what, str(out)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (
        f"{backend_name} device_worker.py {what} failed:\n{proc.stdout[-3000:]}{proc.stderr[-5000:]}")


@pytest.mark.backend
@pytest.mark.parametrize("device", ["cuda", "gpu0", "cpu:-1", "auto:0", "", 0])
def test_a_device_that_is_not_a_keras_device_name_is_refused_naming_the_forms(device):
    with pytest.raises(ValueError, match=r"'auto', 'cpu', 'cpu:N', 'gpu', 'gpu:N'"):
        kerasrl.DQN("CartPole-v1", device=device)


@pytest.mark.backend
def test_a_device_this_machine_lacks_is_refused_naming_the_visible_ones():
    with pytest.raises(ValueError, match=r"sees no such device here \(it sees cpu") as error:
        kerasrl.PPO("CartPole-v1", device="gpu:7")
    assert "gpu:7" in str(error.value) and "'auto'" in str(error.value)
    with pytest.raises(ValueError, match="sees no such device"):
        kerasrl.DQN.load("does-not-matter", device="cpu:9")  # checked before the path is read


def test_the_cli_trains_on_the_device_it_is_given_and_refuses_one_it_lacks(tmp_path, capsys):
    from kerasrl.cli import main

    assert main(["train", "dqn", "--device", "gpu:5", "--steps", "50",
                 "--out", str(tmp_path / "refused")]) == 2
    assert "device='gpu:5'" in capsys.readouterr().err
    assert main(["train", "dqn", "--device", "cpu", "--steps", "200", "--set", "learning_starts=50",
                 "--set", "hidden_sizes=[8]", "--out", str(tmp_path / "run")]) == 0
    assert kerasrl.DQN.load(tmp_path / "run", device="cpu").num_timesteps == 200


@pytest.mark.backend
def test_device_names_are_read_as_keras_names_them():
    cpu = backend.devices()[0]
    assert cpu in ("cpu", "cpu:0")  # PyTorch's one CPU device is "cpu"
    for name in ("cpu", "CPU", "cpu:0", " cpu "):
        assert devices.check(name) == cpu
    assert devices.check("auto") == "auto"
    explicit = devices.placement("cpu")
    assert explicit.learning == cpu and not explicit.host_acting


@pytest.mark.backend
def test_auto_is_no_device_scope_without_an_accelerator_and_the_accelerator_with_one():
    placement = devices.placement("auto")
    assert placement.learning is None  # the framework's default device: no scope entered
    agent = kerasrl.DQN("CartPole-v1", hidden_sizes=(8,), check_env=False)
    assert agent.device == "auto"
    if backend.on_cpu():  # this machine: exactly what kerasrl did before it knew about devices
        assert not placement.host_acting and agent.learner.acting_device is None
        params, _ = agent.learner.acting_weights()
        assert params["q"] is agent.learner.state["params"]["q"]  # acting reads the state itself
    else:  # a GPU machine: a small MLP acts from a host copy
        assert placement.host_acting and agent.learner.acting_device == backend.devices()[0]


@pytest.mark.backend
def test_a_host_copy_for_acting_is_refreshed_when_the_weights_change(monkeypatch):
    """"auto" on a GPU machine acts from a host copy of the weights; stood in for here by acting
    on the CPU device the agent learns on: the copy must follow every change of the state."""
    import numpy as np

    monkeypatch.setattr(devices.Placement, "acting_device",
                        lambda self, models: backend.devices()[0])
    agent = kerasrl.DQN("CartPole-v1", hidden_sizes=(8,), learning_starts=16, train_freq=4,
                        batch_size=8, check_env=False)
    obs = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    before = agent.learner.q_values(obs)
    copy = agent.learner.acting_weights()
    assert copy[0]["q"] is not agent.learner.state["params"]["q"]
    assert agent.learner.acting_weights() is copy  # made once per state
    agent.fit(64, progress=False)
    after = agent.learner.q_values(obs)
    assert not np.array_equal(before, after)
    np.testing.assert_allclose(after, agent.policy.q_values(obs), rtol=1e-6)  # the learner's weights


@pytest.mark.backend
def test_auto_acts_on_the_host_for_small_mlps_only(monkeypatch):
    """The rule of "auto" on a GPU machine, run here on the real models (the first GPU run found
    it broken: it read a `size` that Keras variables lack): a small MLP acts on the first CPU
    device; a convolution or more than HOST_ACTING_MAX_PARAMS parameters act where they learn."""
    import keras

    gpu_machine = devices.Placement("auto", None, True)
    mlp = keras.Sequential([keras.Input((4,)), keras.layers.Dense(64), keras.layers.Dense(2)])
    assert gpu_machine.acting_device([mlp]) == backend.devices()[0]
    conv = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(2, 3),
                             keras.layers.Flatten(), keras.layers.Dense(2)])
    assert gpu_machine.acting_device([conv]) is None
    monkeypatch.setattr(devices, "HOST_ACTING_MAX_PARAMS", 4 * 64 + 64 + 64 * 2 + 2 - 1)
    assert gpu_machine.acting_device([mlp]) is None  # one parameter over the bound
    assert devices.Placement("cpu:0", "cpu:0", False).acting_device([mlp]) is None  # a named device


@pytest.mark.backend
def test_compiled_loops_stay_on_the_accelerator_where_a_call_is_one_program_else_go_where_learners_learn():
    """"auto" on a GPU machine, the rule itself on the active backend: JAX's and TensorFlow's
    compiled loops (one program a call) run on the accelerator whatever the size; PyTorch's,
    which launch op by op, on the host for networks a learner would learn there (tests/
    device_worker.py runs both rules on JAX's two devices, loops and an agent's fit)."""
    import keras

    def mlp(width):
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(width), keras.layers.Dense(2)])

    gpu_machine = devices.Placement("auto", None, True, 32)
    bound = devices.HOST_LEARNING_MAX_WORK[backend.NAME]
    small = [mlp(16)]  # 7 x 16 + 2 = 114 parameters x 32 rows, far under every backend's bound
    large = [mlp(-(-bound // (32 * 7)))]  # just over the bound
    assert gpu_machine.for_learner(small).learning == backend.devices()[0]
    assert gpu_machine.for_learner(large).learning is None
    if backend.NAME == "torch":
        assert devices.launches_per_op()
        assert gpu_machine.for_compiled_loop(small).learning == backend.devices()[0]
    else:
        assert not devices.launches_per_op()
        assert gpu_machine.for_compiled_loop(small) is gpu_machine
    assert gpu_machine.for_compiled_loop(large).learning is None
    named = devices.Placement("cpu:0", "cpu:0", False, 32)
    assert named.for_compiled_loop(small) is named


@pytest.mark.cross_backend
@pytest.mark.parametrize("backend_name", ["jax", "tensorflow", "torch"])
def test_each_backend_makes_its_tensors_on_the_keras_device(backend_name, tmp_path):
    """to_tensors, feed and the scalars of a compiled call go where `keras.device` says; a
    compiled call runs where its state lives (JAX also refuses two committed devices)."""
    run_worker(backend_name, "tensors", tmp_path)


@pytest.mark.cross_backend
def test_dqn_ppo_and_trpo_on_the_second_of_two_devices_train_save_load_and_predict_there(tmp_path):
    """JAX with two CPU devices, agents with device="cpu:1", the rest of the process inside
    keras.device("cpu:0"): the Python loop and the compiled loop on kerasrl/OpsCartPole-v1 train,
    save, load and predict with every array of the learner and the models on cpu:1, and the
    policy so trained exports to ONNX and SavedModel, each checked against it."""
    run_worker("jax", "agents", tmp_path)


@pytest.mark.cross_backend
def test_auto_learns_small_networks_on_the_host_and_large_ones_on_the_accelerator(tmp_path):
    """JAX with two CPU devices, cpu:1 standing in for an accelerator (tests/device_worker.py,
    `host`): under device="auto" a small MLP's learner lives and acts on the host (cpu:0), also
    after the compiled loop hands its state back; a large one learns on cpu:1 and acts from a host
    copy; both train, save, load and predict."""
    run_worker("jax", "host", tmp_path)
