"""Policies alone: saved on one backend and loaded on every other (3 x 3: DQN, and Gaussian PPO
with its observation statistics and log std), subclassed models, conv + batch-norm networks, the
weights-only path, and load_policy from a checkpoint."""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np
import pytest

import kerasrl
from kerasrl.checkpoint import CheckpointError
from checkpoint_runs import BACKENDS, checkpoint_runs


@pytest.fixture(scope="session")
def worker_runs(request, tmp_path_factory):
    """tests/checkpoint_worker.py's results (made once per session, see checkpoint_runs.py)."""
    return checkpoint_runs(request, tmp_path_factory)


@pytest.mark.cross_backend
@pytest.mark.parametrize("saved_on", BACKENDS)
def test_policy_saved_on_each_backend_loads_on_every_backend(worker_runs, saved_on):
    """1,000 fixed observations: identical actions, Q-values within 1e-5 (measured: 7.2e-7)."""
    reference = np.load(worker_runs / f"policy-{saved_on}-on-{saved_on}.npz")
    for loaded_on in BACKENDS:
        other = np.load(worker_runs / f"policy-{saved_on}-on-{loaded_on}.npz")
        assert other["actions"].shape == (1000,)
        np.testing.assert_array_equal(other["actions"], reference["actions"])
        assert np.max(np.abs(other["q"] - reference["q"])) <= 1e-5, (saved_on, loaded_on)


@pytest.mark.cross_backend
@pytest.mark.parametrize("saved_on", BACKENDS)
def test_ppo_policy_saved_on_each_backend_loads_on_every_backend(worker_runs, saved_on):
    """A Gaussian PPO policy with observation normalization, loaded by load_policy in a fresh
    process on each backend: the same log std and statistics (exactly: they travel as JSON
    float64), and on 1,000 fixed observations the same means, actions and values within 1e-5."""
    saved = np.load(worker_runs / f"ppo-policy-{saved_on}-saved.npz")
    assert saved["log_std"].shape == (1,) and saved["count"] > 300
    assert np.max(np.abs(saved["mean"])) > 0.05 and not np.allclose(saved["var"], 1.0)
    assert np.ptp(saved["actions"]) > 0.05  # the policy is not constant
    for loaded_on in BACKENDS:
        loaded = np.load(worker_runs / f"ppo-policy-{saved_on}-on-{loaded_on}.npz")
        for key in ("log_std", "mean", "var", "count"):
            np.testing.assert_array_equal(loaded[key], saved[key], err_msg=f"{key} {loaded_on}")
        for key in ("means", "actions", "values"):
            assert loaded[key].shape == saved[key].shape, (key, loaded_on)
            assert np.max(np.abs(loaded[key] - saved[key])) <= 1e-5, (key, saved_on, loaded_on)


SPACES = (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))


@keras.saving.register_keras_serializable(package="kerasrl_tests")
class TwoHeads(keras.Model):
    """A subclassed Q-network with attribute names of its own, registered and configurable."""

    def __init__(self, width=16, n_actions=2, **kwargs):
        super().__init__(**kwargs)
        self.width, self.n_actions = width, n_actions
        self.torso_layer = keras.layers.Dense(width, activation="relu")
        self.value_part = keras.layers.Dense(1)
        self.advantage_part = keras.layers.Dense(n_actions)

    def call(self, x, training=False):
        h = self.torso_layer(x)
        a = self.advantage_part(h)
        return self.value_part(h) + a - keras.ops.mean(a, axis=-1, keepdims=True)

    def get_config(self):
        return {**super().get_config(), "width": self.width, "n_actions": self.n_actions}


class Unregistered(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(2)

    def call(self, x, training=False):
        return self.dense(x)


def built(model):
    model(np.zeros((1, 4), np.float32))
    return model


@pytest.mark.backend
def test_registered_subclassed_model_round_trips(tmp_path):
    policy = kerasrl.QPolicy(built(TwoHeads(width=8)), *SPACES)
    policy.save(tmp_path / "p")
    loaded = kerasrl.load_policy(tmp_path / "p")
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict(obs), policy.predict(obs))
    np.testing.assert_allclose(loaded.q_values(obs), policy.q_values(obs), atol=1e-6)
    assert isinstance(loaded.model, TwoHeads) and loaded.model.width == 8


@pytest.mark.backend
def test_unregistered_subclassed_model_is_saved_as_weights_with_the_fix(tmp_path):
    """Saving always succeeds: a class Keras cannot revive is saved as weights, with a warning
    that says how to register it; loading then asks for model_factory=."""
    policy = kerasrl.QPolicy(built(Unregistered()), *SPACES)
    with pytest.warns(UserWarning, match=r"weights only.*not registered.*"
                                         r"register_keras_serializable.*model_factory"):
        policy.save(tmp_path / "p")
    with pytest.raises(CheckpointError, match="model_factory"):
        kerasrl.load_policy(tmp_path / "p")
    loaded = kerasrl.load_policy(tmp_path / "p", model_factory=lambda o, a: Unregistered())
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    np.testing.assert_array_equal(loaded.q_values(obs), policy.q_values(obs))


@pytest.mark.backend
def test_weights_only_policy_loads_with_a_model_factory(tmp_path):
    policy = kerasrl.QPolicy(built(Unregistered()), *SPACES)
    policy.save(tmp_path / "p", weights_only=True)
    with pytest.raises(CheckpointError, match="model_factory"):
        kerasrl.load_policy(tmp_path / "p")
    loaded = kerasrl.load_policy(tmp_path / "p", model_factory=lambda o, a: Unregistered())
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    np.testing.assert_array_equal(loaded.q_values(obs), policy.q_values(obs))


@pytest.mark.backend
def test_load_policy_from_a_checkpoint_and_a_run_folder(tmp_path):
    agent = kerasrl.DQN("CartPole-v1", seed=1, learning_starts=20, buffer_size=100, batch_size=8)
    agent.fit(total_steps=50, progress=False, checkpoint_every=25, log_dir=tmp_path)
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    for path in (tmp_path, tmp_path / "checkpoints" / "ckpt-000000050"):
        policy = kerasrl.load_policy(path)
        np.testing.assert_array_equal(policy.predict(obs), agent.predict(obs))
        assert policy(obs[0]).shape == ()


def test_a_policy_folder_given_to_agent_load_and_an_env_of_other_spaces_given_to_evaluate_are_named(tmp_path):
    # Before: "manifest.json is not a kerasrl manifest of format kerasrl-checkpoint", and Keras's
    # "Input 0 ... is incompatible with the layer" from inside evaluate.
    from kerasrl.files import CheckpointError

    agent = kerasrl.PPO("CartPole-v1", seed=0, n_steps=16, batch_size=16)
    agent.policy.save(tmp_path / "policy")
    with pytest.raises(CheckpointError, match=r"policy is a policy folder \(the policy alone, without its training "
                                              r"state\): load it with kerasrl.load_policy\(path\)"):
        kerasrl.PPO.load(tmp_path / "policy")
    with pytest.raises(ValueError, match=r"evaluate\(env='Acrobot-v1'\): its observation and action spaces are "
                                         r"Box\(.*\(6,\), float32\) and Discrete\(3\), the agent's \(CartPole-v1\) "
                                         r"Box\(.*\(4,\), float32\) and Discrete\(2\)"):
        agent.evaluate(episodes=1, env="Acrobot-v1")
    with pytest.raises(ValueError, match="n_envs must be a positive number of envs, got 0"):
        agent.evaluate(episodes=1, n_envs=0)  # was taken as the default
    assert agent.evaluate(episodes=2, env="CartPole-v1", n_envs=1)["episodes"] == 2  # an env alike is taken


@pytest.mark.backend
def test_ppo_checkpoint_and_policy_round_trip(tmp_path):
    agent = kerasrl.PPO("CartPole-v1", seed=0, n_steps=32, batch_size=16, n_epochs=1,
                        normalize_observations=True)
    agent.fit(total_steps=64, progress=False)
    agent.save(tmp_path / "ckpt")
    resumed = kerasrl.PPO.load(tmp_path / "ckpt")
    assert resumed.num_timesteps == 64
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    policy = kerasrl.load_policy(tmp_path / "ckpt")
    np.testing.assert_array_equal(policy.predict(obs), agent.predict(obs))
    np.testing.assert_allclose(policy.distribution(obs), agent.policy.distribution(obs), atol=1e-6)
    resumed.fit(total_steps=96, progress=False)


def conv_batchnorm_dropout(observation_space, action_space):
    inputs = keras.Input(observation_space.shape)
    x = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Conv2D(8, 3, activation="relu")(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dropout(0.25)(keras.layers.Dense(16, activation="relu")(x))
    return keras.Model(inputs, keras.layers.Dense(int(action_space.n))(x))


@pytest.mark.backend
def test_conv_batchnorm_policy_round_trips_with_its_statistics(tmp_path):
    """A conv net with batch norm and dropout: after training, load_policy (from a policy folder
    and from a checkpoint) gives the same weights, batch-norm moving statistics included, and the
    same Q-values in inference mode."""
    from image_env import QuadrantEnv

    agent = kerasrl.DQN(lambda: QuadrantEnv(np.float32), model=conv_batchnorm_dropout, seed=0,
                        learning_starts=32, buffer_size=300, batch_size=16, train_freq=2)
    agent.fit(total_steps=200, progress=False)
    policy = agent.policy
    batch_norm = next(layer for layer in policy.model.layers
                      if isinstance(layer, keras.layers.BatchNormalization))
    moving_mean = keras.ops.convert_to_numpy(batch_norm.moving_mean)
    assert np.max(np.abs(moving_mean)) > 1e-3  # training moved the statistics off their start
    policy.save(tmp_path / "policy")
    agent.save(tmp_path / "ckpt")
    obs = np.random.default_rng(0).uniform(0, 1, (64, *policy.observation_space.shape))
    obs = obs.astype(np.float32)
    for path in (tmp_path / "policy", tmp_path / "ckpt"):
        loaded = kerasrl.load_policy(path)
        for a, b in zip(loaded.model.get_weights(), policy.model.get_weights()):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(loaded.q_values(obs), policy.q_values(obs), rtol=1e-6,
                                   atol=1e-6)
        np.testing.assert_array_equal(loaded.predict(obs), policy.predict(obs))
        # inference mode: dropout off, moving statistics, so the same observation gives the same
        # Q-values every time
        np.testing.assert_array_equal(loaded.q_values(obs), loaded.q_values(obs))
