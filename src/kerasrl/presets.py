"""Named, tested hyperparameter sets: `kerasrl train --preset NAME`.

Each preset names its algorithm, environment, step budget and config fields; anything can be
overridden with `--set name=value`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Preset:
    """A ready-made training run."""

    algorithm: str
    env: str
    total_steps: int
    config: dict[str, Any] = field(default_factory=dict)
    description: str = ""


PRESETS: dict[str, Preset] = {
    "cartpole-dqn": Preset(
        "dqn", "CartPole-v1", 50_000,
        dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
             gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
             exploration_fraction=0.16, exploration_final_eps=0.04, hidden_sizes=(256, 256)),
        "DQN on CartPole-v1 with the RL Baselines3 Zoo hyperparameters.",
    ),
}


def get_preset(name: str) -> Preset:
    """The preset called `name`, or a KeyError that lists the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"Unknown preset {name!r}. Known presets: {', '.join(sorted(PRESETS))}.") from None
