"""CartPole-v1 in keras.ops: Gymnasium's `CartPoleEnv` dynamics (Euler integration), batched."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from gymnasium import spaces

from kerasrl.envs.ops.base import EnvParams, OpsEnv, uniform


@dataclasses.dataclass(frozen=True, kw_only=True)
class CartPoleParams(EnvParams):
    """Gymnasium's constants; `max_steps` 500 as CartPole-v1 is registered."""

    max_steps: int | None = 500
    gravity: float = 9.8
    masscart: float = 1.0
    masspole: float = 0.1
    length: float = 0.5
    """Half the pole's length."""
    force_mag: float = 10.0
    tau: float = 0.02
    """Seconds per step."""
    theta_threshold: float = 12 * 2 * math.pi / 360
    x_threshold: float = 2.4


_HIGH = np.array([4.8, np.finfo(np.float32).max, 2 * 12 * 2 * math.pi / 360, np.finfo(np.float32).max], np.float32)


class CartPole(OpsEnv):
    """Push the cart left (0) or right (1) to keep the pole up; reward 1 per step, the last included.

    Observation float32 (4,): cart position, cart velocity, pole angle, pole angular velocity.
    State: `physics` float32 (num_envs, 4), the same four numbers.
    """

    name = "CartPole"
    default_params = CartPoleParams()
    observation_space = spaces.Box(-_HIGH, _HIGH, dtype=np.float32)
    action_space = spaces.Discrete(2)
    reference = "gymnasium.envs.classic_control.cartpole:CartPoleEnv"

    def render_attributes(self, observation, action, params):
        # The observation is the state; the track's width and the pole's length follow the params.
        return {"state": observation.astype(np.float64), "x_threshold": params.x_threshold,
                "length": params.length}

    def reset_env(self, rng, params):
        rng, physics = uniform(rng, -0.05, 0.05, (4,))
        return physics, {"physics": physics}, rng

    def step_env(self, state, action, params):
        from keras import ops

        x, x_dot, theta, theta_dot = ops.unstack(state["physics"], 4, axis=1)
        force = ops.where(action == 1, params.force_mag, -params.force_mag)
        total_mass = params.masspole + params.masscart
        polemass_length = params.masspole * params.length
        costheta, sintheta = ops.cos(theta), ops.sin(theta)
        temp = (force + polemass_length * ops.square(theta_dot) * sintheta) / total_mass
        thetaacc = (params.gravity * sintheta - costheta * temp) / (
            params.length * (4.0 / 3.0 - params.masspole * ops.square(costheta) / total_mass))
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        x = x + params.tau * x_dot
        x_dot = x_dot + params.tau * xacc
        theta = theta + params.tau * theta_dot
        theta_dot = theta_dot + params.tau * thetaacc
        physics = ops.stack([x, x_dot, theta, theta_dot], axis=1)
        terminated = (
            (x < -params.x_threshold) | (x > params.x_threshold)
            | (theta < -params.theta_threshold) | (theta > params.theta_threshold)
        )
        reward = ops.ones_like(x)
        return physics, dict(state, physics=physics), reward, terminated, ops.zeros_like(terminated)
