"""Deep SARSA and Expected SARSA on the active backend: learning, on-policy targets, errors."""

from __future__ import annotations

import numpy as np
import pytest

import kerasrl
from kerasrl.envs.testing import ChainEnv, IdentityEnv

pytestmark = pytest.mark.backend

# Epsilon-greedy with 2 gradient steps a round: the settings these tests' margins were measured with.
FAST = dict(n_envs=4, n_steps=8, learning_rate=1e-3, loss="mse", target_update_interval=100,
            exploration_fraction=0.3, gamma=0.9, exploration="epsilon_greedy", gradient_steps=2)


@pytest.mark.slow_on_other_backends
@pytest.mark.parametrize("agent_class", [kerasrl.SARSA, kerasrl.ExpectedSARSA])
def test_learns_to_walk_the_chain(agent_class):
    # The walk pays only at the far end: exploring (30% of the run) must find it first.
    agent = agent_class(lambda: ChainEnv(5), seed=0, **FAST)
    agent.fit(8000, progress=False)
    assert agent.evaluate(episodes=4)["mean_return"] == 1.0  # bailing would give 0.1
    q = agent.policy.q_values(np.eye(5, dtype=np.float32))
    assert np.all(q[:, 1] > q[:, 0])


@pytest.mark.slow_on_other_backends  # test_parity.py's mlp_sarsa: SARSA's updates agree everywhere
def test_learns_identity_env():
    agent = kerasrl.SARSA(lambda: IdentityEnv(4, 20), seed=0, **{**FAST, "gamma": 0.5})
    agent.fit(6000, progress=False)
    assert agent.evaluate(episodes=8)["mean_return"] >= 19


@pytest.mark.slow_on_other_backends
def test_sarsa_bootstraps_from_the_action_taken_next():
    """With exploration always on, SARSA values the random policy: on the chain that is far below
    the greedy value that Q-learning would find."""
    # The targets are noisy (random next actions): a learning rate that falls to 0 over the run
    # lets the values settle on their mean. Measured over seeds 0-7 (JAX): every value within
    # 0.051 of the true one with it; with a constant rate, 3 seeds of 8 were 0.11 to 0.18 off.
    agent = kerasrl.SARSA(lambda: ChainEnv(3, bail_reward=0.0), seed=0, n_envs=8, n_steps=4,
                          learning_rate=3e-3, lr_schedule="linear", loss="mse", gamma=0.9,
                          target_update_interval=64, exploration="epsilon_greedy",
                          exploration_initial_eps=1.0, exploration_final_eps=1.0, gradient_steps=2)
    agent.fit(12_000, progress=False)
    q = agent.policy.q_values(np.eye(3, dtype=np.float32))
    # Random policy from the middle state: walking pays 1 at once, bailing pays 0. The value of
    # moving right from the first state is 0.9 * (0.5 * 1 + 0.5 * 0) = 0.45 under the random
    # policy, 0.9 under the greedy one.
    assert q[2, 1] == pytest.approx(1.0, abs=0.1)
    assert q[1, 1] == pytest.approx(0.45, abs=0.1)
    assert q[0, 1] == pytest.approx(0.9 * (0.5 * 0.45), abs=0.1)


@pytest.mark.parametrize("option", ["prioritized_replay", "buffer_size", "n_step"])
def test_replay_options_are_refused_with_the_reason(option):
    value = {"prioritized_replay": True, "buffer_size": 1000, "n_step": 3}[option]
    with pytest.raises(ValueError, match=f"on-policy.*{option}.*kerasrl.DQN"):
        kerasrl.SARSA("CartPole-v1", **{option: value})


def test_expected_sarsa_is_sarsa_with_expected_true():
    agent = kerasrl.ExpectedSARSA("CartPole-v1")
    assert agent.config.expected is True
    assert isinstance(agent, kerasrl.SARSA)


def test_continuous_actions_are_refused():
    with pytest.raises(ValueError, match="discrete action space"):
        kerasrl.SARSA("Pendulum-v1")


@pytest.mark.slow_on_other_backends
@pytest.mark.parametrize("tau", [0.1, 1.0])
def test_target_sync_is_polyak_averaging_with_tau(tau):
    """Each round first moves the target by the syncs due, tau * online + (1 - tau) * target per
    sync: a soft update is NOT a hard copy, and tau=1 is one."""
    # n_envs 2, interval 2: a sync is due every vector step; a round is 2 vector steps, so each
    # round applies 2 syncs with the online weights unchanged in between: 1 - (1 - tau)^2.
    agent = kerasrl.SARSA(lambda: IdentityEnv(4, 20), seed=0, n_envs=2, n_steps=2, tau=tau,
                          target_update_interval=2, learning_rate=1e-2)
    agent.fit(400, stop_at=40, progress=False)  # 10 rounds: online and target now differ
    online = [np.asarray(w) for w in agent.model.get_weights()]
    target = agent.target_weights
    assert max(float(np.max(np.abs(o - t))) for o, t in zip(online, target)) > 1e-4
    agent.fit(400, stop_at=44, progress=False)  # exactly one more round
    effective = 1 - (1 - tau) ** 2
    for after, o, t in zip(agent.target_weights, online, target):
        np.testing.assert_allclose(after, effective * o + (1 - effective) * t, rtol=1e-5,
                                   atol=1e-7)
    if tau < 1:  # a hard copy would have landed on the online weights
        lag = max(float(np.max(np.abs(a - o))) for a, o in zip(agent.target_weights, online))
        assert lag > 1e-5


@pytest.mark.slow_on_other_backends
def test_nan_loss_stops_training_naming_the_update():
    class NaNReward(IdentityEnv):
        def step(self, action):
            obs, _, term, trunc, info = super().step(action)
            return obs, float("nan"), term, trunc, info

    # check_env=False: the env check would refuse the NaN rewards when the agent is made
    agent = kerasrl.SARSA(lambda: NaNReward(), seed=0, n_envs=2, n_steps=4, gradient_steps=1,
                          check_env=False)
    with pytest.raises(FloatingPointError, match=r"SARSA loss became nan at update 1 "):
        agent.fit(100, progress=False)
    assert agent.num_timesteps == 8  # stopped at the first round


@pytest.mark.slow_on_other_backends
@pytest.mark.parametrize("agent_class", [kerasrl.SARSA, kerasrl.ExpectedSARSA])
def test_checkpoint_resumes_exactly(agent_class, tmp_path):
    straight = agent_class("CartPole-v1", seed=0, n_envs=2)
    straight.fit(600, progress=False)
    paused = agent_class("CartPole-v1", seed=0, n_envs=2)
    paused.fit(600, stop_at=300, progress=False)
    paused.save(tmp_path / "ckpt")
    resumed = kerasrl.Agent.load(tmp_path / "ckpt")
    assert type(resumed) is agent_class and resumed.num_timesteps == 300
    resumed.fit(600, progress=False)
    for a, b in zip(straight.model.get_weights(), resumed.model.get_weights()):
        np.testing.assert_array_equal(a, b)
