"""TD3, SAC, TQC, CrossQ, DDPG and NAF to the issues' thresholds (slow tier), on every backend:
Pendulum-v1 mean return >= -200 over 20 evaluation episodes within the presets' budgets (RL Zoo's:
20,000 steps for TD3, SAC, TQC and CrossQ, 50,000 for DDPG; keras-rl's naf_pendulum.py: 50,000 for NAF), on at least 2 of 3
seeds; and the mountaincar-td3 preset solving MountainCarContinuous-v0 (mean return >= 90) on at
least 2 of 3 seeds."""

from __future__ import annotations

import pytest

import kerasrl
from kerasrl.presets import PRESETS

pytestmark = [pytest.mark.slow, pytest.mark.backend]

CLASSES = {"pendulum-td3": kerasrl.TD3, "pendulum-sac": kerasrl.SAC, "pendulum-tqc": kerasrl.TQC,
           "pendulum-crossq": kerasrl.CrossQ, "pendulum-ddpg": kerasrl.DDPG, "pendulum-naf": kerasrl.NAF}


def preset_returns_until(name: str, agent_class, threshold: float, seeds=range(3), needed=2):
    """Train the preset `name` from each seed in turn, evaluating 20 episodes after each run;
    stop once `needed` runs reached `threshold`. Returns the evaluation means."""
    preset = PRESETS[name]
    returns = []
    for seed in seeds:
        agent = agent_class(preset.env, **{**preset.config, "seed": seed})
        agent.fit(preset.total_steps, progress=False)
        returns.append(agent.evaluate(episodes=20)["mean_return"])
        agent.close()
        if sum(r >= threshold for r in returns) >= needed:
            break
    return returns


# NAF: measured -129 and -144 at 50k steps (JAX seeds 0-1), -119 and -130 (TensorFlow and PyTorch,
# seed 0) with numpy-drawn initial weights (2026-11-26); before them -119, -142 and -147 (JAX seeds
# 0-2), -127 and -121 (TensorFlow and
# PyTorch, seed 0); docs/continuous.md.
@pytest.mark.parametrize("name", sorted(CLASSES))
def test_pendulum_within_the_preset_budget_on_2_of_3_seeds(name):
    returns = preset_returns_until(name, CLASSES[name], -200)
    assert sum(r >= -200 for r in returns) >= 2, returns


def test_mountaincar_td3_solves_on_2_of_3_seeds():
    """MountainCarContinuous-v0 is solved at a 20-episode mean return of 90 (docs/continuous.md)."""
    returns = preset_returns_until("mountaincar-td3", kerasrl.TD3, 90)
    assert sum(r >= 90 for r in returns) >= 2, returns
