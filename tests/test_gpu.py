"""The GPU tier (marker `gpu`, `python3 run.py gpu`): kerasrl on one GPU, on the active backend.

Skipped where the backend sees no accelerator (tests/conftest.py): a hardware tier, run on a GPU
machine with the CUDA builds of the frameworks. What it holds, on each backend that sees the GPU:

- learning where deep RL is trained: `device="auto"` keeps a small MLP's learner on the host,
  puts a larger one's state on the GPU, acting in the Python loop from a host copy of its weights
  (docs/gpu.md), and README.md's Python example trains unchanged;
- the same seed on the CPU and on the GPU (full float32 precision, the default) gives the same
  first 200 updates within GPU_CPU_RTOL and the same actions;
- DQN, PPO and SAC pass their short learning checks (tests/agents) on the GPU;
- RecurrentPPO, A2C, QR-DQN, C51 and NAF give a CPU run's losses on the GPU;
- a checkpoint written on the GPU resumes on the CPU (also in a process that sees no GPU) and back;
- a GPU-trained policy exports to ONNX and onnxruntime (on the CPU) chooses its actions.

The two-device logic itself is checked on every CPU run by tests/test_devices.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import kerasrl
from kerasrl import backend, devices
from kerasrl.envs.testing import IdentityEnv, TargetEnv

pytestmark = pytest.mark.gpu

GPU = "gpu"
# The relative tolerance on the first 200 updates' losses between a CPU and a GPU run of one seed,
# at full float32 precision. Measured on an NVIDIA H200 (2026-11-26, benchmarks/gpu.py's agreement
# part, benchmarks/results/gpu_h200.jsonl): at most 1.7e-7 (JAX) and 2.2e-7 (PyTorch), the same
# episodes; with full precision off, JAX's losses differed by 2.6e-4 from the first update. The
# bound leaves a factor of about 45 for other GPUs and library builds. PPO's 25 rollouts passed
# within 1e-4 there; their own figure was not measured, so PPO keeps that bound.
GPU_CPU_RTOL = {"dqn": 1e-5, "ppo": 1e-4}
OBS = np.linspace(-0.5, 0.5, 20, dtype=np.float32).reshape(5, 4)  # CartPole observations


def kinds(tree) -> set[str]:
    """The kinds of device ("cpu", "gpu") the arrays of a tree (or Keras variables) live on."""
    import keras

    found = set()
    for leaf in keras.tree.flatten(tree):
        if isinstance(leaf, keras.Variable):
            leaf = leaf.value
        leaf = getattr(leaf, "buffer", leaf)  # TensorFlow's packed state: its buffer
        if backend.NAME == "jax":
            found.update("cpu" if d.platform == "cpu" else "gpu" for d in leaf.devices())
        elif backend.NAME == "tensorflow":
            found.add("gpu" if ":GPU:" in leaf.device.upper() else "cpu")
        else:
            found.add("cpu" if leaf.device.type == "cpu" else "gpu")
    return found


def on(agent, kind: str) -> None:
    """The learner's state and the agent's models live on `kind` of device."""
    assert kinds(agent.learner.state) == {kind}, kinds(agent.learner.state)
    for model in agent.learner.models.values():
        assert kinds(model.weights) == {kind}, (model.name, kinds(model.weights))


DQN_SEED_RUN = dict(seed=0, learning_starts=100, train_freq=1, gradient_steps=1, batch_size=32,
                    target_update_interval=50, check_env=False)
PPO_SEED_RUN = dict(seed=0, n_envs=4, n_steps=32, batch_size=64, n_epochs=4, check_env=False)


def test_auto_learns_small_networks_on_the_host_and_large_ones_on_the_gpu_acting_on_the_host():
    assert not backend.on_cpu() and any(d.startswith("gpu") for d in backend.devices())
    host = backend.devices()[0]
    small = kerasrl.DQN("CartPole-v1", **DQN_SEED_RUN)  # 64x64, batches of 32: 141k, the host
    assert small.device == "auto" and small.learner.placement.learning == host
    assert small.learner.acting_device is None  # acts where it learns
    small.fit(300, progress=False)
    assert kinds(small.learner.state) == {"cpu"} and kinds(small.learner.acting_weights()) == {"cpu"}

    large = kerasrl.DQN("CartPole-v1", **{**DQN_SEED_RUN, "hidden_sizes": (512, 512),
                                          "batch_size": 256})  # 267k x 256: the GPU
    assert large.learner.placement.learning is None and large.learner.acting_device == host
    large.fit(300, progress=False)
    on(large, "gpu")
    assert kinds(large.learner.acting_weights()) == {"cpu"}
    np.testing.assert_allclose(large.learner.q_values(OBS), large.policy.q_values(OBS),
                               rtol=1e-5, atol=1e-6)
    pinned = kerasrl.DQN("CartPole-v1", device=GPU, **DQN_SEED_RUN)
    assert pinned.learner.acting_device is None  # a named device: acting there too
    pinned.fit(150, progress=False)
    on(pinned, "gpu")


def test_the_readme_python_example_trains_unchanged(tmp_path, monkeypatch):
    """A user with a GPU runs README.md's first Python block as it stands: it trains (50k steps)."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert "agent.fit(total_steps=50_000)" in block
    monkeypatch.chdir(tmp_path)  # it saves to runs/cartpole
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    agent = namespace["agent"]
    # It trained: 50k steps, a round of 128 updates every 256 steps after the first 1,000 (192
    # rounds), all finite. (Its greedy return is not asserted: on this project's CPU, seed 0,
    # 482.2 on JAX and 127.6 on PyTorch over 20 episodes, against about 22 for random play; runs
    # of 24,576 updates on two backends, or on a CPU and a GPU, part after the first few hundred.)
    assert agent.num_timesteps == 50_000 and agent.n_updates == 192 * 128
    assert len(agent.history.losses) == 192 and np.all(np.isfinite(agent.history.losses))


@pytest.mark.parametrize("algorithm", ["dqn", "ppo"])
def test_cpu_and_gpu_runs_of_one_seed_agree(algorithm):
    """Same seed, `device="cpu"` against `device="gpu"`: the same initial weights, the first 200
    updates' losses within GPU_CPU_RTOL, the same actions."""
    assert devices.full_precision()  # the promise holds at full float32 precision
    if algorithm == "dqn":
        make = lambda device: kerasrl.DQN("CartPole-v1", device=device, **DQN_SEED_RUN)  # noqa: E731
        steps = 300  # 200 updates, one per step after the first 100
    else:
        make = lambda device: kerasrl.PPO("CartPole-v1", device=device, **PPO_SEED_RUN)  # noqa: E731
        steps = 25 * 128  # 25 rollouts of 128 steps, 8 updates each
    runs = {}
    for device in ("cpu", GPU):
        agent = make(device)
        runs[device] = {"initial": agent.learner.arrays()}
        agent.fit(steps, progress=False)
        on(agent, "cpu" if device == "cpu" else "gpu")
        runs[device].update(losses=np.asarray(agent.history.losses, np.float64),
                            returns=np.asarray(agent.history.episode_returns),
                            actions=agent.predict(OBS))
    cpu, gpu = runs["cpu"], runs[GPU]
    for key, value in cpu["initial"].items():
        np.testing.assert_array_equal(gpu["initial"][key], value, err_msg=key)
    n = 200 if algorithm == "dqn" else 25
    assert len(cpu["losses"]) >= n and len(gpu["losses"]) >= n
    np.testing.assert_allclose(gpu["losses"][:n], cpu["losses"][:n], rtol=GPU_CPU_RTOL[algorithm])
    np.testing.assert_array_equal(gpu["returns"], cpu["returns"])  # the same actions all along
    np.testing.assert_array_equal(gpu["actions"], cpu["actions"])


def test_dqn_learns_the_identity_env_on_the_gpu():
    """tests/agents/test_dqn.py's short check, learning on the GPU."""
    agent = kerasrl.DQN(lambda: IdentityEnv(4, 20), seed=0, device=GPU, learning_rate=1e-3,
                        learning_starts=200, train_freq=1, batch_size=32,
                        target_update_interval=100, exploration_fraction=0.3, gamma=0.9,
                        buffer_size=5000)
    agent.fit(2500, progress=False)
    on(agent, "gpu")
    assert agent.evaluate(episodes=10)["mean_return"] == 20.0


def test_ppo_learns_a_continuous_target_on_the_gpu():
    """tests/agents/test_ppo.py's short continuous check, learning on the GPU."""
    agent = kerasrl.PPO(TargetEnv, seed=0, device=GPU, n_envs=4, n_steps=64, batch_size=64, n_epochs=4,
                        learning_rate=3e-3, gamma=0.9, gae_lambda=0.9)
    before = agent.evaluate(episodes=10)["mean_return"]
    agent.fit(20_000, progress=False)
    on(agent, "gpu")
    after = agent.evaluate(episodes=10)["mean_return"]
    assert after > -1.5 and after > before + 5, (before, after)
    assert np.all(agent.log_std < 0)


def test_sac_learns_the_best_action_of_a_continuous_bandit_on_the_gpu():
    """tests/agents/test_sac.py's short check (tests/agents/continuous_checks.py), on the GPU."""
    # tests/agents is on sys.path only once a test module there is imported: run alone, this tier
    # puts it there itself.
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "agents"))
    from continuous_checks import check_learns_the_target, trained_agent

    agent, before = trained_agent(kerasrl.SAC, device=GPU)
    on(agent, "gpu")
    check_learns_the_target(agent, before)


def test_a_checkpoint_saved_on_the_gpu_resumes_on_the_cpu_and_back(tmp_path):
    agent = kerasrl.DQN("CartPole-v1", device=GPU, **DQN_SEED_RUN)
    agent.fit(300, progress=False)
    q_gpu = agent.learner.q_values(OBS)
    agent.save(tmp_path / "gpu")

    on_cpu = kerasrl.DQN.load(tmp_path / "gpu", device="cpu")
    on(on_cpu, "cpu")
    np.testing.assert_allclose(on_cpu.learner.q_values(OBS), q_gpu, rtol=1e-5, atol=1e-6)
    on_cpu.fit(400, progress=False)  # resumed: the step count goes on
    assert on_cpu.num_timesteps == 400
    on_cpu.save(tmp_path / "cpu")

    back = kerasrl.DQN.load(tmp_path / "cpu", device=GPU)
    on(back, "gpu")
    np.testing.assert_allclose(back.learner.q_values(OBS), on_cpu.learner.q_values(OBS),
                               rtol=1e-5, atol=1e-6)
    back.fit(500, progress=False)
    assert back.num_timesteps == 500

    # A machine without a GPU: a process that sees none loads the GPU's checkpoint and acts.
    script = (f"import json, numpy as np, kerasrl; from kerasrl import backend; "
              f"assert backend.on_cpu(), backend.devices(); "
              f"a = kerasrl.DQN.load({str(tmp_path / 'gpu')!r}); "
              f"print(json.dumps(a.learner.q_values(np.array({OBS.tolist()}, np.float32)).tolist()))")
    env = {**os.environ, "KERAS_BACKEND": backend.NAME, "CUDA_VISIBLE_DEVICES": "",
           "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    q_cpu_only = np.asarray(json.loads(proc.stdout.strip().splitlines()[-1]), np.float32)
    np.testing.assert_allclose(q_cpu_only, q_gpu, rtol=1e-5, atol=1e-6)


def test_a_gpu_trained_policy_exports_to_onnx_and_agrees(tmp_path):
    import onnxruntime

    agent = kerasrl.DQN("CartPole-v1", device=GPU, **DQN_SEED_RUN)
    agent.fit(300, progress=False)
    on(agent, "gpu")
    path = agent.policy.export(tmp_path / "policy.onnx")  # checks itself against the policy
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    observations = np.random.default_rng(0).uniform(-2, 2, (256, 4)).astype(np.float32)
    onnx_actions = np.asarray(session.run(None, {name: observations})[0]).reshape(-1)
    np.testing.assert_array_equal(onnx_actions, agent.predict(observations))


class StackedNoise:
    """Random (36, 36, 1) uint8 frames (the Nature CNN's smallest input), the action that the
    first pixel names earns 1, 15 steps an episode: what is tested is the pixels' path to the GPU,
    not learning."""

    def __new__(cls, frame_stack: int | None = None):
        import gymnasium as gym

        class Frames(gym.Env):
            observation_space = gym.spaces.Box(0, 255, (36, 36, 1 if frame_stack else 4), np.uint8)
            action_space = gym.spaces.Discrete(3)

            def reset(self, *, seed=None, options=None):
                if seed is not None or not hasattr(self, "rng"):  # auto-resets go on with the stream
                    self.rng = np.random.default_rng(seed)
                self.t = 0
                return self.frame(), {}

            def frame(self):
                return self.rng.integers(0, 256, self.observation_space.shape, dtype=np.uint8)

            def step(self, action):
                self.t += 1
                frame = self.frame()
                return frame, float(action == frame[0, 0, 0] % 3), self.t >= 15, False, {}

        if frame_stack is None:
            return Frames()
        from kerasrl.envs.atari import FrameStack

        return FrameStack(Frames(), frame_stack)


# Pixels on the GPU at full precision: convolutions (cuDNN) sum in another order than the CPU's.
# Measured on an NVIDIA H100 (2026-11-27, this tier, the figure it prints): DQN's first 40 losses
# at most 4.5e-7 (JAX) and 3.5e-7 (PyTorch) apart, PPO's 8 at most 2.0e-7 and 1.9e-7: GPU_CPU_RTOL's
# factor of about 20 for other GPUs and builds.
PIXEL_RTOL = 1e-5


@pytest.mark.parametrize("algorithm", ["dqn", "ppo"])
def test_pixel_agents_train_on_the_gpu_as_on_the_cpu(algorithm):
    """DQN on stacked uint8 frames (the frame buffer, its stacks sent as gathered and put frames
    last on the learner's device) and PPO on uint8 frames (a uint8 rollout made float32 per
    minibatch on the device), the Nature CNN by default: a CPU and a GPU run of one seed start
    from the same weights, their first losses agree, and the GPU run's state stays on the GPU."""
    runs = {}
    for device in ("cpu", GPU):
        if algorithm == "dqn":
            agent = kerasrl.DQN(lambda: StackedNoise(4), seed=0, device=device, learning_starts=64,
                                train_freq=4, batch_size=16, buffer_size=1000, target_update_interval=40,
                                check_env=False)
            assert agent.buffer.frames_first
            steps = 64 + 4 * 40  # 40 updates
        else:
            agent = kerasrl.PPO(StackedNoise, seed=0, device=device, n_envs=2, n_steps=32, batch_size=32,
                                n_epochs=2, check_env=False)
            assert agent.buffer.observations.dtype == np.uint8
            steps = 8 * 64  # 8 rollouts of 64 steps, 4 updates each
        initial = agent.learner.arrays()
        agent.fit(steps, progress=False)
        on(agent, "cpu" if device == "cpu" else "gpu")
        runs[device] = initial, np.asarray(agent.history.losses, np.float64)
    (cpu_initial, cpu_losses), (gpu_initial, gpu_losses) = runs["cpu"], runs[GPU]
    for key, value in cpu_initial.items():
        np.testing.assert_array_equal(gpu_initial[key], value, err_msg=key)
    n = min(len(cpu_losses), len(gpu_losses))
    assert n >= 8 and np.all(np.isfinite(gpu_losses))
    relative = np.abs(gpu_losses[:n] - cpu_losses[:n]) / np.maximum(np.abs(cpu_losses[:n]), 1e-12)
    print(f"{backend.NAME} {algorithm} pixels: {n} losses, CPU/GPU max relative difference "
          f"{relative.max():.2e}")
    np.testing.assert_allclose(gpu_losses[:n], cpu_losses[:n], rtol=PIXEL_RTOL)


def test_compiled_loops_run_where_auto_puts_them_and_where_they_are_told():
    """Under "auto" the compiled loop runs on the GPU where a call is one compiled program (JAX),
    and on the host for small networks where it launches op by op (PyTorch: 1,733 env steps/s on
    an H100 against 4,377 on a 2-core CPU, BENCHMARKS.md); `device="gpu"` runs it on the GPU."""
    from kerasrl.compiled import CompiledPPO

    settings = dict(n_envs=4, n_steps=32, batch_size=64, n_epochs=2)
    auto_kind = "cpu" if devices.launches_per_op() else "gpu"
    for device, kind in (("auto", auto_kind), (GPU, "gpu")):
        loop = CompiledPPO("CartPole", seeds=[0], device=device, **settings)
        assert kinds(loop.state) == {kind}, device
        # The agent whose math the loop runs, a template, is built on the host (its eager ops
        # compile there, not on the GPU); the loop never reads its arrays.
        assert kinds(loop.agent.learner.state) == {"cpu"}, device
        loop.fit(1024)
        assert kinds(loop.state) == {kind} and loop.num_timesteps == 1024, device
        mean, returns = loop.evaluate(0, n_episodes=2)
        assert len(returns) == 2 and np.isfinite(mean)
    agent = kerasrl.PPO("kerasrl/OpsCartPole-v1", seed=0, **settings)
    agent.fit(1024, engine="compiled", progress=False)
    host = backend.devices()[0]
    assert agent.learner.placement.learning == host  # a small MLP learns on the host
    assert agent.compiled_engine(True).loop.placement.learning == (host if auto_kind == "cpu" else None)
    assert kinds(agent.learner.state) == {"cpu"} and len(agent.history.losses) > 0


# The agents added since the tier began, each a short run of one seed on the CPU and on the GPU:
# (env, settings, env steps). RecurrentPPO replays its LSTM in a compiled loop on JAX (one model
# step, rolled) and op by op on PyTorch; A2C, QR-DQN, C51 and NAF learn through the shared
# learner; CEM's elite weights live in the learner's state too.
NEWER_AGENTS = {
    "RecurrentPPO": ("CartPole-v1", dict(n_envs=2, n_steps=32, batch_size=32, n_epochs=2), 4 * 64),
    "A2C": ("CartPole-v1", dict(n_envs=4, n_steps=8), 40 * 32),
    "QRDQN": ("CartPole-v1", dict(learning_starts=100, train_freq=1, batch_size=32,
                                  target_update_interval=50), 140),
    "C51": ("CartPole-v1", dict(learning_starts=100, train_freq=1, batch_size=32,
                                target_update_interval=50), 140),
    "NAF": (TargetEnv, dict(learning_starts=100, train_freq=1, batch_size=32), 140),
    # Not run on a GPU yet (added 2026-11-29, no GPU lent): its noise comes from numpy, so the
    # CPU and GPU runs see the same draws and should agree as C51's do.
    "Rainbow": ("CartPole-v1", dict(learning_starts=100, train_freq=1, batch_size=32,
                                    target_update_interval=50, buffer_size=1000), 140),
    "IQN": ("CartPole-v1", dict(learning_starts=100, train_freq=1, batch_size=32, n_quantiles=8,
                                n_target_quantiles=8, target_update_interval=50,
                                buffer_size=1000), 140),
}
# Measured on an NVIDIA H100 (2026-11-27, this tier, the figure it prints): at most 3.0e-7 apart
# (NAF on PyTorch; RecurrentPPO 7.9e-8 on JAX, 7.2e-8 on PyTorch): a factor of about 30.
NEWER_AGENTS_RTOL = 1e-5


@pytest.mark.parametrize("name", sorted(NEWER_AGENTS))
def test_the_newer_agents_train_on_the_gpu_as_on_the_cpu(name):
    """One seed on the CPU and on the GPU: the same initial weights, the state on the GPU after
    training there, the losses within NEWER_AGENTS_RTOL."""
    env, settings, steps = NEWER_AGENTS[name]
    runs = {}
    for device in ("cpu", GPU):
        agent = getattr(kerasrl, name)(env, seed=0, device=device, check_env=False, **settings)
        initial = agent.learner.arrays()
        agent.fit(steps, progress=False)
        on(agent, "cpu" if device == "cpu" else "gpu")
        runs[device] = initial, agent.history.metric("q_loss" if name == "NAF" else "loss")
    (cpu_initial, cpu_losses), (gpu_initial, gpu_losses) = runs["cpu"], runs[GPU]
    for key, value in cpu_initial.items():
        np.testing.assert_array_equal(gpu_initial[key], value, err_msg=key)
    n = min(len(cpu_losses), len(gpu_losses))
    assert n >= 4 and np.all(np.isfinite(gpu_losses)), (n, gpu_losses)
    relative = np.abs(gpu_losses[:n] - cpu_losses[:n]) / np.maximum(np.abs(cpu_losses[:n]), 1e-12)
    print(f"{backend.NAME} {name}: {n} losses, CPU/GPU max relative difference {relative.max():.2e}")
    np.testing.assert_allclose(gpu_losses[:n], cpu_losses[:n], rtol=NEWER_AGENTS_RTOL)
