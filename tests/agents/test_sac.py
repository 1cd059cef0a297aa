"""SAC on the active backend: its losses against numpy, learning a known answer, saving,
exporting, exact resume and errors at creation."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kerasrl
from continuous_checks import (T, to_np, check_bad_input_is_refused_at_creation,
                               check_exact_resume, check_learns_the_target,
                               check_policy_saves_loads_and_exports, check_user_critics_resume,
                               check_user_models_are_used, trained_agent)
from kerasrl import losses
from kerasrl.envs.testing import TargetEnv

pytestmark = pytest.mark.backend


def np_squashed_gaussian(mean, log_std, noise):
    """The textbook form: Gaussian log density of u, minus sum log(1 - tanh(u)^2), in float64."""
    mean, log_std, noise = (np.asarray(a, np.float64) for a in (mean, log_std, noise))
    log_std = np.clip(log_std, -20.0, 2.0)
    u = mean + np.exp(log_std) * noise
    std = np.exp(log_std)
    log_density = -0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
    return np.tanh(u), np.sum(log_density - np.log(1.0 - np.tanh(u) ** 2), axis=-1)


def test_squashed_gaussian_matches_numpy():
    rng = np.random.default_rng(0)
    mean = rng.normal(size=(64, 2)).astype(np.float32)
    log_std = rng.uniform(-3, 1, (64, 2)).astype(np.float32)
    log_std[0, 0] = 5.0  # clipped to 2
    noise = rng.standard_normal((64, 2)).astype(np.float32)
    actions, log_probs = losses.squashed_gaussian(T(mean), T(log_std), T(noise))
    expected_actions, expected_log_probs = np_squashed_gaussian(mean, log_std, noise)
    np.testing.assert_allclose(to_np(actions), expected_actions, atol=1e-6)
    np.testing.assert_allclose(to_np(log_probs), expected_log_probs, rtol=1e-5, atol=1e-4)
    # Where tanh saturates in float32 the textbook form is -inf; the stable form stays finite.
    _, saturated = losses.squashed_gaussian(T(np.full((1, 1), 30.0, np.float32)),
                                            T(np.zeros((1, 1), np.float32)),
                                            T(np.zeros((1, 1), np.float32)))
    assert np.isfinite(to_np(saturated)).all()


def test_sac_losses_match_numpy():
    rng = np.random.default_rng(1)
    q1, q2 = rng.normal(size=(2, 32, 1)).astype(np.float32)
    log_probs = rng.normal(size=32).astype(np.float32)
    rewards = rng.normal(size=32).astype(np.float32)
    discounts = np.where(np.arange(32) % 4 == 0, 0.0, 0.99).astype(np.float32)
    target = losses.clipped_double_q_target([T(q1), T(q2)], T(rewards), T(discounts),
                                            T(log_probs), 0.2)
    expected = rewards + discounts * (np.minimum(q1, q2)[:, 0] - 0.2 * log_probs)
    np.testing.assert_allclose(to_np(target), expected, rtol=1e-6, atol=1e-6)
    actor = losses.sac_actor_loss([T(q1), T(q2)], T(log_probs), 0.2)
    np.testing.assert_allclose(to_np(actor), np.mean(0.2 * log_probs - np.minimum(q1, q2)[:, 0]),
                               rtol=1e-6)
    alpha_loss = losses.entropy_coefficient_loss(T(np.float32(-0.5)), T(log_probs), -2.0)
    np.testing.assert_allclose(to_np(alpha_loss), -np.mean(-0.5 * (log_probs - 2.0)), rtol=1e-6)


@pytest.fixture(scope="module")
def trained():
    return trained_agent(kerasrl.SAC)


@pytest.mark.slow_on_other_backends
def test_learns_the_best_action_of_a_continuous_bandit(trained):
    check_learns_the_target(*trained)


@pytest.mark.slow_on_other_backends
def test_entropy_coefficient_is_tuned(trained):
    agent, _ = trained
    # From 1.0, alpha falls as the policy's entropy sits above the target (-1 for one dimension).
    assert 0.0 < agent.ent_coef < 0.5, agent.ent_coef
    assert agent.history.updates[-1]["ent_coef"] < 0.5
    fixed = kerasrl.SAC(lambda: TargetEnv(), auto_entropy=False, ent_coef_init=0.3,
                        learning_starts=10, batch_size=8, hidden_sizes=(8,), buffer_size=100)
    fixed.fit(30, progress=False)
    assert fixed.ent_coef == pytest.approx(0.3, rel=1e-6)
    assert isinstance(fixed.policy, kerasrl.SquashedGaussianPolicy)


@pytest.mark.slow_on_other_backends
def test_policy_saves_loads_and_exports_with_scaling_inside(trained, tmp_path):
    check_policy_saves_loads_and_exports(trained[0], tmp_path)


@pytest.mark.slow_on_other_backends
def test_resume_is_exact(tmp_path):
    check_exact_resume(kerasrl.SAC, tmp_path)


def test_bad_input_is_refused_at_creation():
    check_bad_input_is_refused_at_creation(kerasrl.SAC)


@pytest.mark.slow_on_other_backends
def test_user_models():
    check_user_models_are_used(kerasrl.SAC, 2)


@pytest.mark.slow_on_other_backends
def test_user_critics_resume(tmp_path):
    check_user_critics_resume(kerasrl.SAC, tmp_path)
