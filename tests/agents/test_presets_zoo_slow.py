"""The RL Baselines3 Zoo presets for Acrobot, MountainCar and LunarLander learn (slow tier, JAX):
each preset's whole run from seeds 0, 1, 2 in turn, 50 greedy evaluation episodes after each,
until enough seeds reached the bar. The bars sit below what was measured here (docs/presets.md:
the runs, and the zoo's published figures beside them) by a margin for other machines."""

from __future__ import annotations

import pytest

import kerasrl
from kerasrl.presets import get_preset

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(kerasrl.backend.NAME != "jax",
                                 reason="the presets' whole runs are measured on JAX")]


def preset_returns_until(name: str, bar: float, needed: int, seeds=range(3)) -> list[float]:
    """Train the preset from each seed in turn (50 greedy evaluation episodes after each run);
    stop once `needed` runs reached `bar`. Returns the evaluation means."""
    preset = get_preset(name)
    returns = []
    for seed in seeds:
        agent = preset.make_agent(seed=seed)
        try:
            agent.fit(preset.total_steps, progress=False)
            returns.append(agent.evaluate(episodes=50)["mean_return"])
        finally:
            agent.close()
        if sum(r >= bar for r in returns) >= needed:
            break
    return returns


# name: (bar, how many of seeds 0-2, or of the seeds given, reach it). What the seeds reached on
# JAX (docs/presets.md) beside each; LunarLander: a random policy scores about -180, a lander that hovers about -100.
BARS = {
    "lunarlander-ppo": (200.0, 2),  # 252.2, 239.3, 239.5
    "lunarlander-continuous-ppo": (200.0, 2),  # 269.6, 264.8, 266.0
    "bipedalwalker-ppo": (250.0, 1),  # 289.4, 293.0, 291.1 (18 to 21 minutes each)
    "lunarlander-dqn": (0.0, 2),  # 98.2, 224.5, 50.1
    "lunarlander-a2c": (-100.0, 2),  # 7.8, 59.6, -44.3 (SB3 here: 36.0, -21.6, 69.9)
    "acrobot-ppo": (-100.0, 2),  # -69.9, -68.1, -71.4
    "acrobot-a2c": (-110.0, 2),  # -87.0, -79.3, -77.8
    "acrobot-dqn": (-100.0, 2),  # -113.7, -75.3, -69.6
    "mountaincar-ppo": (-150.0, 2),  # -120.8, -110.3, -113.4
    # seeds 0-4: -118.2, -200.0, -171.2, -133.7, -165.3 (SB3 here: -106.5, -111.2, -119.2,
    # -135.5, -200.0): one seed in five never finds the flag, so five seeds to find two
    "mountaincar-dqn": (-190.0, 2, range(5)),
}


# bipedalwalker-ppo's 5M steps take 18 to 21 minutes of a free core: past the suite's 900 s limit
# per test (pyproject.toml), which stopped it there (2026-11-29).
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.timeout(3600))
                                  if name == "bipedalwalker-ppo" else name for name in sorted(BARS)])
def test_the_zoo_presets_learn(name):
    bar, needed, *seeds = BARS[name]
    returns = preset_returns_until(name, bar, needed, *seeds)
    assert sum(r >= bar for r in returns) >= needed, returns
