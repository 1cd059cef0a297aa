"""Boltzmann (softmax) exploration of the value agents: exploration="boltzmann"."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import kerasrl
from kerasrl import backend, losses
from kerasrl.config import DQNConfig
from kerasrl.exploration import Boltzmann
from kerasrl.policies import boltzmann, boltzmann_probabilities

Q = np.array([[1.0, 2.0, 0.5, -1.0]], np.float32)


def softmax(z):
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_sampled_frequencies_match_the_softmax(temperature):
    """40,000 draws: each action's frequency within 0.015 of softmax(Q / T) (over 4 standard
    errors: sqrt(0.25 / 40,000) = 0.0025)."""
    rng = np.random.default_rng(0)
    actions = boltzmann(np.repeat(Q, 40_000, axis=0), temperature, rng)
    frequencies = np.bincount(actions, minlength=4) / len(actions)
    np.testing.assert_allclose(frequencies, softmax(Q[0] / temperature), atol=0.015)


def test_masked_actions_are_never_drawn_and_the_rest_follow_the_softmax():
    masks = np.array([[True, False, True, True]])
    rng = np.random.default_rng(1)
    actions = boltzmann(np.repeat(Q, 40_000, axis=0), 1.0, rng, np.repeat(masks, 40_000, axis=0))
    frequencies = np.bincount(actions, minlength=4) / len(actions)
    assert frequencies[1] == 0.0  # the best action, but masked
    allowed = softmax(np.where(masks[0], Q[0], -np.inf))
    np.testing.assert_allclose(frequencies, allowed, atol=0.015)


@pytest.mark.backend
def test_keras_ops_probabilities_and_expected_sarsa_target_match_numpy():
    """The expectation Expected SARSA bootstraps from is over the same softmax as the actions it
    samples (keras.ops against numpy), masks and per-transition temperatures included."""
    rng = np.random.default_rng(2)
    q_online, q_target = rng.normal(size=(2, 16, 5)).astype(np.float32) * 3
    masks = rng.random((16, 5)) < 0.7
    masks[:, 0] = True
    temperature = rng.uniform(0.1, 3.0, (16, 1)).astype(np.float32)
    rewards, discounts = rng.normal(size=16).astype(np.float32), np.full(16, 0.9, np.float32)
    ops = keras.ops.convert_to_tensor
    probs = backend.to_numpy(losses.boltzmann_probs(ops(q_online), ops(temperature), ops(masks)))
    reference = np.stack([boltzmann_probabilities(q_online[i:i + 1], float(temperature[i, 0]),
                                                  masks[i:i + 1])[0] for i in range(16)])
    np.testing.assert_allclose(probs, reference, atol=1e-6)
    assert np.all(probs[~masks] == 0.0)
    target = losses.expected_sarsa_target(ops(q_target), ops(rewards), ops(discounts), 0.0,
                                          ops(q_online), next_masks=ops(masks),
                                          temperature=ops(temperature))
    expected = rewards + discounts * (reference * np.where(masks, q_target, 0.0)).sum(-1)
    np.testing.assert_allclose(backend.to_numpy(target), expected, rtol=1e-5, atol=1e-5)


def test_a_bad_temperature_is_refused_where_it_is_given():
    with pytest.raises(ValueError, match="exploration_final_temperature must be a positive"):
        DQNConfig(exploration="boltzmann", exploration_final_temperature=0.0)
    with pytest.raises(ValueError, match="exploration must be 'epsilon_greedy' or 'boltzmann'"):
        DQNConfig(exploration="softmax")
    with pytest.raises(ValueError, match="Boltzmann temperature must be a positive finite"):
        boltzmann(Q, -1.0, np.random.default_rng())
    with pytest.raises(ValueError, match="Boltzmann temperature must be a positive finite"):
        boltzmann(Q, float("nan"), np.random.default_rng())


@pytest.mark.backend
@pytest.mark.slow_on_other_backends
# SARSA acts as Expected SARSA does; DQN's fit runs in the slow tier.
@pytest.mark.parametrize("algorithm", [pytest.param("DQN", marks=pytest.mark.slow), "ExpectedSARSA"])
def test_value_agents_explore_with_the_temperature_schedule(algorithm, tmp_path):
    from kerasrl.exploration import exploration_rate

    agent = getattr(kerasrl, algorithm)(
        "CartPole-v1", seed=0, exploration="boltzmann", exploration_initial_temperature=5.0,
        exploration_final_temperature=0.2, exploration_fraction=0.5, learning_starts=0,
        target_update_interval=50, check_env=False)
    assert [exploration_rate(agent.config, t, 128) for t in (0, 32, 64, 128)] == pytest.approx(
        [5.0, 2.6, 0.2, 0.2])
    agent.fit(128, progress=False, log_dir=tmp_path)
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "temperature" in header and "epsilon" not in header
    if algorithm == "DQN":  # the explorer an engine ships to remote actors
        explorer = agent.explorer(2)
        assert isinstance(explorer, Boltzmann) and explorer.temperature == 0.2
        actions, _ = explorer.act(agent.policy, np.zeros((3, 4), np.float32),
                                  np.random.default_rng(0))
        assert actions.shape == (3,) and set(actions.tolist()) <= {0, 1}
    with pytest.raises(ValueError, match="QPolicy.predict: the Boltzmann temperature"):
        agent.policy.predict(np.zeros(4, np.float32), deterministic=False, temperature=0)
