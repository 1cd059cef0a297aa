"""The whole training loop compiled: ops envs, acting, storage and learning in one call, many seeds at once.

`CompiledDQN` (DQN, QR-DQN, C51), `CompiledSARSA` (Deep and Expected SARSA), `CompiledPPO` and
`CompiledOffPolicy` (DDPG, TD3, SAC) take an ops env
(`kerasrl.envs.ops`) and the agents' config dataclasses; see docs/ops_envs.md.
"""

from __future__ import annotations

import importlib

_LAZY = {"CompiledDQN": "dqn", "CompiledPPO": "ppo", "CompiledSARSA": "sarsa", "CompiledOffPolicy": "continuous", "greedy_returns": "dqn"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"kerasrl.compiled.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'kerasrl.compiled' has no attribute {name!r}")


__all__ = list(_LAZY)
