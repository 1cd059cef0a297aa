"""Partially observed control tasks: the classic ones with their velocities hidden.

`kerasrl/CartPoleNoVel-v1` is CartPole-v1 observing only the cart position and the pole angle (as
SB3-contrib's and RL Baselines3 Zoo's CartPoleNoVel-v1): a policy must infer the velocities from
what it saw before, so a memoryless (MLP) policy cannot balance the pole for long and a recurrent
one can. Registered by `import kerasrl` (ids in `kerasrl.registry.ENV_IDS`).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from kerasrl import registry

CARTPOLE_NO_VELOCITY_ID = "kerasrl/CartPoleNoVel-v1"


class CartPoleNoVelocity(CartPoleEnv):
    """CartPole observing (cart position, pole angle) only: the velocities are hidden."""

    KEPT = (0, 2)  # of CartPole's (x, x_dot, theta, theta_dot)

    def __init__(self, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        high = np.array([self.x_threshold * 2, self.theta_threshold_radians * 2], dtype=np.float32)
        self.observation_space = gym.spaces.Box(-high, high, dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs[list(self.KEPT)], info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs[list(self.KEPT)], reward, terminated, truncated, info


def register_partial_envs() -> None:
    """Registers the partially observed envs with Gymnasium; safe to call twice."""
    registry.register_env_ids(__name__ + ":")
