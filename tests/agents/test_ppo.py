"""PPO on the active backend: losses against numpy, learning on tiny envs, models, state, errors."""

from __future__ import annotations

import warnings

import gymnasium as gym
import keras
import numpy as np
import pytest
from gymnasium import spaces

import kerasrl
from kerasrl import losses
from kerasrl.agents.ppo import actor_critic_mlp
from kerasrl.envs.testing import IdentityEnv
from kerasrl.policies import RunningMeanStd, sample_categorical, sample_gaussian

pytestmark = pytest.mark.backend

FAST = dict(n_envs=4, n_steps=32, batch_size=64, n_epochs=4, learning_rate=3e-3, gamma=0.9,
            gae_lambda=0.9)


class TargetEnv(gym.Env):
    """Continuous identity: observe x in [-1, 1]^2, reward -|a - x|^2; 20 steps, then truncated."""

    def __init__(self, low=-2.0, high=2.0):
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Box(low, high, (2,), np.float32)
        self._x, self._t = np.zeros(2, np.float32), 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._x = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self._x, {}

    def step(self, action):
        reward = -float(np.sum(np.square(np.asarray(action) - self._x)))
        self._t += 1
        self._x = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self._x, reward, False, self._t >= 20, {}


# -- losses against numpy ---------------------------------------------------------------------
def np_log_softmax(logits):
    z = logits - logits.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def tensors(*arrays):
    """Numpy inputs as backend tensors, as the compiled update passes them."""
    return [keras.ops.convert_to_tensor(a) for a in arrays]


def test_distribution_terms_match_numpy():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((16, 5)).astype(np.float32) * 3
    actions = rng.integers(0, 5, 16).astype(np.int32)
    lp = np_log_softmax(logits.astype(np.float64))
    t_logits, t_actions = tensors(logits, actions)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(
        losses.categorical_log_prob(t_logits, t_actions)), lp[np.arange(16), actions], rtol=1e-5,
        atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(losses.categorical_entropy(t_logits)),
                               -(np.exp(lp) * lp).sum(-1), rtol=1e-5, atol=1e-6)
    mean = rng.standard_normal((16, 3)).astype(np.float32)
    log_std = np.array([-0.5, 0.0, 0.7], np.float32)
    a = rng.standard_normal((16, 3)).astype(np.float32)
    std = np.exp(log_std.astype(np.float64))
    ref = (-0.5 * ((a - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(-1)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(
        losses.gaussian_log_prob(*tensors(mean, log_std, a))), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(float(keras.ops.convert_to_numpy(
        losses.gaussian_entropy(*tensors(log_std)))),
                               np.sum(0.5 + 0.5 * np.log(2 * np.pi) + np.log(std)), rtol=1e-6)


@pytest.mark.parametrize("clip_range_vf", [None, 0.1])
def test_ppo_loss_matches_numpy(clip_range_vf):
    rng = np.random.default_rng(1)
    n = 64
    log_probs = rng.normal(-1, 0.3, n).astype(np.float32)
    old = (log_probs + rng.normal(0, 0.3, n)).astype(np.float32)
    adv = rng.standard_normal(n).astype(np.float32) * 2 + 0.5
    values, old_values = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    returns = rng.standard_normal(n).astype(np.float32)
    entropy = rng.uniform(0.1, 1.0, n).astype(np.float32)
    norm = losses.normalize_advantages(*tensors(adv))
    a = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(norm), a, rtol=1e-5, atol=1e-5)
    loss, metrics = losses.ppo_loss(
        *tensors(log_probs, old, a.astype(np.float32), values, returns, entropy), clip_range=0.2,
        ent_coef=0.01, vf_coef=0.5, old_values=tensors(old_values)[0], clip_range_vf=clip_range_vf)
    ratio = np.exp(log_probs.astype(np.float64) - old)
    policy = -np.mean(np.minimum(ratio * a, np.clip(ratio, 0.8, 1.2) * a))
    pred = values if clip_range_vf is None else old_values + np.clip(values - old_values, -0.1, 0.1)
    value = np.mean((returns - pred) ** 2)
    expected = policy + 0.5 * value - 0.01 * entropy.mean()
    got = {k: float(keras.ops.convert_to_numpy(v)) for k, v in metrics.items()}
    np.testing.assert_allclose(float(keras.ops.convert_to_numpy(loss)), expected, rtol=1e-5)
    np.testing.assert_allclose(got["policy_loss"], policy, rtol=1e-5)
    np.testing.assert_allclose(got["value_loss"], value, rtol=1e-5)
    log_ratio = log_probs.astype(np.float64) - old
    np.testing.assert_allclose(got["approx_kl"], np.mean(np.exp(log_ratio) - 1 - log_ratio),
                               rtol=1e-4)
    np.testing.assert_allclose(got["clip_fraction"], np.mean(np.abs(ratio - 1) > 0.2), atol=1e-6)


def test_numpy_sampling_follows_the_distribution():
    rng = np.random.default_rng(2)
    logits = np.tile(np.log([[0.1, 0.6, 0.3]]), (20_000, 1))
    actions, log_probs = sample_categorical(logits, rng)
    np.testing.assert_allclose(np.bincount(actions, minlength=3) / 20_000, [0.1, 0.6, 0.3],
                               atol=0.01)
    np.testing.assert_allclose(log_probs, np.log([0.1, 0.6, 0.3])[actions], rtol=1e-5)
    mean = np.zeros((20_000, 2))
    samples, lp = sample_gaussian(mean, np.array([0.0, np.log(2.0)]), rng)
    np.testing.assert_allclose(samples.std(axis=0), [1.0, 2.0], rtol=0.03)
    assert lp.shape == (20_000,)


def test_running_mean_std_matches_the_whole_batch():
    rng = np.random.default_rng(3)
    data = rng.normal(3.0, 2.0, (1000, 4))
    rms = RunningMeanStd((4,), epsilon=0.0)
    for chunk in np.split(data, 10):
        rms.update(chunk)
    np.testing.assert_allclose(rms.mean, data.mean(0), rtol=1e-10)
    np.testing.assert_allclose(rms.var, data.var(0), rtol=1e-10)


# -- learning ---------------------------------------------------------------------------------
@pytest.mark.slow_on_other_backends
def test_learns_identity_env_to_the_optimum():
    agent = kerasrl.PPO(lambda: IdentityEnv(4, 20), seed=0, ent_coef=0.0, **FAST)
    agent.fit(8000, progress=False)
    assert agent.evaluate(episodes=10)["mean_return"] == 20.0


@pytest.mark.slow_on_other_backends  # tests/test_ppo_parity.py: Gaussian updates agree across backends
def test_learns_a_continuous_target_and_shrinks_its_std():
    agent = kerasrl.PPO(TargetEnv, seed=0, **{**FAST, "n_steps": 64})
    before = agent.evaluate(episodes=10)["mean_return"]
    agent.fit(20_000, progress=False)
    after = agent.evaluate(episodes=10)["mean_return"]
    # A zero action scores about -13 over 20 steps; a perfect one 0.
    assert after > -1.5 and after > before + 5, (before, after)
    assert np.all(agent.log_std < 0)
    obs = np.array([[0.5, -0.5]], np.float32)
    np.testing.assert_allclose(agent.predict(obs), obs, atol=0.3)


# -- models -----------------------------------------------------------------------------------
class SharedSubclassed(keras.Model):
    def __init__(self, n_actions, **kwargs):
        super().__init__(**kwargs)
        self.torso = keras.layers.Dense(32, activation="tanh")
        self.pi = keras.layers.Dense(n_actions)
        self.v = keras.layers.Dense(1)

    def call(self, x, training=False):
        h = self.torso(x)
        return [self.pi(h), self.v(h)]


# A user's subclassed shared model, separate models and the default in the fast tier; the other
# ways in (the same learner and heads) in the slow tier: CI time.
@pytest.mark.parametrize("kind", ["default_shared", "subclassed_shared", "separate",
                                  *(pytest.param(kind, marks=pytest.mark.slow) for kind in
                                    ("functional_shared", "builder", "value_model_only"))])
@pytest.mark.slow_on_other_backends
def test_any_keras_model_learns(kind):
    options = {}
    space = gym.spaces.Box(0, 1, (4,))
    if kind == "default_shared":
        options["shared_network"] = True
    elif kind == "functional_shared":
        options["model"] = actor_critic_mlp(space, 4, (32,), shared=True)
    elif kind == "subclassed_shared":
        options["model"] = SharedSubclassed(4)
    elif kind == "separate":
        options["model"] = keras.Sequential([keras.Input((4,)), keras.layers.Dense(32, "tanh"),
                                             keras.layers.Dense(4)])
        options["value_model"] = kerasrl.networks.mlp((4,), 1, (32,))
    elif kind == "builder":
        options["model"] = lambda obs, act: kerasrl.networks.mlp(obs.shape, act.n, (32,))
    else:
        options["value_model"] = kerasrl.networks.mlp((4,), 1, (32,))
    agent = kerasrl.PPO(lambda: IdentityEnv(4, 20), seed=0, **FAST, **options)
    agent.fit(6000, progress=False)
    assert agent.evaluate(episodes=5)["mean_return"] >= 18
    assert agent.shared == kind.endswith("shared")
    if isinstance(options.get("model"), keras.Model):
        assert agent.model is options["model"]
    values = agent.policy.values(np.eye(4, dtype=np.float32))
    assert values.shape == (4,) and np.all(np.isfinite(values))


# -- acting, normalization, state ------------------------------------------------------------
def test_gaussian_actions_are_stored_unclipped_and_sent_clipped():
    sent = []

    class Record(gym.Wrapper):
        def step(self, action):
            sent.append(np.array(action))
            return self.env.step(action)

    agent = kerasrl.PPO(lambda: Record(TargetEnv(-0.1, 0.1)), seed=0, n_envs=1, n_steps=64,
                        batch_size=64, log_std_init=0.5)
    sent.clear()  # the env check's random steps when the agent was made
    agent.fit(32, progress=False)
    stored = agent.buffer.actions[:32, 0]
    assert np.abs(stored).max() > 0.5  # a std of e^0.5 goes far past the +-0.1 bounds
    np.testing.assert_allclose(np.array(sent), np.clip(stored, -0.1, 0.1))
    np.testing.assert_allclose(agent.buffer.log_probs[:32, 0],
                               kerasrl.policies.gaussian_log_prob_np(
                                   agent.policy.distribution(agent.buffer.observations[:32, 0]),
                                   agent.log_std, stored), rtol=1e-4, atol=1e-4)


def test_truncation_bootstraps_from_the_final_observation():
    agent = kerasrl.PPO(lambda: IdentityEnv(4, 5), seed=0, n_envs=2, n_steps=8, batch_size=16)
    agent.fit(14, progress=False)  # 7 vector steps: the episodes were cut after step 5
    ends = agent.buffer.episode_ends[:7]
    assert ends[4].all() and not ends[:4].any() and not agent.buffer.terminated.any()
    assert np.all(agent.buffer.truncation_values[4] != 0.0)
    assert np.all(agent.buffer.truncation_values[:4] == 0.0)


@pytest.mark.slow_on_other_backends
def test_observation_statistics_belong_to_the_policy():
    agent = kerasrl.PPO("CartPole-v1", seed=0, normalize_observations=True, **FAST)
    agent.fit(512, progress=False)
    policy = agent.policy
    assert policy.obs_rms is agent.obs_rms and agent.obs_rms.count > 500
    obs = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_array_equal(policy.predict(obs), agent._act_greedy(obs))
    assert agent.buffer.observations.std() < 3  # stored as the network saw them


@pytest.mark.slow_on_other_backends
def test_same_seed_same_run_and_state_dict_resumes_exactly():
    make = lambda: kerasrl.PPO(TargetEnv, seed=3, normalize_observations=True,
                               normalize_reward=True, **FAST)
    whole = make()
    whole.fit(1024, progress=False)
    first = make()
    first.fit(1024, stop_at=600, progress=False)  # stops within a rollout
    arrays, meta = first.state_dict()
    resumed = make()
    resumed.load_state_dict(arrays, meta)
    resumed.env = first.env  # env state belongs to the env (kerasrl.checkpoint saves it apart)
    resumed.fit(1024, progress=False)
    np.testing.assert_allclose(resumed.history.losses, whole.history.losses, rtol=1e-6)
    for a, b in zip(resumed.model.get_weights(), whole.model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(resumed.log_std, whole.log_std, rtol=1e-6)
    np.testing.assert_allclose(resumed.obs_rms.mean, whole.obs_rms.mean)


@pytest.mark.slow_on_other_backends
def test_target_kl_stops_the_epochs_early():
    agent = kerasrl.PPO(lambda: IdentityEnv(4, 20), seed=0, target_kl=1e-6,
                        **{**FAST, "n_epochs": 10})
    agent.fit(128, progress=False)
    update = agent.history.updates[-1]
    assert 1 <= update["gradient_steps"] < 20


@pytest.mark.slow_on_other_backends
def test_nan_loss_stops_training_naming_the_update():
    class NaNReward(IdentityEnv):
        def step(self, action):
            obs, _, term, trunc, info = super().step(action)
            return obs, float("nan"), term, trunc, info

    # check_env=False: the env check would refuse the NaN rewards when the agent is made
    agent = kerasrl.PPO(lambda: NaNReward(), seed=0, n_envs=2, n_steps=8, batch_size=8,
                        n_epochs=2, check_env=False)
    with pytest.raises(FloatingPointError, match=r"PPO loss became nan at update 4 "):
        agent.fit(100, progress=False)
    assert agent.num_timesteps == 16  # stopped after the first rollout's update


# -- errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize("options, message", [
    (dict(log_std_init=-1.0), "log_std_init"),
    (dict(batch_size=1000, n_steps=16, n_envs=2), "batch_size must be at most"),
    (dict(clip_range=0.0), "clip_range must be positive"),
    (dict(clip_range=-0.2), "clip_range must be positive"),
    (dict(gae_lambda=1.5), "gae_lambda"),
    (dict(clip_range_schedule="cosine"), "clip_range_schedule"),
])
def test_clear_errors_at_construction(options, message):
    with pytest.raises(ValueError, match=message):
        kerasrl.PPO(lambda: IdentityEnv(4, 20), **options)


def test_model_errors():
    with pytest.raises(ValueError, match=r"policy model .*must output \(batch, 4\)"):
        kerasrl.PPO(lambda: IdentityEnv(4, 20), model=kerasrl.networks.mlp((4,), 3))
    with pytest.raises(ValueError, match="value model must output"):
        kerasrl.PPO(lambda: IdentityEnv(4, 20), value_model=kerasrl.networks.mlp((4,), 4))
    shared = actor_critic_mlp(gym.spaces.Box(0, 1, (4,)), 4, (8,), shared=True)
    with pytest.raises(ValueError, match="two outputs"):
        kerasrl.PPO(lambda: IdentityEnv(4, 20), model=shared,
                    value_model=kerasrl.networks.mlp((4,), 1))
    wrong = actor_critic_mlp(gym.spaces.Box(0, 1, (4,)), 3, (8,), shared=True)
    with pytest.raises(ValueError, match="shared actor-critic model must output"):
        kerasrl.PPO(lambda: IdentityEnv(4, 20), model=wrong)


def test_unsupported_and_unbounded_action_spaces():
    class Actions(IdentityEnv):
        def __init__(self, action_space):
            super().__init__(4, 20)
            self.action_space = action_space

    # Several dimensions are acted in flat (tests/test_space_kinds.py); other kinds are refused.
    with pytest.raises(ValueError, match=r"handles Discrete, MultiDiscrete, MultiBinary and Box "
                                         r"action spaces.*ActionWrapper"):
        kerasrl.PPO(lambda: Actions(spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3)))),
                    check_env=False)
    with pytest.raises(ValueError, match=r"discrete actions that start at 0.*ActionWrapper"):
        kerasrl.PPO(lambda: Actions(spaces.MultiDiscrete([2, 3], start=[1, 0])), check_env=False)

    class Unbounded(TargetEnv):
        def __init__(self):
            super().__init__()
            self.action_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kerasrl.PPO(Unbounded, n_steps=16, batch_size=16)
    assert any("infinite bounds" in str(w.message) for w in caught)


@pytest.mark.slow_on_other_backends
def test_batch_size_that_does_not_divide_the_rollout_warns():
    with pytest.warns(UserWarning, match="does not divide"):
        agent = kerasrl.PPO(lambda: IdentityEnv(4, 20), n_envs=2, n_steps=50, batch_size=64)
    agent.fit(100, progress=False)
    assert agent.history.updates[-1]["gradient_steps"] == 10  # 100 // 64 per epoch, 10 epochs


def test_the_default_network_is_an_mlp_on_small_boards_and_the_nature_cnn_on_atari_frames():
    """MinAtar's 10x10 planes are read by the MLP on hidden_sizes (PureJaxRL's and rejax's
    network there; a CNN made the compiled loop hundreds of times slower on a CPU); frames of
    36 pixels a side and more by SB3's CnnPolicy (the Nature CNN; tests/agents/test_atari_networks.py)."""
    board = spaces.Box(0.0, 1.0, (10, 10, 4), np.float32)
    model = actor_critic_mlp(board, 3, hidden_sizes=(32, 16), activation="relu")
    assert not [layer for layer in model.layers if "Conv" in type(layer).__name__]
    assert [layer.units for layer in model.layers if isinstance(layer, keras.layers.Dense)] == [32, 16, 3]
    frames = spaces.Box(0, 255, (36, 36, 4), np.uint8)
    convs = [layer for layer in actor_critic_mlp(frames, 3).layers if "Conv" in type(layer).__name__]
    assert [layer.strides for layer in convs] == [(4, 4), (2, 2), (1, 1)]


class SmallFrames(gym.Env):
    """(8, 8, 2) uint8 frames, three actions, reward for the action the first pixel names; 16
    steps an episode. Small enough for the default MLP: what is tested is the frames' storage."""

    observation_space = spaces.Box(0, 255, (8, 8, 2), np.uint8)
    action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._frame = self.np_random.integers(0, 256, (8, 8, 2), dtype=np.uint8)
        return self._frame, {}

    def step(self, action):
        reward = float(action == self._frame[0, 0, 0] % 3)
        self._t += 1
        self._frame = self.np_random.integers(0, 256, (8, 8, 2), dtype=np.uint8)
        return self._frame, reward, False, self._t >= 16, {}


def test_uint8_frames_are_stored_as_uint8_and_train_as_float32_frames_would():
    """The rollout keeps uint8 frames (a quarter of float32's bytes, host and device); the update
    converts each minibatch on its device: the same weights, bit for bit, as float32 storage."""
    from kerasrl.buffers.rollout import RolloutBuffer

    settings = dict(seed=3, n_envs=2, n_steps=16, batch_size=8, n_epochs=2)
    stored_uint8 = kerasrl.PPO(SmallFrames, **settings)
    assert stored_uint8.buffer.observations.dtype == np.uint8
    stored_float = kerasrl.PPO(SmallFrames, **settings)
    stored_float.buffer = RolloutBuffer(16, 2, (8, 8, 2), (), np.int32, np.float32)
    initial = stored_uint8.actor.get_weights()
    for agent in (stored_uint8, stored_float):
        agent.fit(64)
    for a, b in zip(stored_uint8.actor.get_weights(), stored_float.actor.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(initial[0], stored_uint8.actor.get_weights()[0])  # two updates ran
    # Normalized observations are fractions: stored as float32.
    normalized = kerasrl.PPO(SmallFrames, normalize_observations=True, **settings)
    assert normalized.buffer.observations.dtype == np.float32
