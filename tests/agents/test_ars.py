"""ARS: its step against SB3-contrib's own `ARS._do_one_update` on the same directions and returns,
the RL Zoo's CartPole run, Box actions, saving and exporting, exact resume, and errors at
creation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import kerasrl
from kerasrl.agents.ars import ars_update

pytestmark = pytest.mark.backend


def test_ars_step_equals_sb3_contribs():
    """From the same weights, directions and candidates' returns, kerasrl's step and SB3-contrib's
    `ARS._do_one_update` give the same weights (SB3 computes in float32): top directions by the
    better of their two returns, the kept returns' std (n - 1), the step."""
    torch = pytest.importorskip("torch")
    from sb3_contrib import ARS as ContribARS
    from stable_baselines3.common.logger import configure

    contrib = ContribARS("LinearPolicy", "CartPole-v1", n_delta=4, n_top=2, delta_std=0.05,
                         learning_rate=0.02, zero_policy=False, seed=0)
    contrib.set_logger(configure(None, []))
    contrib._current_progress_remaining = 1.0
    rng = np.random.default_rng(5)
    start = contrib.weights.numpy().astype(np.float64)
    deltas = rng.standard_normal((4, len(start))).astype(np.float32)
    returns = np.array([12.0, 40.0, 9.0, 33.0, 30.0, 8.0, 10.0, 35.0], np.float32)  # plus, minus
    seen = {}

    def evaluate(candidate_weights, callback, async_eval):
        seen["candidates"] = candidate_weights.numpy()
        return torch.tensor(returns)

    contrib.evaluate_candidates = evaluate
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "normal", lambda *args, **kwargs: torch.tensor(deltas))
        contrib._do_one_update(callback=None, async_eval=None)
    scaled = 0.05 * deltas.astype(np.float64)
    np.testing.assert_allclose(seen["candidates"], np.concatenate([start + scaled, start - scaled]),
                               rtol=1e-6, atol=1e-7)
    weights, step_size, return_std, kept = ars_update(start, deltas, returns[:4], returns[4:], 2,
                                                      0.02)
    assert list(kept) == [1, 3]  # max(r+, r-): 40, 35 beat 30 and 12
    np.testing.assert_allclose(weights, contrib.weights.numpy(), rtol=1e-5, atol=1e-6)
    assert not np.allclose(weights, start)
    np.testing.assert_allclose(return_std, np.std([40.0, 35.0, 8.0, 33.0], ddof=1))


def test_learns_cartpole_at_the_zoos_settings():
    """ars.yml's CartPole-v1: one env, a linear policy, 2 directions, 50,000 steps. Measured (JAX,
    AMD EPYC): 500 over 20 greedy episodes on each of seeds 0 to 5, 11 to 15 s each."""
    returns = []
    for seed in (0, 1):
        agent = kerasrl.ARS("CartPole-v1", seed=seed, n_delta=2)
        agent.fit(50_000, progress=False)
        returns.append(agent.evaluate(episodes=10)["mean_return"])
        if returns[-1] >= 475:
            break
    assert returns[-1] >= 475, returns
    assert agent.n_iterations > 10 and agent.history.updates[-1]["iteration"] == agent.n_iterations


@pytest.mark.slow_on_other_backends
def test_box_actions_save_export_and_resume_exactly(tmp_path):
    """Pendulum's Box actions (a tanh actor scaled to [-2, 2]), observations normalized (ARS V2);
    a checkpoint halfway through an iteration resumes to the run made in one go, directions,
    candidates and statistics included; the policy carries the statistics."""
    config = dict(n_delta=3, n_top=2, n_envs=2, delta_std=0.1, seed=4, normalize_observations=True)
    straight = kerasrl.ARS("Pendulum-v1", **config)
    straight.fit(3_000, progress=False)
    first = kerasrl.ARS("Pendulum-v1", **config)
    first.fit(3_000, stop_at=1_300, progress=False)  # 6.5 episodes of 200 steps: mid-iteration
    assert first._candidates is not None and first._deltas is not None
    resumed = kerasrl.ARS.load(first.save(tmp_path / "ckpt"))
    resumed.fit(3_000, progress=False)
    np.testing.assert_array_equal(resumed.weights, straight.weights)
    for key, value in straight.obs_rms.state_dict().items():
        np.testing.assert_array_equal(resumed.obs_rms.state_dict()[key], value, err_msg=key)
    assert straight.obs_rms.count == pytest.approx(3_000, abs=1e-3)  # every observation acted on
    assert resumed.n_iterations == straight.n_iterations > 0
    assert resumed.history.updates == straight.history.updates
    observations = np.random.default_rng(0).uniform(-1, 1, (8, 3)).astype(np.float32)
    actions = straight.predict(observations)
    assert actions.shape == (8, 1) and np.all(np.abs(actions) <= 2.0)
    policy = kerasrl.load_policy(straight.policy.save(tmp_path / "policy"))
    np.testing.assert_allclose(policy.predict(observations), actions, atol=1e-6)
    policy.export(tmp_path / "ars.onnx")  # checked against the policy on export


def test_settings_it_cannot_use_are_refused_at_creation():
    with pytest.raises(ValueError, match="ARS searches the weights without gradients.*gamma.*"
                                         "Its knobs are n_delta"):
        kerasrl.ARS("CartPole-v1", gamma=0.99)
    with pytest.raises(ValueError, match=r"n_top.*None or from 1 to n_delta = 2"):
        kerasrl.ARS("CartPole-v1", n_delta=2, n_top=3)
    with pytest.raises(ValueError, match="ARS handles Discrete, MultiDiscrete and bounded Box"):
        kerasrl.ARS(Unbounded, n_delta=2)


class Unbounded(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, True, {}
