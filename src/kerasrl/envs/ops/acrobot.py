"""Acrobot-v1 in keras.ops: Gymnasium's `AcrobotEnv` dynamics ("book" equations, one RK4 step), batched."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from gymnasium import spaces

from kerasrl.envs.ops.base import EnvParams, OpsEnv, uniform


@dataclasses.dataclass(frozen=True, kw_only=True)
class AcrobotParams(EnvParams):
    """Gymnasium's constants; `max_steps` 500 as Acrobot-v1 is registered (no torque noise)."""

    max_steps: int | None = 500
    dt: float = 0.2
    link_length_1: float = 1.0
    link_mass_1: float = 1.0
    link_mass_2: float = 1.0
    link_com_pos_1: float = 0.5
    link_com_pos_2: float = 0.5
    link_moi: float = 1.0
    max_vel_1: float = 4 * math.pi
    max_vel_2: float = 9 * math.pi


_HIGH = np.array([1.0, 1.0, 1.0, 1.0, 4 * math.pi, 9 * math.pi], np.float32)


class Acrobot(OpsEnv):
    """Swing the tip of a two-link chain above the bar: torque -1 (0), 0 (1) or +1 (2); -1 a step, 0 at the goal.

    Observation float32 (6,): cos and sin of both joint angles, both angular velocities.
    State: `physics` float32 (num_envs, 4), the two angles and two angular velocities.
    """

    name = "Acrobot"
    default_params = AcrobotParams()
    observation_space = spaces.Box(-_HIGH, _HIGH, dtype=np.float32)
    action_space = spaces.Discrete(3)
    reference = "gymnasium.envs.classic_control.acrobot:AcrobotEnv"

    def render_attributes(self, observation, action, params):
        cos1, sin1, cos2, sin2, dtheta1, dtheta2 = observation.astype(np.float64)
        state = np.array([np.arctan2(sin1, cos1), np.arctan2(sin2, cos2), dtheta1, dtheta2])
        return {"state": state, "LINK_LENGTH_1": params.link_length_1}

    @staticmethod
    def _obs(physics):
        from keras import ops

        theta1, theta2, dtheta1, dtheta2 = ops.unstack(physics, 4, axis=1)
        return ops.stack([ops.cos(theta1), ops.sin(theta1), ops.cos(theta2), ops.sin(theta2), dtheta1, dtheta2],
                         axis=1)

    def reset_env(self, rng, params):
        rng, physics = uniform(rng, -0.1, 0.1, (4,))
        return self._obs(physics), {"physics": physics}, rng

    @staticmethod
    def _dsdt(s, torque, p):
        from keras import ops

        m1, m2, l1 = p.link_mass_1, p.link_mass_2, p.link_length_1
        lc1, lc2, i1, i2, g = p.link_com_pos_1, p.link_com_pos_2, p.link_moi, p.link_moi, 9.8
        theta1, theta2, dtheta1, dtheta2 = s
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * ops.cos(theta2)) + i1 + i2
        d2 = m2 * (lc2**2 + l1 * lc2 * ops.cos(theta2)) + i2
        phi2 = m2 * lc2 * g * ops.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (-m2 * l1 * lc2 * dtheta2**2 * ops.sin(theta2)
                - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * ops.sin(theta2)
                + (m1 * lc1 + m2 * l1) * g * ops.cos(theta1 - math.pi / 2) + phi2)
        ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * ops.sin(theta2) - phi2) / (
            m2 * lc2**2 + i2 - d2**2 / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return dtheta1, dtheta2, ddtheta1, ddtheta2

    @staticmethod
    def _wrap(x, low, high):
        from keras import ops

        # Gymnasium subtracts or adds the range while outside it: a value on the bound stays.
        wrapped = ops.mod(x - low, high - low) + low
        return ops.where((x > high) | (x < low), wrapped, x)

    def step_env(self, state, action, params):
        from keras import ops

        torque = ops.cast(action, "float32") - 1.0
        s = tuple(ops.unstack(state["physics"], 4, axis=1))
        dt = params.dt

        def shifted(k, h):
            return tuple(a + h * b for a, b in zip(s, k))

        k1 = self._dsdt(s, torque, params)
        k2 = self._dsdt(shifted(k1, dt / 2.0), torque, params)
        k3 = self._dsdt(shifted(k2, dt / 2.0), torque, params)
        k4 = self._dsdt(shifted(k3, dt), torque, params)
        new = [y + dt / 6.0 * (a + 2 * b + 2 * c + d) for y, a, b, c, d in zip(s, k1, k2, k3, k4)]
        theta1 = self._wrap(new[0], -math.pi, math.pi)
        theta2 = self._wrap(new[1], -math.pi, math.pi)
        dtheta1 = ops.clip(new[2], -params.max_vel_1, params.max_vel_1)
        dtheta2 = ops.clip(new[3], -params.max_vel_2, params.max_vel_2)
        physics = ops.stack([theta1, theta2, dtheta1, dtheta2], axis=1)
        terminated = -ops.cos(theta1) - ops.cos(theta2 + theta1) > 1.0
        reward = ops.where(terminated, 0.0, -1.0)
        return self._obs(physics), dict(state, physics=physics), reward, terminated, ops.zeros_like(terminated)
