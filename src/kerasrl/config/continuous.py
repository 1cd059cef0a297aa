"""The hyperparameters of the off-policy continuous-control agents: DDPG, TD3, SAC and NAF, over
what they share (`ContinuousConfig`: the replay buffer, soft target updates, action noise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kerasrl.config.common import (GRADIENT_STEPS_EXPECTED, GRADIENT_STEPS_HELP, HindsightConfig, check,
                                   hp, resolve_gradient_steps)


@dataclass(frozen=True, kw_only=True)
class ContinuousConfig(HindsightConfig):
    """What the off-policy continuous-control agents (DDPG, TD3, SAC, NAF) share; defaults are
    RL-Zoo's Pendulum-v1 settings (Stable-Baselines3's defaults where the zoo sets none)."""

    learning_rate: float = hp(1e-3, "Adam step size of the actor, the critics (and SAC's entropy coefficient).")
    gamma: float = hp(0.98, "Discount factor.")
    max_grad_norm: float | None = hp(None, "Clip the global gradient norm to this; None: no clipping (as SB3).")
    adam_epsilon: float = hp(1e-8, "Epsilon of Adam (PyTorch's default value, as SB3's; added where "
                                   "adam_epsilon_style says).")
    hidden_sizes: tuple[int, ...] = hp((400, 300), "Hidden layers of the default actor and critic MLPs.")
    buffer_size: int = hp(200_000, "Replay capacity in transitions (preallocated).")
    learning_starts: int = hp(10_000, "Env steps (over all envs) of uniform random actions before the first update.")
    batch_size: int = hp(256, "Transitions per gradient step.")
    tau: float = hp(0.005, "Polyak step of the target networks at each target update.")
    train_freq: int = hp(1, "Env steps (per env) between training rounds.")
    gradient_steps: int = hp(1, GRADIENT_STEPS_HELP)
    normalize_observations: bool = hp(False, "Normalize observations with running mean/var of the observations "
                                             "acted on (keras-rl's WhiteningNormalizerProcessor; kept in the "
                                             "policy); the replay buffer keeps raw ones.")
    clip_obs: float = hp(10.0, "With normalize_observations: clip normalized observations to +-clip_obs.")

    def __post_init__(self):
        resolve_gradient_steps(self)
        super().__post_init__()
        check(self.clip_obs > 0, "clip_obs", self.clip_obs, "positive")
        check(self.buffer_size >= 1, "buffer_size", self.buffer_size, "at least 1")
        check(self.learning_starts >= 0, "learning_starts", self.learning_starts, "non-negative")
        check(self.batch_size >= 1, "batch_size", self.batch_size, "at least 1")
        check(0.0 < self.tau <= 1.0, "tau", self.tau, "in (0, 1]")
        check(self.train_freq >= 1, "train_freq", self.train_freq, "at least 1")
        check(self.gradient_steps >= 1, "gradient_steps", self.gradient_steps, GRADIENT_STEPS_EXPECTED)


ACTION_NOISES = ("normal", "ornstein_uhlenbeck", "none")


@dataclass(frozen=True, kw_only=True)
class DDPGConfig(ContinuousConfig):
    """Deep Deterministic Policy Gradient (Lillicrap et al., 2016); RL-Zoo Pendulum-v1 settings."""

    action_noise: str = hp("normal", "Exploration noise added to the actor's action: 'normal' "
                                     "(Gaussian), 'ornstein_uhlenbeck' (keras-rl's) or 'none'.")
    action_noise_std: float = hp(0.1, "Standard deviation of the exploration noise, in units of "
                                      "half the action range.")
    ou_theta: float = hp(0.15, "Ornstein-Uhlenbeck noise: pull towards 0 per unit of time.")
    ou_dt: float = hp(1e-2, "Ornstein-Uhlenbeck noise: time step of one env step.")

    def __post_init__(self):
        super().__post_init__()
        check(self.action_noise in ACTION_NOISES, "action_noise", self.action_noise,
              " or ".join(map(repr, ACTION_NOISES)))
        check(self.action_noise_std >= 0, "action_noise_std", self.action_noise_std, "non-negative")
        check(self.ou_theta >= 0, "ou_theta", self.ou_theta, "non-negative")
        check(self.ou_dt > 0, "ou_dt", self.ou_dt, "positive")


@dataclass(frozen=True, kw_only=True)
class TD3Config(DDPGConfig):
    """Twin Delayed DDPG (Fujimoto et al., 2018); RL-Zoo Pendulum-v1 settings."""

    policy_delay: int = hp(2, "Critic updates per actor (and target) update.")
    target_policy_noise: float = hp(0.2, "Std of the Gaussian noise on the target action (smoothing).")
    target_noise_clip: float = hp(0.5, "The target action noise is clipped to +-this.")
    n_critics: int = hp(2, "Critics; the target takes their minimum (clipped double Q).")

    def __post_init__(self):
        super().__post_init__()
        check(self.policy_delay >= 1, "policy_delay", self.policy_delay, "at least 1")
        check(self.target_policy_noise >= 0, "target_policy_noise", self.target_policy_noise,
              "non-negative")
        check(self.target_noise_clip >= 0, "target_noise_clip", self.target_noise_clip,
              "non-negative")
        check(self.n_critics >= 1, "n_critics", self.n_critics, "at least 1")


@dataclass(frozen=True, kw_only=True)
class SACConfig(ContinuousConfig):
    """Soft Actor-Critic (Haarnoja et al., 2018) with automatic entropy tuning; RL-Zoo Pendulum-v1
    settings (learning_rate 1e-3, the rest Stable-Baselines3's defaults)."""

    gamma: float = hp(0.99, "Discount factor.")
    hidden_sizes: tuple[int, ...] = hp((256, 256), "Hidden layers of the default actor and critic MLPs.")
    buffer_size: int = hp(1_000_000, "Replay capacity in transitions (preallocated).")
    learning_starts: int = hp(100, "Env steps (over all envs) of uniform random actions before the first update.")
    ent_coef_init: float = hp(1.0, "Initial entropy coefficient alpha.")
    auto_entropy: bool = hp(True, "Tune alpha towards target_entropy; False keeps ent_coef_init.")
    target_entropy: float | None = hp(None, "Entropy target of the tuning; None: -action_dim.")
    target_update_interval: int = hp(1, "Gradient steps between target syncs.")
    n_critics: int = hp(2, "Critics; targets and the actor take their minimum.")

    def __post_init__(self):
        super().__post_init__()
        check(self.ent_coef_init > 0 and math.isfinite(self.ent_coef_init), "ent_coef_init",
              self.ent_coef_init, "a positive number")
        check(self.target_entropy is None or math.isfinite(self.target_entropy),
              "target_entropy", self.target_entropy, "a finite number or None")
        check(self.target_update_interval >= 1, "target_update_interval",
              self.target_update_interval, "at least 1")
        check(self.n_critics >= 1, "n_critics", self.n_critics, "at least 1")


@dataclass(frozen=True, kw_only=True)
class TQCConfig(SACConfig):
    """Truncated Quantile Critics (Kuznetsov et al., 2020): SAC with distributional critics; the
    defaults are SACConfig's (RL-Zoo Pendulum-v1) and Stable-Baselines3-contrib's TQC's."""

    n_quantiles: int = hp(25, "Quantiles of the return each critic outputs per (s, a).")
    top_quantiles_to_drop_per_net: int = hp(2, "The largest target quantiles dropped per critic "
                                               "(of n_critics * n_quantiles pooled): the control "
                                               "of overestimation.")

    def __post_init__(self):
        super().__post_init__()
        check(self.n_quantiles >= 1, "n_quantiles", self.n_quantiles, "at least 1")
        check(0 <= self.top_quantiles_to_drop_per_net < self.n_quantiles,
              "top_quantiles_to_drop_per_net", self.top_quantiles_to_drop_per_net,
              f"from 0 to n_quantiles - 1 = {self.n_quantiles - 1} (some target quantiles must stay)")


@dataclass(frozen=True, kw_only=True)
class CrossQConfig(SACConfig):
    """CrossQ (Bhatt et al., 2024): SAC without target networks, its actor and critics batch-
    renormalized, the critics run once on s and s' together; the defaults are Stable-Baselines3-
    contrib's CrossQ's (the pendulum-crossq preset has the RL Zoo's Pendulum-v1 settings)."""

    hidden_sizes: tuple[int, ...] = hp((256, 256), "Hidden layers of the default actor MLP.")
    critic_hidden_sizes: tuple[int, ...] = hp((1024, 1024), "Hidden layers of the default critic "
                                                            "MLPs (wide: the paper's finding).")
    policy_delay: int = hp(3, "Critic updates per actor (and entropy coefficient) update.")
    batch_norm: bool = hp(True, "Batch renormalization before every Dense layer of the default "
                                "actor and critics (False: plain MLPs, for ablations).")
    batch_norm_momentum: float = hp(0.01, "Step of the running statistics towards each batch's.")
    batch_norm_epsilon: float = hp(1e-3, "Added to the variances in the batch renormalization.")
    renorm_warmup_steps: int = hp(100_000, "Training-mode calls of each normalization layer that "
                                           "use the batch's statistics alone (then renormalized).")
    adam_beta1: float = hp(0.5, "Adam's first-moment decay (the CrossQ paper's and SB3-contrib's).")
    tau: float = hp(0.005, "Not used: CrossQ has no target networks (leave the default).")
    target_update_interval: int = hp(1, "Not used: CrossQ has no target networks (leave the default).")

    def __post_init__(self):
        super().__post_init__()
        for name, default in (("tau", 0.005), ("target_update_interval", 1)):
            check(getattr(self, name) == default, name, getattr(self, name),
                  f"left at {default!r}: CrossQ has no target networks (its critics' own batch-"
                  f"normalized outputs at s' make the target), so {name} would change nothing")
        check(all(size >= 1 for size in self.critic_hidden_sizes), "critic_hidden_sizes",
              self.critic_hidden_sizes, "positive layer sizes")
        check(self.policy_delay >= 1, "policy_delay", self.policy_delay, "at least 1")
        check(0.0 < self.batch_norm_momentum <= 1.0, "batch_norm_momentum",
              self.batch_norm_momentum, "in (0, 1]")
        check(self.batch_norm_epsilon > 0, "batch_norm_epsilon", self.batch_norm_epsilon, "positive")
        check(self.renorm_warmup_steps >= 0, "renorm_warmup_steps", self.renorm_warmup_steps,
              "non-negative")
        check(0.0 <= self.adam_beta1 < 1.0, "adam_beta1", self.adam_beta1, "in [0, 1)")
        check(self.batch_size >= 2 or not self.batch_norm, "batch_size", self.batch_size,
              "at least 2 with batch_norm (a batch of one has no variance to normalize by)")


@dataclass(frozen=True, kw_only=True)
class NAFConfig(DDPGConfig):
    """Normalized Advantage Functions (Gu et al., 2016); the defaults are keras-rl's
    examples/naf_pendulum.py where kerasrl has the knob (see the pendulum-naf preset)."""

    learning_rate: float = hp(1e-3, "Adam step size of mu, V and L (one optimizer, one loss).")
    gamma: float = hp(0.99, "Discount factor.")
    max_grad_norm: float | None = hp(1.0, "Clip the global gradient norm to this (keras-rl's clipnorm); None: no clipping.")
    hidden_sizes: tuple[int, ...] = hp((32, 32, 32), "Hidden layers of the default mu, V and L MLPs.")
    buffer_size: int = hp(100_000, "Replay capacity in transitions (preallocated).")
    learning_starts: int = hp(100, "Env steps (over all envs) of uniform random actions before the first update.")
    batch_size: int = hp(32, "Transitions per gradient step.")
    tau: float = hp(1e-3, "Polyak step of the target V network at each gradient step.")
    action_noise: str = hp("ornstein_uhlenbeck", "Exploration noise added to mu(s): 'normal', "
                                                 "'ornstein_uhlenbeck' (keras-rl's) or 'none'.")
    action_noise_std: float = hp(0.15, "Standard deviation of the exploration noise, in units of half the action "
                                       "range (keras-rl's sigma 0.3 on Pendulum's [-2, 2]).")
    reward_scale: float = hp(1.0, "Rewards are multiplied by this in the TD target (keras-rl's example "
                                  "divides Pendulum's by 100).")

    def __post_init__(self):
        super().__post_init__()
        check(self.reward_scale > 0 and math.isfinite(self.reward_scale), "reward_scale",
              self.reward_scale, "a positive number")

