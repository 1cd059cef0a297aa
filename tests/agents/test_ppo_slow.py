"""PPO to real thresholds (slow tier): CartPole-v1 on every backend, Pendulum-v1 on the default."""

from __future__ import annotations

import pytest

import kerasrl
from kerasrl.presets import PRESETS

pytestmark = pytest.mark.slow


def train_preset(name: str, seed: int = 0):
    preset = PRESETS[name]
    agent = kerasrl.PPO(preset.env, **{**preset.config, "seed": seed})
    agent.fit(preset.total_steps, progress=False)
    return agent


@pytest.mark.backend
def test_cartpole_solved_with_zoo_settings():
    agent = train_preset("cartpole-ppo")  # 100k steps
    result = agent.evaluate(episodes=20)
    assert result["mean_return"] >= 475, result


def test_pendulum_within_300k_steps():  # not marked backend: the default backend only
    agent = train_preset("pendulum-ppo")  # 300k steps
    result = agent.evaluate(episodes=20)
    assert result["mean_return"] >= -300, result
