"""The environment boundary: numpy out, the Gymnasium API checked, SAME_STEP vector envs."""

import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import kerasrl.envs  # noqa: F401  (registers kerasrl/Snake-v0)
from kerasrl.envs import wrappers
from kerasrl.envs.snake_vector import SnakeVectorEnv
from kerasrl.envs.testing import ChainEnv
from kerasrl.envs.vector import env_factory, final_observations, make_vec_env
from kerasrl.envs.wrappers import ApiCheck, NumpyBoundary, as_numpy

RIGHT, BAIL = 1, 0


class TensorEnv(gym.Env):
    """Returns its observations (and reward) through `convert`, e.g. as framework tensors."""

    def __init__(self, convert):
        self.convert = convert
        self.observation_space = spaces.Box(-10, 10, shape=(3,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.convert(np.zeros(3, np.float32)), {}

    def step(self, action):
        self.t += 1
        return self.convert(np.full(3, self.t, np.float32)), self.convert(np.float32(0.5)), False, False, {}


class OldStepEnv(gym.Env):
    """Old Gym API: step returns (obs, reward, done, info)."""

    observation_space = spaces.Box(-1, 1, shape=(2,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, {}


class OldResetEnv(OldStepEnv):
    """Old Gym API: reset returns the observation alone."""

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32)


@pytest.fixture(autouse=True)
def fresh_warning(monkeypatch):
    """NumpyBoundary warns once per process; give each test its own 'once'."""
    monkeypatch.setattr(wrappers, "_warned_framework", False)


def run_boundary(convert, steps=3):
    env = NumpyBoundary(TensorEnv(convert))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        obs, info = env.reset(seed=0)
        results = [env.step(1) for _ in range(steps)]
    return obs, results, [w for w in caught if "converts them to numpy" in str(w.message)]


def check_numpy_results(obs, results):
    assert type(obs) is np.ndarray and obs.dtype == np.float32
    np.testing.assert_array_equal(obs, 0.0)
    for t, (obs, reward, terminated, truncated, _) in enumerate(results, start=1):
        assert type(obs) is np.ndarray
        np.testing.assert_array_equal(obs, float(t))
        assert type(reward) is float and reward == 0.5
        assert terminated is False and truncated is False


@pytest.mark.parametrize("requires_grad", [False, True])
def test_numpy_boundary_converts_torch_tensors_with_one_warning(requires_grad):
    import torch

    def to_torch(x):
        tensor = torch.tensor(x)
        return tensor.requires_grad_(True) if requires_grad and tensor.ndim else tensor

    obs, results, warned = run_boundary(to_torch)
    check_numpy_results(obs, results)
    assert len(warned) == 1
    assert "torch" in str(warned[0].message)


def test_numpy_boundary_converts_jax_arrays_with_one_warning():
    import jax.numpy as jnp

    obs, results, warned = run_boundary(jnp.asarray)
    check_numpy_results(obs, results)
    assert len(warned) == 1


def test_numpy_boundary_is_silent_for_numpy():
    obs, results, warned = run_boundary(lambda x: x)
    check_numpy_results(obs, results)
    assert warned == []


def test_as_numpy_nested():
    import torch

    got = as_numpy({"a": torch.ones(2, requires_grad=True), "b": (torch.zeros(1), np.arange(2))})
    assert type(got["a"]) is np.ndarray and type(got["b"][0]) is np.ndarray
    np.testing.assert_array_equal(got["a"], [1.0, 1.0])


def test_api_check_rejects_old_step():
    env = ApiCheck(OldStepEnv())
    env.reset(seed=0)
    with pytest.raises(TypeError, match="old Gym API"):
        env.step(0)


def test_api_check_rejects_old_reset():
    with pytest.raises(TypeError, match="old Gym API"):
        ApiCheck(OldResetEnv()).reset(seed=0)


def test_old_api_env_in_a_vector_env_fails_with_the_message():
    with pytest.raises(TypeError, match="old Gym API"):
        make_vec_env(OldResetEnv, 2).reset(seed=0)


def test_api_check_passes_gymnasium_envs():
    env = ApiCheck(ChainEnv())
    obs, info = env.reset(seed=0)
    assert len(env.step(1)) == 5 and len(env.step(1)) == 5


def test_make_vec_env_same_step_final_observations():
    length = 4
    vec = make_vec_env(lambda: ChainEnv(length=length), 2)
    assert vec.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP
    obs, _ = vec.reset(seed=0)
    for _ in range(2):  # both envs walk to position 2
        obs, *_ = vec.step(np.array([RIGHT, RIGHT]))
    np.testing.assert_array_equal(obs.argmax(-1), [2, 2])

    # env 0 bails at position 2; env 1 walks on to position 3.
    next_obs, rewards, terminated, truncated, info = vec.step(np.array([BAIL, RIGHT]))
    done = terminated | truncated
    np.testing.assert_array_equal(terminated, [True, False])
    np.testing.assert_allclose(rewards, [0.1, 0.0])
    # SAME_STEP: the returned observation of env 0 already starts the next episode...
    np.testing.assert_array_equal(next_obs.argmax(-1), [0, 3])
    # ...and final_observations recovers the true last observation of the finished one.
    real = final_observations(next_obs, done, info)
    np.testing.assert_array_equal(real.argmax(-1), [2, 3])
    np.testing.assert_array_equal(next_obs.argmax(-1), [0, 3])  # input not modified

    # env 1 reaches the end of the chain (reward 1); env 0 runs on in its new episode.
    next_obs, rewards, terminated, truncated, info = vec.step(np.array([RIGHT, RIGHT]))
    np.testing.assert_array_equal(terminated, [False, True])
    np.testing.assert_allclose(rewards, [0.0, 1.0])
    real = final_observations(next_obs, terminated | truncated, info)
    np.testing.assert_array_equal(next_obs.argmax(-1), [1, 0])
    np.testing.assert_array_equal(real.argmax(-1), [1, 3])
    vec.close()


def test_final_observations_without_done_is_next_obs():
    next_obs = np.arange(6.0).reshape(2, 3)
    assert final_observations(next_obs, np.array([False, False]), {}) is next_obs


def test_env_instance_is_handed_out_once_then_copied():
    instance = ChainEnv(length=3)
    make = env_factory(instance)
    first, second = make(), make()
    assert first.unwrapped is instance
    assert second.unwrapped is not instance and isinstance(second.unwrapped, ChainEnv)
    assert second.unwrapped.length == 3
    assert isinstance(first, NumpyBoundary)

    instance = ChainEnv(length=3)
    vec = make_vec_env(instance, 3)
    unwrapped = [env.unwrapped for env in vec.envs]
    assert unwrapped[0] is instance
    assert len({id(u) for u in unwrapped}) == 3
    vec.close()


@pytest.mark.parametrize("bad", [42, None, ["CartPole-v1"]])
def test_make_vec_env_bad_env_type(bad):
    with pytest.raises(TypeError, match="env must be"):
        make_vec_env(bad, 2)


@pytest.mark.parametrize("env_id, said", [
    ("NotAnEnv-v0", "Environment `NotAnEnv` doesn't exist."),
    ("CartPol-v1", "Did you mean: `CartPole`?"),
    ("kerasrl/OpsCartPol-v1", "Did you mean: `OpsCartPole`?"),
])
def test_an_unknown_env_id_is_refused_where_the_agent_is_made(env_id, said):
    # Before: Gymnasium's own error from inside the agent (and a traceback on the command line).
    import kerasrl

    with pytest.raises(ValueError, match=rf"Unknown environment '{re.escape(env_id)}': .*{re.escape(said)} Pass a "
                                         rf"registered Gymnasium id \(gymnasium.pprint_registry\(\) lists them"):
        kerasrl.DQN(env_id)


def test_ale_ids_work_as_gymnasium_names_them_and_say_what_to_install_without_ale_py():
    # Gymnasium 1.x knows ALE/... only once ale_py is imported; kerasrl registers them on first use.
    # In fresh processes: this one's tests may have registered them already.
    import subprocess
    import sys

    made = subprocess.run([sys.executable, "-c", "import kerasrl\nfrom kerasrl.envs.vector import env_factory\n"
                           "print(env_factory('ALE/Pong-v5')().observation_space.shape)"],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip().splitlines()[-1] == "(210, 160, 3)"
    missing = subprocess.run([sys.executable, "-c", "import sys\nsys.modules['ale_py'] = None\nimport kerasrl\n"
                              "kerasrl.PPO('ALE/Pong-v5')"], capture_output=True, text=True, timeout=300)
    assert missing.returncode == 1
    assert ("ValueError: 'ALE/Pong-v5' is an Atari game, and ale-py is not installed: pip install 'kerasrl[atari]'"
            in missing.stderr)


@pytest.mark.parametrize("n_envs", [0, -1])
def test_make_vec_env_needs_an_env(n_envs):
    with pytest.raises(ValueError, match="n_envs"):
        make_vec_env(ChainEnv, n_envs)


def test_registered_snake_uses_the_native_vector_env():
    vec = make_vec_env("kerasrl/Snake-v0", 3)
    assert isinstance(vec.unwrapped, SnakeVectorEnv)
    assert vec.num_envs == 3
    obs, _ = vec.reset(seed=0)
    assert obs.shape[0] == 3
    obs, rewards, terminated, truncated, info = vec.step(np.zeros(3, dtype=np.int64))
    assert rewards.shape == (3,) and terminated.shape == (3,)
    vec.close()


class CountingEnv(gym.Env):
    """Observation = steps since reset; reward 1 per step; ends after `length` steps; records actions."""

    def __init__(self, length=100):
        self.length = length
        self.observation_space = spaces.Box(0, 1000, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self.actions = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.actions.append(int(action))
        self.t += 1
        return np.array([self.t], np.float32), 1.0, self.t >= self.length, False, {}


def test_random_start_steps_varies_the_start_and_repeats_with_the_seed():
    env = wrappers.RandomStartSteps(CountingEnv(), max_steps=30)
    starts = [int(env.reset(seed=s)[0][0]) for s in range(200)]
    assert min(starts) == 0 and max(starts) == 29 and len(set(starts)) == 30
    assert [int(env.reset(seed=s)[0][0]) for s in range(200)] == starts
    fixed = wrappers.RandomStartSteps(CountingEnv(), max_steps=10, start_action=2)
    fixed.reset(seed=3)
    assert set(fixed.unwrapped.actions) <= {2}
    by_policy = wrappers.RandomStartSteps(CountingEnv(), max_steps=10, start_action=lambda obs: int(obs[0]) % 3)
    by_policy.reset(seed=4)
    assert len(by_policy.unwrapped.actions) > 2
    assert by_policy.unwrapped.actions == [t % 3 for t in range(len(by_policy.unwrapped.actions))]


def test_random_start_steps_resets_an_episode_that_ends_during_the_start():
    env = wrappers.RandomStartSteps(CountingEnv(length=3), max_steps=50)
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        assert obs[0] < 3


def test_action_repeat_sums_rewards_and_stops_at_the_end():
    env = wrappers.ActionRepeat(CountingEnv(length=10), repeat=4)
    env.reset(seed=0)
    obs, reward, terminated, _, _ = env.step(1)
    assert obs[0] == 4 and reward == 4.0 and not terminated
    env.step(1)
    obs, reward, terminated, _, _ = env.step(1)
    assert obs[0] == 10 and reward == 2.0 and terminated


@pytest.mark.parametrize("make", [lambda e: wrappers.ActionRepeat(e, 0),
                                  lambda e: wrappers.RandomStartSteps(e, 0),
                                  lambda e: wrappers.RandomStartSteps(e, 5, start_action=7)])
def test_keras_rl_wrappers_reject_bad_settings(make):
    with pytest.raises(ValueError, match="RandomStartSteps|ActionRepeat"):
        make(CountingEnv())
