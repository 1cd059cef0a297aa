"""MountainCar-v0 in keras.ops: Gymnasium's `MountainCarEnv` dynamics, batched."""

from __future__ import annotations

import dataclasses

import numpy as np
from gymnasium import spaces

from kerasrl.envs.ops.base import EnvParams, OpsEnv, uniform


@dataclasses.dataclass(frozen=True, kw_only=True)
class MountainCarParams(EnvParams):
    """Gymnasium's constants; `max_steps` 200 as MountainCar-v0 is registered."""

    max_steps: int | None = 200
    min_position: float = -1.2
    max_position: float = 0.6
    max_speed: float = 0.07
    goal_position: float = 0.5
    goal_velocity: float = 0.0
    force: float = 0.001
    gravity: float = 0.0025


class MountainCar(OpsEnv):
    """Drive an underpowered car up the right hill: push left (0), nothing (1), right (2); -1 a step.

    Observation float32 (2,): position, velocity. State: `physics` float32 (num_envs, 2).
    """

    name = "MountainCar"
    default_params = MountainCarParams()
    observation_space = spaces.Box(np.array([-1.2, -0.07], np.float32), np.array([0.6, 0.07], np.float32),
                                   dtype=np.float32)
    action_space = spaces.Discrete(3)
    reference = "gymnasium.envs.classic_control.mountain_car:MountainCarEnv"

    def render_attributes(self, observation, action, params):
        return {"state": observation.astype(np.float64), "min_position": params.min_position,
                "max_position": params.max_position, "goal_position": params.goal_position}

    def reset_env(self, rng, params):
        from keras import ops

        rng, position = uniform(rng, -0.6, -0.4, (1,))
        physics = ops.concatenate([position, ops.zeros_like(position)], axis=1)
        return physics, {"physics": physics}, rng

    def step_env(self, state, action, params):
        from keras import ops

        position, velocity = ops.unstack(state["physics"], 2, axis=1)
        push = ops.cast(action - 1, "float32")
        velocity = velocity + push * params.force + ops.cos(3 * position) * (-params.gravity)
        velocity = ops.clip(velocity, -params.max_speed, params.max_speed)
        position = ops.clip(position + velocity, params.min_position, params.max_position)
        # The left wall is inelastic.
        velocity = ops.where((position == params.min_position) & (velocity < 0), 0.0, velocity)
        terminated = (position >= params.goal_position) & (velocity >= params.goal_velocity)
        physics = ops.stack([position, velocity], axis=1)
        reward = -ops.ones_like(position)
        return physics, dict(state, physics=physics), reward, terminated, ops.zeros_like(terminated)
