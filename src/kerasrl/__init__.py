"""kerasrl: deep reinforcement learning for Keras 3, on JAX, TensorFlow or PyTorch.

    import kerasrl
    agent = kerasrl.DQN("CartPole-v1", seed=0)
    agent.fit(total_steps=50_000)
    agent.evaluate(episodes=20)

Importing kerasrl settles the Keras backend (the backend of a Keras already imported, else
KERAS_BACKEND, else the fastest installed; see kerasrl.backend) and registers its environments with
Gymnasium; Keras itself is imported on first use of an agent.
"""

from __future__ import annotations

import importlib

from kerasrl import backend as backend  # settles KERAS_BACKEND before anything imports Keras
from kerasrl import envs as envs  # registers kerasrl/Snake-v0 with Gymnasium

__version__ = "0.1.0"

# Public name -> module that defines it, imported on first access (PEP 562).
_LAZY = {
    "DQN": "kerasrl.agents.dqn",
    "Agent": "kerasrl.agents.base",
    "DQNConfig": "kerasrl.config",
    "PPO": "kerasrl.agents.ppo",
    "PPOConfig": "kerasrl.config",
    "RecurrentPPO": "kerasrl.agents.recurrent_ppo",
    "RecurrentPPOConfig": "kerasrl.config",
    "RecurrentActorCriticPolicy": "kerasrl.policies",
    "A2C": "kerasrl.agents.a2c",
    "A2CConfig": "kerasrl.config",
    "ActorCriticPolicy": "kerasrl.policies",
    "SARSA": "kerasrl.agents.sarsa",
    "ExpectedSARSA": "kerasrl.agents.sarsa",
    "SARSAConfig": "kerasrl.config",
    "TD3": "kerasrl.agents.td3",
    "TD3Config": "kerasrl.config",
    "SAC": "kerasrl.agents.sac",
    "SACConfig": "kerasrl.config",
    "DDPG": "kerasrl.agents.ddpg",
    "DDPGConfig": "kerasrl.config",
    "CEM": "kerasrl.agents.cem",
    "CEMConfig": "kerasrl.config",
    "NAF": "kerasrl.agents.naf",
    "NAFConfig": "kerasrl.config",
    "DeterministicActorPolicy": "kerasrl.policies",
    "SquashedGaussianPolicy": "kerasrl.policies",
    "History": "kerasrl.logger",
    "QPolicy": "kerasrl.policies",
    "Policy": "kerasrl.policies",
    "load_policy": "kerasrl.checkpoint",
    "check_env": "kerasrl.envs.checker",
    "EnvCheckError": "kerasrl.envs.checker",
    "networks": "kerasrl.networks",
    "fit_seeds": "kerasrl.agents.seeds",
    "WriteError": "kerasrl.runfiles",
    "RunLockedError": "kerasrl.runfiles",
}

__all__ = ["__version__", "backend", "envs", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        value = module if module.__name__.endswith(name) else getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kerasrl' has no attribute {name!r}")
