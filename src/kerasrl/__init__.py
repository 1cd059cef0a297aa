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
from kerasrl import registry

__version__ = "0.1.0"

# Public name -> module that defines it, imported on first access (PEP 562): every registered
# agent and config (kerasrl.registry.ALGORITHMS), then the rest of the public API.
_LAZY = {
    **registry.public_names(),
    "Agent": "kerasrl.agents.base",
    "RecurrentActorCriticPolicy": "kerasrl.policies",
    "ActorCriticPolicy": "kerasrl.policies",
    "DeterministicActorPolicy": "kerasrl.policies",
    "SquashedGaussianPolicy": "kerasrl.policies",
    "History": "kerasrl.logger",
    "QPolicy": "kerasrl.policies",
    "Policy": "kerasrl.policies",
    "load_policy": "kerasrl.policy_io",
    "check_env": "kerasrl.envs.checker",
    "EnvCheckError": "kerasrl.envs.checker",
    "networks": "kerasrl.networks",
    "layers": "kerasrl.layers",
    "callbacks": "kerasrl.callbacks",
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
