"""DDPG on the active backend: its target against numpy, learning a known answer with either
exploration noise, saving, exporting, exact resume and errors at creation."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import kerasrl
from continuous_checks import (check_bad_input_is_refused_at_creation, check_exact_resume,
                               check_learns_the_target, check_policy_saves_loads_and_exports,
                               check_user_models_are_used, trained_agent)
from kerasrl import losses
from kerasrl.exploration import ActionNoise

pytestmark = pytest.mark.backend


def test_ddpg_target_is_the_one_critic_bellman_target():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(16, 1)).astype(np.float32)
    rewards = rng.normal(size=16).astype(np.float32)
    discounts = np.full(16, 0.98, np.float32)
    target = keras.ops.convert_to_numpy(losses.clipped_double_q_target(
        [keras.ops.convert_to_tensor(q)], keras.ops.convert_to_tensor(rewards),
        keras.ops.convert_to_tensor(discounts)))
    np.testing.assert_allclose(target, rewards + 0.98 * q[:, 0], rtol=1e-6)


def test_ornstein_uhlenbeck_noise_is_the_recurrence_and_resets_per_env():
    noise = ActionNoise("ornstein_uhlenbeck", 0.3, (2, 1), theta=0.15, dt=0.01)
    rng, reference = np.random.default_rng(0), np.random.default_rng(0)
    x = np.zeros((2, 1))
    for _ in range(5):
        draws = noise(rng)
        x = x - 0.15 * x * 0.01 + 0.3 * np.sqrt(0.01) * reference.standard_normal((2, 1))
        np.testing.assert_allclose(draws, x, rtol=1e-6)
    noise.reset(np.array([True, False]))
    assert noise.state[0, 0] == 0.0 and noise.state[1, 0] == x[1, 0]


@pytest.fixture(scope="module")
def trained():
    # keras-rl's Ornstein-Uhlenbeck noise; Gaussian noise is TD3's default, learned in test_td3.
    return trained_agent(kerasrl.DDPG, action_noise="ornstein_uhlenbeck", action_noise_std=0.3)


@pytest.mark.slow_on_other_backends
def test_learns_the_best_action_of_a_continuous_bandit(trained):
    check_learns_the_target(*trained)


@pytest.mark.slow_on_other_backends
def test_policy_saves_loads_and_exports_with_scaling_inside(trained, tmp_path):
    check_policy_saves_loads_and_exports(trained[0], tmp_path)


@pytest.mark.slow_on_other_backends
def test_resume_is_exact(tmp_path):
    check_exact_resume(kerasrl.DDPG, tmp_path, action_noise="ornstein_uhlenbeck")


def test_bad_input_is_refused_at_creation():
    check_bad_input_is_refused_at_creation(kerasrl.DDPG)


@pytest.mark.slow_on_other_backends
def test_user_models():
    check_user_models_are_used(kerasrl.DDPG, 1)
