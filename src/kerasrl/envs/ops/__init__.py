"""Environments written in keras.ops: batched, pure, compiled with the training loop.

`CartPole`, `Acrobot`, `MountainCar`, `Pendulum` (Gymnasium's dynamics), `Snake` (the rules of
`kerasrl.envs.snake`) and `MinAtarBreakout`, `MinAtarAsterix`, `MinAtarFreeway`,
`MinAtarSpaceInvaders` (the `minatar` package's games), each with
`reset(rng, params) -> (obs, state)` and
`step(state, action, params) -> (obs, state, reward, terminated, truncated, info)` over a batch of
games; `OpsVectorEnv` / `OpsGymEnv` wrap them for Gymnasium (ids `kerasrl/OpsCartPole-v1`, ...).
Importing this package imports no backend; the env modules load on first use.
"""

from __future__ import annotations

import importlib

from kerasrl.envs.ops.base import EnvParams, OpsEnv, make_rng

_LAZY = {
    "CartPole": "cartpole", "CartPoleParams": "cartpole", "Acrobot": "acrobot", "AcrobotParams": "acrobot",
    "MountainCar": "mountain_car", "MountainCarParams": "mountain_car", "Pendulum": "pendulum",
    "PendulumParams": "pendulum", "Snake": "snake", "SnakeParams": "snake", "OpsVectorEnv": "gym",
    "OpsGymEnv": "gym", "make_ops_env": "gym", "register_ops_envs": "gym",
    "MinAtarBreakout": "minatar", "MinAtarAsterix": "minatar", "MinAtarFreeway": "minatar",
    "MinAtarSpaceInvaders": "minatar", "MinAtarParams": "minatar",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"kerasrl.envs.ops.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'kerasrl.envs.ops' has no attribute {name!r}")


__all__ = ["EnvParams", "OpsEnv", "make_rng", *_LAZY]
