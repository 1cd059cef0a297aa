"""Policies alone: saved on one backend and loaded on every other (3 x 3), subclassed models,
the weights-only path, and load_policy from a checkpoint."""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np
import pytest

import kerasrl
from kerasrl.checkpoint import CheckpointError
from test_checkpoint import BACKENDS, worker_runs  # noqa: F401  (the shared session fixture)


@pytest.mark.parametrize("saved_on", BACKENDS)
def test_policy_saved_on_each_backend_loads_on_every_backend(worker_runs, saved_on):  # noqa: F811
    """1,000 fixed observations: identical actions, Q-values within 1e-5 (measured: 7.2e-7)."""
    reference = np.load(worker_runs / f"policy-{saved_on}-on-{saved_on}.npz")
    for loaded_on in BACKENDS:
        other = np.load(worker_runs / f"policy-{saved_on}-on-{loaded_on}.npz")
        assert other["actions"].shape == (1000,)
        np.testing.assert_array_equal(other["actions"], reference["actions"])
        assert np.max(np.abs(other["q"] - reference["q"])) <= 1e-5, (saved_on, loaded_on)


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
def test_unregistered_subclassed_model_fails_at_save_time_with_the_fix(tmp_path):
    policy = kerasrl.QPolicy(built(Unregistered()), *SPACES)
    with pytest.raises(CheckpointError, match=r"not registered.*register_keras_serializable"
                                              r"\(package=.*get_config.*weights_only=True"):
        policy.save(tmp_path / "p")
    assert not (tmp_path / "p").exists()


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
