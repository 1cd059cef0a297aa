"""TD3, SAC and DDPG to the issue's thresholds (slow tier), on every backend: Pendulum-v1 mean
return >= -200 over 20 evaluation episodes within the RL-Zoo budget (the presets: 20,000 steps for
TD3 and SAC, 50,000 for DDPG), on at least 2 of 3 seeds; and the mountaincar-td3 preset solving
MountainCarContinuous-v0 (mean return >= 90) on at least 2 of 3 seeds."""

from __future__ import annotations

import pytest

import kerasrl
from kerasrl.presets import PRESETS

pytestmark = [pytest.mark.slow, pytest.mark.backend]

CLASSES = {"pendulum-td3": kerasrl.TD3, "pendulum-sac": kerasrl.SAC,
           "pendulum-ddpg": kerasrl.DDPG}


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_pendulum_within_the_zoo_budget_on_2_of_3_seeds(name):
    preset = PRESETS[name]
    returns = []
    for seed in range(3):
        agent = CLASSES[name](preset.env, **{**preset.config, "seed": seed})
        agent.fit(preset.total_steps, progress=False)
        returns.append(agent.evaluate(episodes=20)["mean_return"])
        agent.close()
        if sum(r >= -200 for r in returns) >= 2:
            break
    assert sum(r >= -200 for r in returns) >= 2, returns


def test_mountaincar_td3_solves_on_2_of_3_seeds():
    """MountainCarContinuous-v0 is solved at a 20-episode mean return of 90 (docs/continuous.md)."""
    preset = PRESETS["mountaincar-td3"]
    returns = []
    for seed in range(3):
        agent = kerasrl.TD3(preset.env, **{**preset.config, "seed": seed})
        agent.fit(preset.total_steps, progress=False)
        returns.append(agent.evaluate(episodes=20)["mean_return"])
        agent.close()
        if sum(r >= 90 for r in returns) >= 2:
            break
    assert sum(r >= 90 for r in returns) >= 2, returns
