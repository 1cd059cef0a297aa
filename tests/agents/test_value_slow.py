"""Value agents to real thresholds (slow tier: `python3 run.py slow`), on every backend.

The protocol is RL-Zoo's EvalCallback (and benchmarks/): train, and every EVAL_EVERY env steps
evaluate the greedy policy on 20 fresh episodes; an agent reaches a threshold when one of these
evaluations does. Training is not touched by the evaluations (their envs and draws are separate),
so stopping at the first success is the same run cut short.
"""

from __future__ import annotations

import pytest

import kerasrl
from kerasrl.presets import PRESETS

pytestmark = [pytest.mark.slow, pytest.mark.backend]

ZOO = PRESETS["cartpole-dqn"].config
EVAL_EVERY = 10_000

# Deep SARSA and Expected SARSA share these settings, on every backend (docs/agents.md explains the
# MSE loss).
SARSA_SETTINGS = dict(n_envs=8, n_steps=4, learning_rate=1e-3, loss="mse",
                      target_update_interval=1000, exploration_fraction=0.2,
                      exploration_final_eps=0.01, hidden_sizes=(128, 128), gradient_steps=2)


def evaluations_until(agent, total_steps: int, threshold: float) -> list[float]:
    """Train up to `total_steps`, evaluating every EVAL_EVERY steps; stop once one reaches
    `threshold`. Returns the evaluation means."""
    means = []
    for stop in range(EVAL_EVERY, total_steps + 1, EVAL_EVERY):
        agent.fit(total_steps, stop_at=stop, progress=False)
        means.append(agent.evaluate(episodes=20)["mean_return"])
        if means[-1] >= threshold:
            break
    return means


def test_dqn_zoo_settings_solve_cartpole_for_2_of_3_seeds():
    runs = [evaluations_until(kerasrl.DQN("CartPole-v1", seed=seed, **ZOO), 50_000, 475)
            for seed in range(3)]
    assert sum(max(means) >= 475 for means in runs) >= 2, runs


def test_double_dueling_n_step_prioritized_dqn_solves_cartpole():
    agent = kerasrl.DQN("CartPole-v1", seed=0, double_q=True, dueling=True, n_step=3,
                        prioritized_replay=True, **ZOO)
    means = evaluations_until(agent, 50_000, 475)
    assert max(means) >= 475, means


@pytest.mark.parametrize("agent_class", [kerasrl.SARSA, kerasrl.ExpectedSARSA])
def test_sarsa_reaches_450_within_100k_steps(agent_class):
    agent = agent_class("CartPole-v1", seed=0, **SARSA_SETTINGS)
    means = evaluations_until(agent, 100_000, 450)
    assert max(means) >= 450, means
