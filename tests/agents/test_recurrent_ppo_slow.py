"""Recurrent PPO to a real threshold (slow tier): CartPole with the velocities hidden, where a
memoryless MLP policy with the same settings and budget stays far below."""

from __future__ import annotations

import pytest

import kerasrl
from kerasrl.presets import PRESETS

pytestmark = pytest.mark.slow


def train(agent_class, seed: int):
    preset = PRESETS["cartpole-novel-recurrent-ppo"]
    agent = agent_class(preset.env, **{**preset.config, "seed": seed})
    agent.fit(preset.total_steps, progress=False)  # 100k steps
    return agent.evaluate(episodes=20)["mean_return"]


@pytest.mark.backend
def test_recurrent_ppo_balances_the_pole_without_velocities():
    returns = [train(kerasrl.RecurrentPPO, seed) for seed in (0, 1)]
    assert max(returns) >= 475 and min(returns) >= 300, returns


def test_an_mlp_policy_with_the_same_budget_stays_far_below():  # the default backend only
    returns = [train(kerasrl.PPO, seed) for seed in (0, 1)]
    assert max(returns) < 150, returns
