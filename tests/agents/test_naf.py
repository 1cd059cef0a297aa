"""NAF on the active backend: its advantage and loss against numpy, learning a known answer,
saving mu alone, exact resume, errors at creation; and Pendulum-v1 (slow tier)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import kerasrl
from continuous_checks import (T, to_np, FAST, check_exact_resume, check_learns_the_target,
                               check_policy_saves_loads_and_exports, trained_agent)
from kerasrl import losses
from kerasrl.envs.testing import TargetEnv

pytestmark = pytest.mark.backend


def numpy_advantage(l_flat, mu, actions):
    """-1/2 (a - mu)^T L L^T (a - mu), L filled row by row with a loop, its diagonal exp'd."""
    batch, d = mu.shape
    out = np.empty(batch)
    for b in range(batch):
        lower, k = np.zeros((d, d)), 0
        for i in range(d):
            for j in range(i + 1):
                lower[i, j] = np.exp(l_flat[b, k]) if i == j else l_flat[b, k]
                k += 1
        diff = actions[b].astype(np.float64) - mu[b]
        out[b] = -0.5 * diff @ (lower @ lower.T) @ diff
    return out


@pytest.mark.parametrize("d", [1, 2, 3])
def test_naf_advantage_and_loss_match_numpy(d):
    rng = np.random.default_rng(d)
    n_l = d * (d + 1) // 2
    l_flat = rng.normal(0.0, 0.7, (16, n_l)).astype(np.float32)
    mu = rng.uniform(-1, 1, (16, d)).astype(np.float32)
    actions = rng.uniform(-1, 1, (16, d)).astype(np.float32)
    advantages = to_np(losses.naf_advantage(T(l_flat), T(mu), T(actions)))
    expected = numpy_advantage(l_flat, mu, actions)
    np.testing.assert_allclose(advantages, expected, rtol=1e-5, atol=1e-6)
    assert np.all(advantages < 0)  # P is positive definite: a != mu is worse than mu
    np.testing.assert_allclose(to_np(losses.naf_advantage(T(l_flat), T(mu), T(mu))), 0.0, atol=1e-7)
    lower = to_np(losses.naf_lower_triangular(T(l_flat), d))
    assert np.all(np.triu(lower, 1) == 0) and np.all(np.diagonal(lower, axis1=1, axis2=2) > 0)
    values = rng.normal(size=(16, 1)).astype(np.float32)
    targets = rng.normal(size=16).astype(np.float32)
    loss = to_np(losses.naf_loss(T(values), T(advantages.astype(np.float32)), T(targets)))
    np.testing.assert_allclose(loss, np.mean(0.5 * (values[:, 0] + expected - targets) ** 2),
                               rtol=1e-5)


@pytest.fixture(scope="module")
def trained():
    return trained_agent(kerasrl.NAF)


@pytest.mark.slow_on_other_backends
def test_learns_the_best_action_of_a_continuous_bandit(trained):
    """Q's maximum is mu: learning the quadratic reward of the bandit puts mu on the best action."""
    agent, before = trained
    check_learns_the_target(agent, before)
    assert agent.n_updates == 800 and set(agent.learner.state["target_params"]) == {"value"}


@pytest.mark.slow_on_other_backends
def test_history_reads_its_losses_by_name(trained):
    """NAF records q_loss, not one `loss`: `history.losses` says so and how to read it."""
    agent, _ = trained
    q_loss = agent.history.metric("q_loss")
    assert len(q_loss) == len(agent.history.updates) > 0 and np.all(np.isfinite(q_loss))
    with pytest.raises(KeyError, match=r"no single 'loss' but 'q_loss', 'q_value'.*history.metric\('q_loss'\)"):
        agent.history.losses
    with pytest.raises(KeyError, match="no 'critic_loss'; they record 'q_loss', 'q_value'"):
        agent.history.metric("critic_loss")


@pytest.mark.slow_on_other_backends
def test_policy_is_mu_alone_and_loads_alone(trained, tmp_path):
    agent, _ = trained
    assert isinstance(agent.policy, kerasrl.DeterministicActorPolicy)
    assert list(agent.policy.models()) == ["model"] and agent.policy.model is agent.actor
    check_policy_saves_loads_and_exports(agent, tmp_path, formats=())  # export: TD3's class


@pytest.mark.slow  # CI time; the statistics' round trip through a checkpoint is fast-tier
def test_resume_is_exact(tmp_path):  # (tests/agents/test_observation_normalization.py)
    check_exact_resume(kerasrl.NAF, tmp_path, action_noise="ornstein_uhlenbeck",
                       normalize_observations=True)


def test_user_models_and_bad_input_at_creation():
    space = TargetEnv().observation_space
    mu = kerasrl.networks.actor_network(space, 1, (8,), "tanh")
    value = kerasrl.networks.actor_network(space, 1, (8,), None, name="v")
    agent = kerasrl.NAF(TargetEnv, model=mu, value_model=value, **FAST)
    assert agent.actor is mu and agent.value_model is value and agent.critics[0] is value
    assert agent.l_model.output_shape == (None, 1)  # D (D + 1) / 2 for D = 1
    wide = kerasrl.networks.actor_network(space, 3, (8,), None, name="wide")
    with pytest.raises(ValueError, match=r"L model \(the 1 entries.*must output \(batch, 1\)"):
        kerasrl.NAF(TargetEnv, l_model=wide, **FAST)
    with pytest.raises(TypeError, match="NAF has no critic=.*value_model="):
        kerasrl.NAF(TargetEnv, critic=value, **FAST)
    with pytest.raises(ValueError, match="reward_scale"):
        kerasrl.NAFConfig(reward_scale=0.0)


def test_a_users_v_model_comes_back_with_the_checkpoint(tmp_path):
    """V of the user's (8 units where the default has 32-32-32) is saved beside mu, so that a load
    builds it again; L, the default, is built from the config."""
    value = kerasrl.networks.actor_network(gym.make("Pendulum-v1").observation_space, 1, (8,), None,
                                           name="v")
    agent = kerasrl.NAF("Pendulum-v1", value_model=value, **{**FAST, "learning_starts": 40})
    agent.fit(60, progress=False)
    assert sorted(agent.models_beside_policy()) == ["value_model"]
    loaded = kerasrl.NAF.load(agent.save(tmp_path / "naf"))
    assert loaded.value_model.count_params() == value.count_params()
    for key, array in agent.learner.arrays().items():
        np.testing.assert_array_equal(loaded.learner.arrays()[key], array, err_msg=key)
