"""Tiny environments whose right answer is known: fast, exact learning checks (as SB3's IdentityEnv).

- `IdentityEnv`: observe a one-hot state, reward 1 for naming it. Optimal return = episode length.
- `ChainEnv`: walk right along a chain to a reward at the end; stepping left ends the episode with a
  small reward. Bootstrapping over several steps is needed to prefer the far reward.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class IdentityEnv(gym.Env):
    """Observation: one-hot of a random state in [0, n); reward 1 if the action equals it.

    Episodes last `episode_length` steps and are truncated (a time limit), so the optimal return
    is `episode_length` and a uniform random policy gets `episode_length / n` on average.
    """

    metadata = {"render_modes": []}

    def __init__(self, n: int = 4, episode_length: int = 20):
        self.n = n
        self.episode_length = episode_length
        self.observation_space = spaces.Box(0.0, 1.0, shape=(n,), dtype=np.float32)
        self.action_space = spaces.Discrete(n)
        self._state = 0
        self._t = 0

    def _obs(self):
        obs = np.zeros(self.n, dtype=np.float32)
        obs[self._state] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._state = int(self.np_random.integers(self.n))
        return self._obs(), {}

    def step(self, action):
        reward = 1.0 if int(action) == self._state else 0.0
        self._t += 1
        self._state = int(self.np_random.integers(self.n))
        return self._obs(), reward, False, self._t >= self.episode_length, {}


class ChainEnv(gym.Env):
    """A chain of `length` states. Action 1 moves right; at the last state it ends the episode
    with reward 1. Action 0 ends the episode at once with reward `bail_reward`.

    The optimal return is 1 (walk right; discounted, gamma**(length - 1)); the myopic policy takes
    `bail_reward`. Episodes are cut after `max_steps`.
    """

    metadata = {"render_modes": []}

    def __init__(self, length: int = 5, bail_reward: float = 0.1, max_steps: int = 50):
        self.length = length
        self.bail_reward = bail_reward
        self.max_steps = max_steps
        self.observation_space = spaces.Box(0.0, 1.0, shape=(length,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._position = 0
        self._t = 0

    def _obs(self):
        obs = np.zeros(self.length, dtype=np.float32)
        obs[self._position] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._position, self._t = 0, 0
        return self._obs(), {}

    def step(self, action):
        self._t += 1
        if int(action) == 0:
            return self._obs(), self.bail_reward, True, False, {}
        if self._position == self.length - 1:
            return self._obs(), 1.0, True, False, {}
        self._position += 1
        return self._obs(), 0.0, False, self._t >= self.max_steps, {}


class TargetEnv(gym.Env):
    """Continuous actions with a known answer: observe x uniform in [-1, 1]^dim; the best action is
    `scale * x` in a Box of [-bound, bound]^dim, and the reward is `-mean((action - scale * x)^2)`.

    A fresh x every step and episodes truncated after `episode_length` steps, so the optimal
    return is 0 and the best action does not depend on the future (any gamma works).
    """

    metadata = {"render_modes": []}

    def __init__(self, dim: int = 1, scale: float = 1.5, bound: float = 2.0,
                 episode_length: int = 10):
        self.dim, self.scale, self.episode_length = dim, float(scale), episode_length
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(dim,), dtype=np.float32)
        self.action_space = spaces.Box(-bound, bound, shape=(dim,), dtype=np.float32)
        self._x = np.zeros(dim, dtype=np.float32)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._x = self.np_random.uniform(-1.0, 1.0, self.dim).astype(np.float32)
        return self._x.copy(), {}

    def step(self, action):
        error = np.asarray(action, dtype=np.float64) - self.scale * self._x
        reward = -float(np.mean(np.square(error)))
        self._t += 1
        self._x = self.np_random.uniform(-1.0, 1.0, self.dim).astype(np.float32)
        return self._x.copy(), reward, False, self._t >= self.episode_length, {}
