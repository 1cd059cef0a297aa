"""TD3 on the active backend: its losses against numpy, learning a known answer, saving,
exporting, exact resume and errors at creation."""

from __future__ import annotations

import numpy as np
import pytest

import kerasrl
from continuous_checks import (T, to_np, check_bad_input_is_refused_at_creation,
                               check_exact_resume, check_learns_the_target,
                               check_policy_saves_loads_and_exports, check_user_models_are_used,
                               trained_agent)
from kerasrl import losses

pytestmark = pytest.mark.backend


def test_td3_target_matches_numpy():
    rng = np.random.default_rng(0)
    mu_next = rng.uniform(-1, 1, (64, 2)).astype(np.float32)
    noise = (0.4 * rng.standard_normal((64, 2))).astype(np.float32)
    smoothed = to_np(losses.smoothed_target_actions(T(mu_next), T(noise), 0.5))
    expected = np.clip(mu_next + np.clip(noise, -0.5, 0.5), -1.0, 1.0)
    np.testing.assert_allclose(smoothed, expected, atol=1e-6)
    assert (np.abs(noise) > 0.5).any() and (np.abs(mu_next + noise) > 1).any()  # both clips bite
    q1, q2 = rng.normal(size=(2, 64, 1)).astype(np.float32)
    rewards = rng.normal(size=64).astype(np.float32)
    discounts = np.where(np.arange(64) % 3 == 0, 0.0, 0.98).astype(np.float32)
    target = to_np(losses.clipped_double_q_target([T(q1), T(q2)], T(rewards), T(discounts)))
    np.testing.assert_allclose(target, rewards + discounts * np.minimum(q1, q2)[:, 0], atol=1e-6)


def test_td3_critic_and_actor_losses_match_numpy():
    rng = np.random.default_rng(1)
    q1, q2 = rng.normal(size=(2, 32, 1)).astype(np.float32)
    y = rng.normal(size=32).astype(np.float32)
    expected = np.mean((q1[:, 0] - y) ** 2) + np.mean((q2[:, 0] - y) ** 2)
    np.testing.assert_allclose(to_np(losses.critic_loss([T(q1), T(q2)], T(y))), expected, rtol=1e-6)
    np.testing.assert_allclose(to_np(losses.deterministic_actor_loss(T(q1))), -q1.mean(), rtol=1e-6)


@pytest.fixture(scope="module")
def trained():
    return trained_agent(kerasrl.TD3)


@pytest.mark.slow_on_other_backends
def test_learns_the_best_action_of_a_continuous_bandit(trained):
    check_learns_the_target(*trained)


@pytest.mark.slow_on_other_backends
def test_delayed_actor_updates(trained):
    agent, _ = trained
    # 800 learning steps: the critic moved at each, the actor and the targets at every second.
    assert agent.n_updates == 800 and int(np.asarray(agent.learner.state["step"])) == 800
    assert isinstance(agent.policy, kerasrl.DeterministicActorPolicy)


@pytest.mark.slow_on_other_backends  # CI time; passed on TensorFlow and PyTorch when written
def test_one_step_rounds_skip_the_actor_gradient_with_the_same_result():
    """A round of one gradient step (the zoo's train_freq 1, gradient_steps 1) runs a compiled
    step that updates the actor, or one that leaves it (no actor gradient), as the step count
    says: the same state as the masked step of longer rounds, step for step."""
    from kerasrl.agents.continuous import ContinuousAgent
    from kerasrl.envs.testing import TargetEnv

    agent = kerasrl.TD3(TargetEnv, seed=0, learning_starts=16, batch_size=8, hidden_sizes=(8,),
                        buffer_size=200)
    agent.fit(48, progress=False)
    start, n_updates = agent.learner.arrays(), agent.n_updates
    batches = [agent.sample_batches() for _ in range(4)]
    results = []
    for update in (agent.update, lambda b, lr: ContinuousAgent.update(agent, b, lr)):
        agent.learner.load_arrays(start)
        agent.n_updates = n_updates
        losses = [update(b, 1e-3) for b in batches]
        results.append((losses, agent.learner.arrays()))
    (fast_losses, fast), (masked_losses, masked) = results
    assert fast.keys() == masked.keys()
    for key in fast:
        np.testing.assert_allclose(fast[key], masked[key], rtol=1e-5, atol=1e-6, err_msg=key)
    for a, b in zip(fast_losses, masked_losses):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
    actor = [k for k in fast if k.startswith("learner/params/actor/")]
    assert any(not np.array_equal(fast[k], start[k]) for k in actor)  # the actor did move


@pytest.mark.slow_on_other_backends
def test_policy_saves_loads_and_exports_with_scaling_inside(trained, tmp_path):
    check_policy_saves_loads_and_exports(trained[0], tmp_path, formats=("onnx", "saved_model"))


@pytest.mark.slow_on_other_backends
def test_resume_is_exact_with_ornstein_uhlenbeck_noise(tmp_path):
    check_exact_resume(kerasrl.TD3, tmp_path, action_noise="ornstein_uhlenbeck")


def test_bad_input_is_refused_at_creation():
    check_bad_input_is_refused_at_creation(kerasrl.TD3)


@pytest.mark.slow_on_other_backends
def test_user_models():
    check_user_models_are_used(kerasrl.TD3, 1)
