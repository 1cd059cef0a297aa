"""The Atari presets: RL Baselines3 Zoo's Atari hyperparameters for DQN, QR-DQN and PPO, the
Rainbow paper's for Rainbow and Dopamine's for IQN (the zoo has neither), on each game (`kerasrl.presets` makes them `Preset`s beside the others; this module imports nothing of
kerasrl, as that one).
"""

from __future__ import annotations

from typing import Any

# RL Baselines3 Zoo's `atari:` entries (hyperparams/dqn.yml, ppo.yml; the zoo's AtariWrapper +
# 4-frame stack is kerasrl/<Game>-v5), for any game; evaluation on the evaluation preprocessing.
ATARI_DQN = dict(buffer_size=100_000, learning_rate=1e-4, batch_size=32, learning_starts=100_000,
                 target_update_interval=1000, train_freq=4, gradient_steps=1,
                 exploration_fraction=0.1, exploration_initial_eps=1.0, exploration_final_eps=0.01,
                 gamma=0.99, loss="huber", max_grad_norm=10.0, n_envs=1)
# The zoo's Adam epsilon is PyTorch's, after the bias correction (docs/atari.md, "Why SB3 led").
ATARI_PPO = dict(n_envs=8, n_steps=128, n_epochs=4, batch_size=256, learning_rate=2.5e-4,
                 lr_schedule="linear", clip_range=0.1, clip_range_schedule="linear", vf_coef=0.5,
                 ent_coef=0.01, gamma=0.99, gae_lambda=0.95, max_grad_norm=0.5,
                 shared_network=True, adam_epsilon_style="pytorch")
# SB3-contrib's QRDQN defaults (they are the paper's, for Atari: 200 quantiles, lr 5e-5, Adam's
# epsilon 0.01 / 32, 1M replay, target sync every 10k steps, no gradient clipping) and the zoo's
# qrdqn.yml `atari:` entry, which sets only exploration_fraction 0.025 (and optimize_memory_usage,
# which kerasrl's frame buffer does for any stacked frames).
ATARI_QRDQN = dict(n_quantiles=200, buffer_size=1_000_000, learning_rate=5e-5, adam_epsilon=0.01 / 32,
                   batch_size=32, learning_starts=100, target_update_interval=10_000, train_freq=4,
                   gradient_steps=1, exploration_fraction=0.025, exploration_initial_eps=1.0,
                   exploration_final_eps=0.01, gamma=0.99, max_grad_norm=None, n_envs=1)
# Rainbow's (Hessel et al., 2018, Table 1), which are RainbowConfig's defaults: Adam 6.25e-5 with
# epsilon 1.5e-4, learning from 80k frames (20k steps), a target sync every 32k frames (8k steps),
# 1M replay, priority exponent 0.5 (importance 0.4 -> 1), 3-step returns, noisy streams of 512 with
# sigma_0 0.5 and no epsilon, 51 atoms on [-10, 10], one update of 32 every 4 steps.
ATARI_RAINBOW = dict(gamma=0.99, n_envs=1)
# Dopamine's implicit_quantile.gin (IQN at Rainbow's settings "for an apples-to-apples comparison"):
# N = N' = 64, K = 32, 3-step returns, Adam 6.25e-5 with epsilon 1.5e-4, learning from 20k steps,
# one update of 32 every 4 steps, a target sync every 8k steps, epsilon 1 -> 0.01 over 250k steps
# (2.5% of 10M), 1M uniform replay. The network is the paper's: the Nature CNN's convolutions, the
# fraction embedding of 64 cosines onto their 3,136 features, 512 units, one output per action.
ATARI_IQN = dict(n_quantiles=64, n_target_quantiles=64, n_acting_quantiles=32, n_cosines=64,
                 n_step_return=3, learning_rate=6.25e-5, adam_epsilon=1.5e-4, batch_size=32,
                 buffer_size=1_000_000, learning_starts=20_000, train_freq=4, gradient_steps=1,
                 target_update_interval=8_000, exploration_fraction=0.025,
                 exploration_initial_eps=1.0, exploration_final_eps=0.01, gamma=0.99,
                 max_grad_norm=None, n_envs=1)
ATARI_NOTE = ("Preprocessing and network as SB3 + the zoo (kerasrl.envs.atari: no-op starts, frame "
              "skip 4 with max-pooling, 84x84 gray, 4 frames, episodic life and clipped rewards in "
              "training; the Nature CNN). Evaluated on whole games with sticky actions (0.25). Not "
              "trained to the end here: 10M frames need a GPU or days of CPU (docs/atari.md)")


def atari_preset_fields() -> dict[str, dict[str, Any]]:
    """Each Atari preset's name and `Preset` fields: DQN, QR-DQN, Rainbow, IQN and PPO on each game, evaluated
    on the evaluation preprocessing (whole games, sticky actions)."""
    fields = {}
    for game in ("Pong", "Breakout"):
        descriptions = {
            "dqn": (ATARI_DQN,
                    f"DQN on {game} with the RL Baselines3 Zoo Atari hyperparameters (100k replay "
                    f"stored frame by frame, lr 1e-4, 100k random steps, target sync every 1000 "
                    f"steps, epsilon 1.0 -> 0.01 over the first 1M steps, one Adam step of 32 every "
                    f"4 steps, Huber loss, 10M steps). "),
            "qrdqn": (ATARI_QRDQN,
                      f"QR-DQN on {game} with the RL Baselines3 Zoo Atari hyperparameters "
                      f"(qrdqn.yml, over SB3-contrib's defaults: 200 quantiles, 1M replay stored "
                      f"frame by frame (about 7 GB), lr 5e-5 with Adam's epsilon 0.01 / 32, 100 "
                      f"random steps, target sync every 10k steps, epsilon 1.0 -> 0.01 over the "
                      f"first 2.5%, one update of 32 every 4 steps, no gradient clipping, 10M "
                      f"steps). "),
            "rainbow": (ATARI_RAINBOW,
                        f"Rainbow on {game} with the Rainbow paper's Atari hyperparameters "
                        f"(RainbowConfig's defaults: 1M replay stored frame by frame, lr 6.25e-5 "
                        f"with Adam's epsilon 1.5e-4, 20k steps before learning, target sync every "
                        f"8k steps, 3-step returns, priority exponent 0.5, noisy dueling streams "
                        f"of 512 after the Nature CNN's convolutions, no epsilon, 51 atoms on "
                        f"[-10, 10], one update of 32 every 4 steps, 10M steps). "),
            "iqn": (ATARI_IQN,
                    f"IQN on {game} with Dopamine's Atari hyperparameters (implicit_quantile.gin: "
                    f"N = N' = 64 and K = 32 fractions, 64 cosines, 3-step returns, lr 6.25e-5 "
                    f"with Adam's epsilon 1.5e-4, 1M replay stored frame by frame, 20k steps "
                    f"before learning, target sync every 8k steps, epsilon 1.0 -> 0.01 over the "
                    f"first 250k steps, one update of 32 every 4 steps, 10M steps). "),
            "ppo": (ATARI_PPO,
                    f"PPO on {game} with the RL Baselines3 Zoo Atari hyperparameters (8 envs x 128 "
                    f"steps, 4 epochs of minibatches of 256, lr 2.5e-4 and clip range 0.1 both "
                    f"decaying linearly, entropy 0.01, value 0.5, one Nature CNN shared by the "
                    f"policy and value heads as SB3's CnnPolicy, 10M steps). "),
        }
        for algorithm, (config, description) in descriptions.items():
            fields[f"{game.lower()}-{algorithm}"] = dict(
                algorithm=algorithm, env=f"kerasrl/{game}-v5", total_steps=10_000_000,
                config=config, description=description + ATARI_NOTE,
                eval_env_kwargs={"training": False})
    return fields
