"""Value agents to real thresholds (slow tier: `python3 run.py slow`), on every backend."""

from __future__ import annotations

import pytest

import kerasrl
from kerasrl.presets import PRESETS

pytestmark = [pytest.mark.slow, pytest.mark.backend]

ZOO = PRESETS["cartpole-dqn"].config

# Deep SARSA settings shared by every backend (docs/agents.md explains the MSE loss).
SARSA_SETTINGS = dict(n_envs=8, n_steps=4, learning_rate=1e-3, loss="mse",
                      target_update_interval=1000, exploration_fraction=0.2,
                      exploration_final_eps=0.01, hidden_sizes=(128, 128), gradient_steps=2)


def test_dqn_zoo_settings_solve_cartpole_for_2_of_3_seeds():
    results = []
    for seed in range(3):
        agent = kerasrl.DQN("CartPole-v1", seed=seed, **ZOO)
        agent.fit(50_000, progress=False)
        results.append(agent.evaluate(episodes=20)["mean_return"])
    assert sum(r >= 475 for r in results) >= 2, results


def test_double_dueling_n_step_prioritized_dqn_solves_cartpole():
    agent = kerasrl.DQN("CartPole-v1", seed=0, double_q=True, dueling=True, n_step=3,
                        prioritized_replay=True, **ZOO)
    agent.fit(50_000, progress=False)
    assert agent.evaluate(episodes=20)["mean_return"] >= 475


@pytest.mark.parametrize("agent_class", [kerasrl.SARSA, kerasrl.ExpectedSARSA])
def test_sarsa_reaches_450_within_100k_steps(agent_class):
    best = []
    for seed in range(2):
        agent = agent_class("CartPole-v1", seed=seed, **SARSA_SETTINGS)
        agent.fit(100_000, progress=False)
        best.append(agent.evaluate(episodes=20)["mean_return"])
        if best[-1] >= 450:
            break
    assert max(best) >= 450, best
