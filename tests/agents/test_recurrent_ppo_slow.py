"""Recurrent PPO to the issue's target (slow tier): CartPole with the velocities hidden, the preset's
settings and budget (RL Zoo's ppo_lstm entry, 100k steps), then 20 deterministic episodes.

Measured (docs/recurrent.md): JAX 500.0 and 480.2 (seeds 0 and 1), TensorFlow 500.0 (seed 0).
SB3-contrib itself, the same settings and protocol: 267.6 (seed 0): some seeds end below 475 at
this budget, so the rule is at least one of seeds 0 and 1 at 475 and the other at 250 or more;
an MLP PPO with the same settings, which cannot see the velocities, stays under half of that
(43.2, JAX seed 0).
"""

from __future__ import annotations

import dataclasses

import pytest

import kerasrl
from kerasrl.presets import PRESETS

pytestmark = [pytest.mark.slow, pytest.mark.backend]


def train(agent_class, seed: int) -> float:
    """The preset's run (for PPO, without the recurrent_* fields), then 20 episodes' mean."""
    preset = PRESETS["cartpole-novel-recurrent-ppo"]
    known = {field.name for field in dataclasses.fields(agent_class.config_class)}
    config = {key: value for key, value in preset.config.items() if key in known}
    agent = agent_class(preset.env, **{**config, "seed": seed})
    agent.fit(preset.total_steps, progress=False)  # 100k steps
    return agent.evaluate(episodes=20)["mean_return"]


def test_recurrent_ppo_reaches_475_where_an_mlp_policy_cannot():
    recurrent = [train(kerasrl.RecurrentPPO, seed) for seed in (0, 1)]
    assert max(recurrent) >= 475 and min(recurrent) >= 250, recurrent
    mlp = train(kerasrl.PPO, 0)
    assert mlp < 0.5 * min(recurrent), (mlp, recurrent)
