"""Pendulum-v1 in keras.ops: Gymnasium's `PendulumEnv` dynamics, batched."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from gymnasium import spaces

from kerasrl.envs.ops.base import EnvParams, OpsEnv, uniform


@dataclasses.dataclass(frozen=True, kw_only=True)
class PendulumParams(EnvParams):
    """Gymnasium's constants; `max_steps` 200 as Pendulum-v1 is registered."""

    max_steps: int | None = 200
    max_speed: float = 8.0
    max_torque: float = 2.0
    dt: float = 0.05
    g: float = 10.0
    m: float = 1.0
    l: float = 1.0  # noqa: E741 -- Gymnasium's name


class Pendulum(OpsEnv):
    """Swing the pendulum up and hold it: torque in [-2, 2], cost angle^2 + 0.1 speed^2 + 0.001 torque^2.

    Observation float32 (3,): cos angle, sin angle, angular velocity. Action float32 (1,).
    State: `physics` float32 (num_envs, 2), angle and angular velocity. Never terminates.
    """

    name = "Pendulum"
    default_params = PendulumParams()
    observation_space = spaces.Box(-np.array([1.0, 1.0, 8.0], np.float32), np.array([1.0, 1.0, 8.0], np.float32),
                                   dtype=np.float32)
    action_space = spaces.Box(-2.0, 2.0, (1,), np.float32)
    reference = "gymnasium.envs.classic_control.pendulum:PendulumEnv"

    def render_attributes(self, observation, action, params):
        cos, sin, theta_dot = observation.astype(np.float64)
        # The reference draws the last torque as an arrow (none after a reset), clipped as applied.
        torque = None if action is None else float(np.clip(np.reshape(action, -1)[0], -params.max_torque,
                                                                   params.max_torque))
        return {"state": np.array([np.arctan2(sin, cos), theta_dot]), "last_u": torque}

    @staticmethod
    def _obs(physics):
        from keras import ops

        theta, theta_dot = ops.unstack(physics, 2, axis=1)
        return ops.stack([ops.cos(theta), ops.sin(theta), theta_dot], axis=1)

    def reset_env(self, rng, params):
        from keras import ops

        rng, u = uniform(rng, -1.0, 1.0, (2,))
        physics = u * ops.convert_to_tensor(np.array([math.pi, 1.0], np.float32))
        return self._obs(physics), {"physics": physics}, rng

    def step_env(self, state, action, params):
        from keras import ops

        theta, theta_dot = ops.unstack(state["physics"], 2, axis=1)
        u = ops.clip(ops.reshape(ops.cast(action, "float32"), (-1,)), -params.max_torque, params.max_torque)
        normalized = ops.mod(theta + math.pi, 2 * math.pi) - math.pi
        costs = ops.square(normalized) + 0.1 * ops.square(theta_dot) + 0.001 * ops.square(u)
        g, m, length, dt = params.g, params.m, params.l, params.dt
        theta_dot = theta_dot + (3 * g / (2 * length) * ops.sin(theta) + 3.0 / (m * length**2) * u) * dt
        theta_dot = ops.clip(theta_dot, -params.max_speed, params.max_speed)
        theta = theta + theta_dot * dt
        physics = ops.stack([theta, theta_dot], axis=1)
        terminated = ops.zeros_like(theta, dtype="bool")
        return self._obs(physics), dict(state, physics=physics), -costs, terminated, terminated
