"""Hyperparameters: one frozen, keyword-only dataclass per algorithm.

Names follow Stable-Baselines3 where it has one. Each field carries its help text in its metadata;
the CLI's `--set name=value` and presets are made from these classes. What they share is in
`common`; each family's configs are in the module named for it: `value` (DQN, QR-DQN, C51, SARSA),
`on_policy` (PPO, A2C, TRPO, recurrent PPO), `continuous` (DDPG, TD3, SAC, TQC, CrossQ, NAF) and `cem` (CEM,
ARS). Every one is
imported from here (`from kerasrl.config import PPOConfig`).
"""

from kerasrl.config.cem import ARSConfig, CEMConfig
from kerasrl.config.common import CommonConfig, HindsightConfig, check, check_types, hp
from kerasrl.config.continuous import (
    ACTION_NOISES,
    ContinuousConfig,
    CrossQConfig,
    DDPGConfig,
    NAFConfig,
    SACConfig,
    TD3Config,
    TQCConfig,
)
from kerasrl.config.on_policy import (
    A2CConfig,
    OnPolicyConfig,
    PPOConfig,
    RecurrentPPOConfig,
    TRPOConfig,
)
from kerasrl.config.value import (C51Config, DQNConfig, IQNConfig, MDQNConfig, QConfig, QRDQNConfig, RainbowConfig,
                                  SARSAConfig)

__all__ = [
    "ACTION_NOISES", "A2CConfig", "ARSConfig", "C51Config", "CEMConfig", "CommonConfig", "ContinuousConfig",
    "CrossQConfig",
    "DDPGConfig", "DQNConfig", "HindsightConfig", "NAFConfig", "OnPolicyConfig", "PPOConfig", "QConfig",
    "IQNConfig", "MDQNConfig", "QRDQNConfig", "RainbowConfig", "RecurrentPPOConfig", "SACConfig", "SARSAConfig", "TD3Config", "TQCConfig",
    "TRPOConfig", "check",
    "check_types", "hp",
]
