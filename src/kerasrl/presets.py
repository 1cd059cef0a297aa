"""Named, tested hyperparameter sets: `kerasrl train --preset NAME`.

Each preset names its algorithm, environment, step budget and config fields; anything can be
overridden with `--set name=value`. Like `kerasrl.registry`, this module imports no agent: a
preset names its algorithm, which the registry resolves when it is trained.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kerasrl import rl_zoo
from kerasrl.presets_atari import ATARI_DQN, ATARI_PPO, ATARI_QRDQN, atari_preset_fields
from kerasrl.presets_value import value_preset_fields
from kerasrl.registry import SNAKE_TIME_LIMIT_ID

__all__ = ["ATARI_DQN", "ATARI_PPO", "ATARI_QRDQN", "PRESETS", "Preset", "get_preset",
           "load_preset_file", "preset_from_rl_zoo"]


# -- presets: named, tested hyperparameter sets (`kerasrl train --preset NAME`) ------------------
# snake-dqn-fast's DQN settings, which snake-dqn-compiled shares but for two.
SNAKE_DQN_FAST = dict(buffer_size=100_000, learning_starts=10_000, batch_size=64, learning_rate=1e-3,
                      gamma=0.99, loss="huber", max_grad_norm=10.0, double_q=True,
                      target_update_interval=2000, tau=1.0, train_freq=1, gradient_steps=1,
                      exploration_initial_eps=1.0, exploration_final_eps=0.01,
                      exploration_fraction=0.05, n_envs=16)


# dqn.yml's settings for Acrobot-v1 and LunarLander-v3, the same for both (QR-DQN's qrdqn.yml for
# Acrobot adds its quantiles); the zoo's gradient_steps -1 is one gradient step per env step.
ZOO_DQN_ACROBOT_LUNARLANDER = dict(
    learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0, gamma=0.99,
    target_update_interval=250, train_freq=4, gradient_steps=4, exploration_fraction=0.12,
    exploration_final_eps=0.1, hidden_sizes=(256, 256))

# ppo.yml's settings for LunarLander-v3, which it gives LunarLanderContinuous-v3 too.
ZOO_PPO_LUNARLANDER = dict(n_envs=16, n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999,
                           n_epochs=4, ent_coef=0.01)


@dataclass(frozen=True)
class Preset:
    """A ready-made training run."""

    algorithm: str
    env: str
    total_steps: int
    config: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    model: str | None = None
    """A builder in `MODEL_BUILDERS` (e.g. "snake_reference"); None: the default."""
    eval_env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of `gymnasium.make(env, ...)` for evaluation (e.g. a step limit)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of `gymnasium.make(env, ...)` for training and evaluation (the env's own
    settings: `is_slippery=False`), as `kerasrl train --env-kwarg` gives them."""

    def make_agent(self, **overrides):
        """The preset's agent, as `kerasrl train --preset` makes it: its algorithm on its env (with
        its env keywords), its model, its config with `overrides` over it (`seed=0`,
        `n_envs=4`, `device="cpu"`, `model=` a Keras model of yours, any config field). Train it
        with `agent.fit(preset.total_steps)`."""
        from kerasrl import registry
        from kerasrl.envs.vector import env_with_kwargs

        if "model" not in overrides and self.model is not None:
            from kerasrl.networks import model_builder

            overrides = {**overrides, "model": model_builder(self.model)}
        return registry.agent_class(self.algorithm)(env_with_kwargs(self.env, self.env_kwargs),
                                                    **{**self.config, **overrides})


PRESETS: dict[str, Preset] = {
    "cartpole-dqn": Preset(
        "dqn", "CartPole-v1", 50_000,
        dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
             gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
             exploration_fraction=0.16, exploration_final_eps=0.04, hidden_sizes=(256, 256)),
        "DQN on CartPole-v1 with the RL Baselines3 Zoo hyperparameters.",
    ),
    "cartpole-qrdqn": Preset(
        "qrdqn", "CartPole-v1", 50_000,
        dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
             gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
             exploration_fraction=0.16, exploration_final_eps=0.04, hidden_sizes=(256, 256),
             n_quantiles=10, adam_epsilon=0.01 / 64),
        "QR-DQN on CartPole-v1 with the RL Baselines3 Zoo hyperparameters (qrdqn.yml: 10 "
        "quantiles, 256-256 MLP; Adam's epsilon 0.01 / batch size as SB3-contrib sets it).",
    ),
    "acrobot-qrdqn": Preset(
        "qrdqn", "Acrobot-v1", 100_000,
        dict(ZOO_DQN_ACROBOT_LUNARLANDER, n_quantiles=25, adam_epsilon=0.01 / 128),
        "QR-DQN on Acrobot-v1 with the RL Baselines3 Zoo hyperparameters (qrdqn.yml: 25 "
        "quantiles, 256-256 MLP, gradient_steps -1 = 4 per round of 4 steps).",
    ),
    "acrobot-dqn": Preset(
        "dqn", "Acrobot-v1", 100_000, dict(ZOO_DQN_ACROBOT_LUNARLANDER),
        "DQN on Acrobot-v1 with the RL Baselines3 Zoo hyperparameters (dqn.yml: 256-256 MLP, "
        "gradient_steps -1 = 4 per round of 4 steps).",
    ),
    "lunarlander-dqn": Preset(
        "dqn", "LunarLander-v3", 100_000, dict(ZOO_DQN_ACROBOT_LUNARLANDER),
        "DQN on LunarLander-v3 (pip install 'kerasrl[box2d]') with the RL Baselines3 Zoo "
        "hyperparameters (dqn.yml, the same as Acrobot's: 256-256 MLP, 4 gradient steps per "
        "round of 4 steps, 100k steps).",
    ),
    "mountaincar-dqn": Preset(
        "dqn", "MountainCar-v0", 120_000,
        dict(learning_rate=4e-3, batch_size=128, buffer_size=10_000, learning_starts=1000,
             gamma=0.98, target_update_interval=600, train_freq=16, gradient_steps=8,
             exploration_fraction=0.2, exploration_final_eps=0.07, hidden_sizes=(256, 256)),
        "DQN on MountainCar-v0 with the RL Baselines3 Zoo hyperparameters (dqn.yml: lr 4e-3, "
        "8 gradient steps every 16 env steps, 256-256 MLP, 120k steps). Reaches the flag on most "
        "seeds, as SB3 with these settings does (docs/presets.md); mountaincar-ppo on every one.",
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
    "acrobot-ppo": Preset(
        "ppo", "Acrobot-v1", 1_000_000,
        dict(n_envs=16, n_steps=256, gae_lambda=0.94, gamma=0.99, n_epochs=4, ent_coef=0.0,
             normalize_observations=True, normalize_reward=True),
        "PPO on Acrobot-v1 with the RL Baselines3 Zoo hyperparameters (ppo.yml: 16 envs, "
        "256-step rollouts, normalized observations and rewards, 1M steps).",
    ),
    "lunarlander-ppo": Preset(
        "ppo", "LunarLander-v3", 1_000_000, dict(ZOO_PPO_LUNARLANDER),
        "PPO on LunarLander-v3 (pip install 'kerasrl[box2d]') with the RL Baselines3 Zoo "
        "hyperparameters (ppo.yml: 16 envs, 1024-step rollouts, gamma 0.999, entropy 0.01, "
        "1M steps).",
    ),
    "lunarlander-continuous-ppo": Preset(
        "ppo", "LunarLanderContinuous-v3", 1_000_000, dict(ZOO_PPO_LUNARLANDER),
        "PPO on LunarLanderContinuous-v3 (pip install 'kerasrl[box2d]') with the RL Baselines3 "
        "Zoo hyperparameters (ppo.yml: those of LunarLander-v3).",
    ),
    "mountaincar-ppo": Preset(
        "ppo", "MountainCar-v0", 1_000_000,
        dict(n_envs=16, n_steps=16, gae_lambda=0.98, gamma=0.99, n_epochs=4, ent_coef=0.0,
             normalize_observations=True, normalize_reward=True),
        "PPO on MountainCar-v0 with the RL Baselines3 Zoo hyperparameters (ppo.yml: 16 envs, "
        "16-step rollouts, normalized observations and rewards, 1M steps).",
    ),
    "bipedalwalker-ppo": Preset(
        "ppo", "BipedalWalker-v3", 5_000_000,
        dict(n_envs=32, n_steps=2048, batch_size=64, gae_lambda=0.95, gamma=0.999, n_epochs=10,
             ent_coef=0.0, learning_rate=3e-4, clip_range=0.18, normalize_observations=True,
             normalize_reward=True),
        "PPO on BipedalWalker-v3 (pip install 'kerasrl[box2d]') with the RL Baselines3 Zoo "
        "hyperparameters (ppo.yml: 32 envs, 2048-step rollouts, 10 epochs, clip 0.18, "
        "normalized observations and rewards, 5M steps).",
    ),
    "cartpole-novel-recurrent-ppo": Preset(
        "recurrent_ppo", "kerasrl/CartPoleNoVel-v1", 100_000,
        dict(n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
             ent_coef=0.0, learning_rate=1e-3, lr_schedule="linear", clip_range=0.2,
             clip_range_schedule="linear", normalize_observations=True, normalize_reward=True,
             recurrent_units=64, hidden_sizes=(64,), activation="relu", ortho_init=False),
        "Recurrent PPO on CartPole with the velocities hidden, with RL Baselines3 Zoo's ppo_lstm "
        "CartPoleNoVel-v1 settings: lin_1e-3, lin_0.2, normalized observations and rewards, an "
        "LSTM of 64 units for the policy and one for the value, each then 64 ReLU units "
        "(ortho_init off). After 100k steps, 20 deterministic episodes: JAX 500.0 and 480.2 "
        "(seeds 0, 1), TensorFlow 500.0, PyTorch 500.0 (seed 0).",
    ),
    "cartpole-a2c": Preset(
        "a2c", "CartPole-v1", 500_000, dict(n_envs=8, ent_coef=0.0),
        "A2C on CartPole-v1 with the RL Baselines3 Zoo hyperparameters (8 envs, 500k steps; the "
        "rest A2CConfig's defaults, Stable-Baselines3's: 5-step rollouts, RMSprop at 7e-4).",
    ),
    "cartpole-trpo": Preset(
        "trpo", "CartPole-v1", 100_000,
        dict(n_envs=2, n_steps=512, batch_size=512, cg_damping=1e-3, gae_lambda=0.98, gamma=0.99,
             learning_rate=1e-3, n_critic_updates=20),
        "TRPO on CartPole-v1 with the RL Baselines3 Zoo hyperparameters (trpo.yml: 2 envs of "
        "512-step rollouts, damping 1e-3, 20 critic passes, 100k steps; the rest SB3-contrib's "
        "defaults). 20 greedy episodes after the run, JAX, seeds 0-2: 500.0 each (SB3-contrib "
        "here: 500.0, 434.9, 500.0).",
    ),
    "acrobot-trpo": Preset(
        "trpo", "Acrobot-v1", 100_000,
        dict(n_envs=2, n_steps=1024, normalize_observations=True, normalize_reward=True),
        "TRPO on Acrobot-v1 with the RL Baselines3 Zoo hyperparameters (trpo.yml: 2 envs of "
        "1024-step rollouts, normalized observations and rewards, 100k steps; the rest "
        "SB3-contrib's defaults). 20 greedy episodes after the run, JAX, seeds 0-2: -80.9, -82.7, "
        "-86.7 (SB3-contrib here: -81.3, -79.2, -80.2; the zoo publishes -83.1).",
    ),
    "lunarlander-continuous-trpo": Preset(
        "trpo", "LunarLanderContinuous-v3", 100_000,
        dict(n_envs=2, n_steps=1024, n_critic_updates=20, normalize_observations=True,
             normalize_reward=True),
        "TRPO on LunarLanderContinuous-v3 (pip install 'kerasrl[box2d]') with the RL Baselines3 "
        "Zoo hyperparameters (trpo.yml: 2 envs of 1024-step rollouts, 20 critic passes, "
        "normalized observations and rewards, 100k steps; the Gaussian's KL averaged over the "
        "action dimensions, as SB3-contrib). 20 greedy episodes after the run, JAX, seeds 0-2: "
        "251.9, 150.4, 236.8 (SB3-contrib here: 215.4, 207.8, 231.8).",
    ),
    "acrobot-a2c": Preset(
        "a2c", "Acrobot-v1", 500_000,
        dict(n_envs=16, ent_coef=0.0, normalize_observations=True, normalize_reward=True),
        "A2C on Acrobot-v1 with the RL Baselines3 Zoo hyperparameters (a2c.yml: 16 envs, "
        "normalized observations and rewards, 500k steps; the rest SB3's defaults).",
    ),
    "lunarlander-a2c": Preset(
        "a2c", "LunarLander-v3", 200_000,
        dict(n_envs=8, gamma=0.995, n_steps=5, learning_rate=8.3e-4, lr_schedule="linear",
             ent_coef=1e-5),
        "A2C on LunarLander-v3 (pip install 'kerasrl[box2d]') with the RL Baselines3 Zoo "
        "hyperparameters (a2c.yml: 8 envs, gamma 0.995, lin_0.00083, 200k steps).",
    ),
    "pendulum-a2c": Preset(
        "a2c", "Pendulum-v1", 1_000_000,
        dict(n_envs=8, n_steps=8, gae_lambda=0.9, vf_coef=0.4, gamma=0.99, ent_coef=0.0,
             max_grad_norm=0.5, normalize_advantage=False, learning_rate=7e-4,
             lr_schedule="linear", optimizer="rmsprop", normalize_observations=True,
             normalize_reward=True, log_std_init=-2.0, ortho_init=False),
        "A2C on Pendulum-v1 with the RL Baselines3 Zoo hyperparameters (lin_7e-4, RMSprop, "
        "normalized observations and rewards, log std -2) but without gSDE (use_sde: kerasrl has "
        "no state-dependent exploration), which the zoo's settings were tuned with.",
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
    "pendulum-tqc": Preset(
        "tqc", "Pendulum-v1", 20_000, {},
        "TQC on Pendulum-v1 with the RL Baselines3 Zoo hyperparameters (tqc.yml; TQCConfig's "
        "defaults: lr 1e-3, automatic entropy tuning, 256-256 MLPs, 2 critics of 25 quantiles, "
        "2 dropped per critic).",
    ),
    "pendulum-crossq": Preset(
        "crossq", "Pendulum-v1", 20_000, dict(policy_delay=2, critic_hidden_sizes=(256, 256)),
        "CrossQ on Pendulum-v1 with the RL Baselines3 Zoo hyperparameters (crossq.yml: policy "
        "delay 2, 256-256 actor and critics, batch renormalization, no target networks; the rest "
        "CrossQConfig's defaults, SB3-contrib's: lr 1e-3, Adam beta_1 0.5, 100 random steps).",
    ),
    "lunarlander-continuous-crossq": Preset(
        "crossq", "LunarLanderContinuous-v3", 200_000, dict(learning_starts=10_000),
        "CrossQ on LunarLanderContinuous-v3 with the RL Baselines3 Zoo hyperparameters "
        "(crossq.yml: 10k random steps, 1M buffer, 256-256 actor, 1024-1024 critics, policy "
        "delay 3, 200k steps).",
    ),
    "pendulum-ddpg": Preset(
        "ddpg", "Pendulum-v1", 50_000, {},
        "DDPG on Pendulum-v1 with the RL Baselines3 Zoo hyperparameters (DDPGConfig's defaults: "
        "gamma 0.98, 10k random steps, Gaussian noise 0.1, 400-300 MLPs, lr 1e-3).",
    ),
    "pendulum-naf": Preset(
        "naf", "Pendulum-v1", 50_000, dict(reward_scale=0.01),
        "NAF on Pendulum-v1 with keras-rl's examples/naf_pendulum.py settings (NAFConfig's "
        "defaults: gamma 0.99, tau 1e-3, Adam lr 1e-3 with the gradient norm clipped to 1, "
        "Ornstein-Uhlenbeck noise theta 0.15 and sigma 0.3 in Pendulum's units, batches of 32, "
        "100 warm-up steps, 50k steps), with 32-32-32 MLPs for mu, V and L (keras-rl: 16-16-16 "
        "for mu and V, 32-32-32 for L) and rewards scaled by 1/100 as its PendulumProcessor.",
    ),
    "halfcheetah-sac": Preset(
        "sac", "HalfCheetah-v5", 1_000_000,
        dict(learning_rate=3e-4, learning_starts=10_000, buffer_size=1_000_000, batch_size=256,
             tau=0.005, gamma=0.99, train_freq=1, gradient_steps=1, hidden_sizes=(256, 256)),
        "SAC on HalfCheetah-v5 (gymnasium[mujoco]) with the RL Baselines3 Zoo hyperparameters "
        "(10k random steps, lr 3e-4, 256-256 MLPs, one gradient step per env step, 1M steps). "
        "Checked on the real task for a few updates (tests/test_cli_continuous.py); not trained to the "
        "end on this machine.",
    ),
    "mountaincar-td3": Preset(
        "td3", "MountainCarContinuous-v0", 50_000,
        dict(action_noise="ornstein_uhlenbeck", action_noise_std=1.0, ou_theta=1.0,
             learning_starts=100, gamma=0.99, hidden_sizes=(64, 64), train_freq=4,
             gradient_steps=4),
        "TD3 on MountainCarContinuous-v0: the RL Baselines3 Zoo settings (Ornstein-Uhlenbeck "
        "noise, lr 1e-3, gamma 0.99, 100 random steps) with stronger, faster-reverting noise (std "
        "1.0, theta 1.0: the noise alone reaches the flag in about half the episodes, the zoo's "
        "0.5 / 0.15 in one of ten), 64-64 MLPs and 4 gradient steps every 4 env steps, for 50k "
        "steps instead of 300k. Solved it (mean return >= 90) on seeds 0, 1 and 2 in about 2 "
        "minutes each on one CPU core with JAX (docs/continuous.md)",
    ),
    "cartpole-ars": Preset(
        "ars", "CartPole-v1", 50_000, dict(n_envs=1, n_delta=2),
        "ARS on CartPole-v1 with the RL Baselines3 Zoo hyperparameters (ars.yml: a linear policy "
        "from zero weights, 2 directions a step, delta_std 0.05, learning rate 0.02, one env, "
        "50k steps).",
    ),
    "cartpole-cem": Preset(
        "cem", "CartPole-v1", 100_000,
        dict(batch_size=50, elite_frac=0.2, hidden_sizes=(), n_envs=10, policy_weights="mean"),
        "The cross-entropy method on CartPole-v1 with keras-rl's examples/cem_cartpole.py settings "
        "(a linear policy, 50 candidates per iteration, 100k steps) adapted: CartPole-v1 (500 "
        "steps) for v0, the elite 20% for 5% (keras-rl's 2 of 50 collapsed below 500 on 2 of 4 "
        "seeds), each iteration refitted to its own candidates (keras-rl sampled them from a "
        "1,000-episode memory), argmax actions while searching and the Gaussian's mean as the "
        "policy (keras-rl: softmax draws, the best candidate), 10 candidates at once in 10 envs. "
        "Reached 500 over 20 episodes on seeds 0-5 in 100k steps, about 20 s each on one CPU core "
        "with JAX (docs/agents.md)",
    ),
    "bitflipping-dqn-her": Preset(
        "dqn", "kerasrl/BitFlipping-v0", 5_000,
        dict(hindsight_goals=4, hindsight_strategy="future", learning_starts=500, train_freq=1,
             batch_size=128, learning_rate=1e-3, gamma=0.95, exploration_fraction=0.1,
             exploration_final_eps=0.05, target_update_interval=250, hidden_sizes=(128, 128)),
        "DQN with hindsight experience replay on 10-bit flipping (the HER paper's first task: 4 "
        "goals replayed per transition, 'future' strategy). Evaluated at -4.27 to -4.47 after "
        "2,000 steps on JAX seeds 0-7, about 6 s each on one CPU core (a perfect policy: -4.0); "
        "without hindsight (--set hindsight_goals=0), -10.0: no goal is ever reached "
        "(docs/hindsight.md)",
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
        "dqn", "kerasrl/Snake-v0", 2_000_000, SNAKE_DQN_FAST,
        "Snake on 16 native vector games with a small CNN (snake_small: ~18x fewer multiply-adds "
        "per frame than the reference network, no batch norm or dropout), Double DQN, Huber loss, "
        "one Adam step per 16 frames, a 100k buffer, epsilon 1.0 -> 0.01 over 100k frames; same "
        "game and rewards as snake-dqn. About 2,000 to 4,000 frames/s on 2 CPU cores (snake-dqn: "
        "about 9); seed 0 reached a 100-episode mean return of 100 at 736k frames (7.5 min)",
        model="snake_small",
        eval_env_kwargs={"max_steps_without_fruit": 100},
    ),
    "snake-dqn-compiled": Preset(
        "dqn", SNAKE_TIME_LIMIT_ID, 500_000,
        dict(SNAKE_DQN_FAST, learning_starts=2_000, n_envs=32),
        "Snake with the whole loop compiled: the keras.ops Snake (same rules and rewards; 100 steps "
        "without fruit truncate an episode, as in evaluation), 32 games, the snake_egocentric "
        "network (the board centred on the head and turned to its heading, then Dense(128)), "
        "Double DQN, Huber loss, one Adam step of 64 per 32 frames, epsilon 1.0 -> 0.01 over the "
        "first 25k frames. Reached a 100-episode mean return of 100 in 115k-150k frames, 16-19 s "
        "of fit on one core with JAX (seeds 0-2; benchmarks/results/snake_compiled.md)",
        model="snake_egocentric",
        eval_env_kwargs={"max_steps_without_fruit": 100},
    ),
}


# The Atari presets (RL Zoo's Atari settings, for each game), in their own module.
PRESETS.update({name: Preset(**fields) for name, fields in value_preset_fields().items()})
PRESETS.update({name: Preset(**fields) for name, fields in atari_preset_fields().items()})



def get_preset(name: str) -> Preset:
    """The preset called `name`, or read from the preset file `name` (a path ending in .json, as
    `kerasrl tune` writes), or an RL Baselines3 Zoo entry `FILE.yml:ENV` (kerasrl.rl_zoo), or a
    KeyError that lists the known ones."""
    if name not in PRESETS and name.endswith(".json"):
        return load_preset_file(name)
    if name not in PRESETS and (".yml:" in name or ".yaml:" in name):
        return preset_from_rl_zoo(*rl_zoo.read_entry(name))
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"Unknown preset {name!r}. Known presets: {', '.join(sorted(PRESETS))}; "
                       f"or pass a preset file (.json), or an RL Zoo entry (hyperparams/ppo.yml:ENV).") from None


def preset_from_rl_zoo(algorithm: str, env: str, entry: dict[str, Any]) -> Preset:
    """The preset an RL Baselines3 Zoo entry describes: `algorithm` as the zoo names it (its
    file's name: "ppo", "ppo_lstm"), `entry` one env's settings as `yaml.safe_load` gives them
    (kerasrl.rl_zoo says what is translated and what is refused)."""
    return Preset(**rl_zoo.preset_fields(algorithm, env, entry))


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
