"""The DQN family's CartPole presets beyond the RL Zoo's (C51, Rainbow, IQN, M-DQN): each tuned
here and measured on every backend (docs/agents.md). `kerasrl.presets` makes them `Preset`s beside
the others; this module imports nothing of kerasrl, as that one.
"""

from __future__ import annotations

from typing import Any

# cartpole-rainbow's settings, which cartpole-iqn and cartpole-mdqn share with epsilon-greedy and
# Rainbow's 3-step returns and prioritized replay (exponent 0.5) as flags.
CARTPOLE_PER_STEP = dict(learning_rate=1e-3, adam_epsilon=1e-8, adam_epsilon_style="pytorch",
                         buffer_size=20_000, learning_starts=1000, train_freq=1,
                         target_update_interval=500, hidden_sizes=(128, 128))
CARTPOLE_PER_STEP_GREEDY = dict(CARTPOLE_PER_STEP, exploration_fraction=0.1,
                                exploration_final_eps=0.01, n_step_return=3,
                                prioritized_replay=True, prioritized_replay_alpha=0.5)


def value_preset_fields() -> dict[str, dict[str, Any]]:
    """Each preset's name and `Preset` fields."""
    return {
        "cartpole-c51": dict(
            algorithm="c51", env="CartPole-v1", total_steps=50_000,
            config=dict(learning_rate=1e-3, batch_size=64, buffer_size=100_000,
                        learning_starts=1000, gamma=0.99, n_step_return=3,
                        target_update_interval=10, train_freq=256, gradient_steps=128,
                        exploration_fraction=0.16, exploration_final_eps=0.04,
                        hidden_sizes=(256, 256), n_atoms=51, v_min=0.0, v_max=100.0,
                        adam_epsilon=0.01 / 64),
            description=(
                "C51 on CartPole-v1 with cartpole-qrdqn's settings (the RL Baselines3 Zoo's for DQN and "
                "QR-DQN; the zoo has no C51) but Tianshou's C51 learning rate 1e-3 and 3-step returns, "
                "and 51 atoms on [0, 100], the returns of CartPole's +1 rewards at gamma 0.99. 500 "
                "after 50k steps on JAX seeds 0-2 (with QR-DQN's 2.3e-3 and 1-step returns: 291)."),
        ),
        "cartpole-rainbow": dict(
            algorithm="rainbow", env="CartPole-v1", total_steps=30_000,
            config=dict(CARTPOLE_PER_STEP, v_min=0.0, v_max=100.0),
            description=(
                "Rainbow on CartPole-v1: the paper's algorithm (noisy dueling C51, Double DQN, 3-step "
                "returns, prioritized replay with exponent 0.5, no epsilon) with PyTorch's Adam at 1e-3 "
                "(epsilon 1e-8), a gradient step per env step from 1,000, a target sync every 500, a "
                "128-128 network (one 128 torso layer, 128-unit noisy streams) and 51 atoms on [0, 100]: "
                "500 on seeds 0-2 on every backend (docs/agents.md, BENCHMARKS.md beside Tianshou)."),
        ),
        "cartpole-iqn": dict(
            algorithm="iqn", env="CartPole-v1", total_steps=30_000,
            config=dict(CARTPOLE_PER_STEP_GREEDY, double_q=True, n_quantiles=32,
                        n_target_quantiles=32),
            description=(
                "IQN on CartPole-v1 at cartpole-rainbow's settings (Adam 1e-3, an update per step, "
                "target sync every 500, 3-step returns, Double DQN, prioritized replay) with N = N' = K "
                "= 32 fractions and epsilon 1 -> 0.01 over 10%: 500 on seeds 0-2 (docs/agents.md)."),
        ),
        "cartpole-mdqn": dict(
            algorithm="mdqn", env="CartPole-v1", total_steps=30_000,
            config=dict(CARTPOLE_PER_STEP_GREEDY),
            description=(
                "Munchausen DQN on CartPole-v1 at cartpole-iqn's settings (Adam 1e-3, an update "
                "per step, target sync every 500, 3-step returns, prioritized replay, epsilon 1 -> "
                "0.01 over 10%) with the paper's tau 0.03, alpha 0.9, l0 -1 (docs/agents.md)."),
        ),
    }
