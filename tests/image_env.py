"""A tiny image environment for tests of the default CNN: which quadrant of the picture is lit.

Observations are (12, 12, 3) uint8 images (channels last), black except one lit quadrant; the
action that names the quadrant earns 1. `dtype=np.float32` gives the same picture in [0, 1].
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

SIZE = 12


class QuadrantEnv(gym.Env):
    def __init__(self, dtype=np.uint8, episode_length: int = 10):
        high = 255 if dtype == np.uint8 else 1.0
        self.observation_space = gym.spaces.Box(0, high, (SIZE, SIZE, 3), dtype)
        self.action_space = gym.spaces.Discrete(4)
        self.episode_length = episode_length
        self._high = high
        self._state, self._t = 0, 0

    def _obs(self):
        obs = np.zeros((SIZE, SIZE, 3), self.observation_space.dtype)
        h = SIZE // 2
        row, column = divmod(self._state, 2)
        obs[row * h:(row + 1) * h, column * h:(column + 1) * h, :] = self._high
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._state = int(self.np_random.integers(4))
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == self._state)
        self._t += 1
        self._state = int(self.np_random.integers(4))
        return self._obs(), reward, False, self._t >= self.episode_length, {}
