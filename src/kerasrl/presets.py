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
    model: str | None = None
    """A builder in `kerasrl.networks.MODEL_BUILDERS` (e.g. "snake_reference"); None: the default."""
    eval_env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of `gymnasium.make(env, ...)` for evaluation (e.g. a step limit)."""


PRESETS: dict[str, Preset] = {
    "cartpole-dqn": Preset(
        "dqn", "CartPole-v1", 50_000,
        dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
             gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
             exploration_fraction=0.16, exploration_final_eps=0.04, hidden_sizes=(256, 256)),
        "DQN on CartPole-v1 with the RL Baselines3 Zoo hyperparameters.",
    ),
    "cartpole-ppo": Preset(
        "ppo", "CartPole-v1", 100_000,
        dict(n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
             ent_coef=0.0, learning_rate=1e-3, lr_schedule="linear", clip_range=0.2,
             clip_range_schedule="linear"),
        "PPO on CartPole-v1 with the RL Baselines3 Zoo hyperparameters (lin_1e-3, lin_0.2).",
    ),
    "pendulum-ppo": Preset(
        "ppo", "Pendulum-v1", 300_000,
        dict(n_envs=4, n_steps=1024, batch_size=64, gae_lambda=0.95, gamma=0.9, n_epochs=10,
             ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, normalize_observations=True,
             normalize_reward=True),
        "PPO on Pendulum-v1: the RL Baselines3 Zoo settings (normalized observations and "
        "rewards) without gSDE, so with a longer budget.",
    ),
    "pendulum-td3": Preset(
        "td3", "Pendulum-v1", 20_000, {},
        "TD3 on Pendulum-v1 with the RL Baselines3 Zoo hyperparameters (TD3Config's defaults: "
        "gamma 0.98, 10k random steps, Gaussian noise 0.1, 400-300 MLPs, lr 1e-3).",
    ),
    "pendulum-sac": Preset(
        "sac", "Pendulum-v1", 20_000, {},
        "SAC on Pendulum-v1 with the RL Baselines3 Zoo hyperparameters (SACConfig's defaults: "
        "lr 1e-3, automatic entropy tuning, 256-256 MLPs).",
    ),
    "pendulum-ddpg": Preset(
        "ddpg", "Pendulum-v1", 50_000, {},
        "DDPG on Pendulum-v1 with the RL Baselines3 Zoo hyperparameters (DDPGConfig's defaults: "
        "gamma 0.98, 10k random steps, Gaussian noise 0.1, 400-300 MLPs, lr 1e-3).",
    ),
    "snake-dqn": Preset(
        "dqn", "kerasrl/Snake-v0", 1_000_000,
        dict(buffer_size=10_000, learning_starts=10_000, batch_size=64, learning_rate=1e-3,
             gamma=0.99, loss="mse", max_grad_norm=None, double_q=False,
             target_update_interval=1000, tau=1.0, train_freq=1, gradient_steps=1,
             exploration_initial_eps=0.5, exploration_final_eps=0.01,
             exploration_fraction=0.1, n_envs=1, random_warmup=False),
        "The tfjs snake-dqn reference agent on 9x9 Snake (docs/snake.md): its network, one Adam "
        "step per frame, MSE, hard target sync every 1000 frames, epsilon 0.5 -> 0.01 over the "
        "first 100k of 1M frames; stop at a 100-episode mean return of 100 with --stop-at-return "
        "100. Quirks fixed: the target starts equal to the online network; the 100-episode mean "
        "averages only episodes that exist. Kept: the 10k prefill frames are epsilon-greedy "
        "from the untrained network (random_warmup=False). Slow on CPU (about 9 frames/s on 2 cores)",
        model="snake_reference",
        eval_env_kwargs={"max_steps_without_fruit": 100},
    ),
    "snake-dqn-fast": Preset(
        "dqn", "kerasrl/Snake-v0", 2_000_000,
        dict(buffer_size=100_000, learning_starts=10_000, batch_size=64, learning_rate=1e-3,
             gamma=0.99, loss="huber", max_grad_norm=10.0, double_q=True,
             target_update_interval=2000, tau=1.0, train_freq=1, gradient_steps=1,
             exploration_initial_eps=1.0, exploration_final_eps=0.01,
             exploration_fraction=0.05, n_envs=16),
        "Snake on 16 native vector games with a small CNN (snake_small: ~18x fewer multiply-adds "
        "per frame than the reference network, no batch norm or dropout), Double DQN, Huber loss, "
        "one Adam step per 16 frames, a 100k buffer, epsilon 1.0 -> 0.01 over 100k frames; same "
        "game and rewards as snake-dqn. About 2,000 to 4,000 frames/s on 2 CPU cores (snake-dqn: "
        "about 9); seed 0 reached a 100-episode mean return of 100 at 736k frames (7.5 min)",
        model="snake_small",
        eval_env_kwargs={"max_steps_without_fruit": 100},
    ),
}


def get_preset(name: str) -> Preset:
    """The preset called `name`, or read from the preset file `name` (a path ending in .json, as
    `kerasrl tune` writes), or a KeyError that lists the known ones."""
    if name not in PRESETS and name.endswith(".json"):
        return load_preset_file(name)
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"Unknown preset {name!r}. Known presets: {', '.join(sorted(PRESETS))}; "
                       f"or pass a preset file (.json).") from None


def load_preset_file(path) -> Preset:
    """A Preset from a JSON file holding its fields ({"algorithm", "env", "total_steps", "config",
    ...}), as `kerasrl tune` writes its best trial."""
    import json
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"No such preset file: {path}")
    try:
        fields = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"Preset file {path} is not valid JSON: {error}") from None
    known = set(Preset.__dataclass_fields__)
    unknown = sorted(set(fields) - known) if isinstance(fields, dict) else []
    missing = sorted({"algorithm", "env", "total_steps"} - set(fields)) if isinstance(fields, dict) \
        else ["algorithm", "env", "total_steps"]
    if unknown or missing:
        raise ValueError(f"Preset file {path}: " + "; ".join(
            ([f"unknown keys {', '.join(unknown)}"] if unknown else [])
            + ([f"missing keys {', '.join(missing)}"] if missing else []))
            + f". A preset file holds {', '.join(sorted(known))}.")
    config = {k: tuple(v) if isinstance(v, list) else v for k, v in dict(fields.get("config") or {}).items()}
    return Preset(**{**fields, "config": config})
