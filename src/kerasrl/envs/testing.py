"""Tiny environments whose right answer is known: fast, exact learning checks (as SB3's IdentityEnv).

- `IdentityEnv`: observe a one-hot state, reward 1 for naming it. Optimal return = episode length.
- `ChainEnv`: walk right along a chain to a reward at the end; stepping left ends the episode with a
  small reward. Bootstrapping over several steps is needed to prefer the far reward.
- `MaskedChoiceEnv`: a random set of actions is allowed each step (`info["action_mask"]`); the
  higher an allowed action, the more it pays, and a forbidden one ends the episode with a penalty.
  With the mask the answer is "the highest allowed action"; without it the agent cannot know.
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


class MaskedChoiceEnv(gym.Env):
    """Action masks with a known answer. Each step a random non-empty set of the `n` actions is
    allowed, given as `info["action_mask"]` (int8, 1 = allowed) and also as the observation.

    An allowed action `a` pays `(a + 1) / n`; a forbidden one pays -1 and ends the episode
    (terminated). Episodes are truncated after `episode_length` steps. The next state does not
    depend on the action, so the optimal policy is the highest allowed action, at any gamma: a
    masked agent learns it in a few hundred steps; an unmasked one must first learn from the
    observation which actions are allowed.

    `mask_via="method"` reports the mask through an `action_masks()` method instead of the info
    (sb3-contrib's convention); `mask_shape` and `empty_mask_at` (a step of the episode from
    which the mask allows nothing) make broken masks for tests.
    """

    metadata = {"render_modes": []}

    def __init__(self, n: int = 4, episode_length: int = 10, mask_via: str = "info",
                 mask_shape: tuple | None = None, empty_mask_at: int | None = None):
        if mask_via not in ("info", "method"):
            raise ValueError(f"mask_via must be 'info' or 'method', got {mask_via!r}.")
        self.n = n
        self.episode_length = episode_length
        self.mask_via = mask_via
        self.mask_shape = mask_shape
        self.empty_mask_at = empty_mask_at
        self.observation_space = spaces.Box(0.0, 1.0, shape=(n,), dtype=np.float32)
        self.action_space = spaces.Discrete(n)
        self._mask = np.ones(n, dtype=np.int8)
        self._t = 0

    def _draw_mask(self) -> None:
        mask = (self.np_random.random(self.n) < 0.5).astype(np.int8)
        mask[self.np_random.integers(self.n)] = 1  # at least one allowed
        if self.empty_mask_at is not None and self._t >= self.empty_mask_at:
            mask[:] = 0
        self._mask = mask

    def action_masks(self) -> np.ndarray:
        """The allowed actions now (int8, 1 = allowed)."""
        mask = self._mask
        return np.ones(self.mask_shape, np.int8) if self.mask_shape is not None else mask.copy()

    def _result(self):
        info = {"action_mask": self.action_masks()} if self.mask_via == "info" else {}
        return self._mask.astype(np.float32), info

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._draw_mask()
        return self._result()

    def step(self, action):
        action = int(action)
        self._t += 1
        if not self._mask[action]:
            obs, info = self._result()
            return obs, -1.0, True, False, info
        reward = (action + 1) / self.n
        self._draw_mask()
        obs, info = self._result()
        return obs, reward, False, self._t >= self.episode_length, info
