"""Tiny environments whose right answer is known: fast, exact learning checks (as SB3's IdentityEnv).

- `IdentityEnv`: observe a one-hot state, reward 1 for naming it. Optimal return = episode length.
- `ChainEnv`: walk right along a chain to a reward at the end; stepping left ends the episode with a
  small reward. Bootstrapping over several steps is needed to prefer the far reward.
- `MaskedChoiceEnv`: a random set of actions is allowed each step (`info["action_mask"]`); the
  higher an allowed action, the more it pays, and a forbidden one ends the episode with a penalty.
  With the mask the answer is "the highest allowed action"; without it the agent cannot know.
- `ImageVectorEnv`: a Dict (or Tuple, or nested Dict) observation of a small image and a vector;
  the right action needs both (which half of the image is lit, and which flag the vector shows).
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

    `action_shape`: the actions' shape, (dim,) by default, or another of dim entries ((2, 2) for
    dim 4, () for dim 1): the best action is then `scale * x` in that shape, and `step` refuses
    an action of any other shape, as a strict env would.
    """

    metadata = {"render_modes": []}

    def __init__(self, dim: int = 1, scale: float = 1.5, bound: float = 2.0,
                 episode_length: int = 10, action_shape: tuple[int, ...] | None = None):
        self.dim, self.scale, self.episode_length = dim, float(scale), episode_length
        self.action_shape = (dim,) if action_shape is None else tuple(action_shape)
        if int(np.prod(self.action_shape)) != dim:
            raise ValueError(f"action_shape {self.action_shape} does not hold {dim} entries.")
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(dim,), dtype=np.float32)
        self.action_space = spaces.Box(-bound, bound, shape=self.action_shape, dtype=np.float32)
        self._x = np.zeros(dim, dtype=np.float32)
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._x = self.np_random.uniform(-1.0, 1.0, self.dim).astype(np.float32)
        return self._x.copy(), {}

    def step(self, action):
        action = np.asarray(action, dtype=np.float64)
        if action.shape != self.action_shape:
            raise ValueError(f"TargetEnv takes actions of shape {self.action_shape}, got {action.shape}.")
        error = action - self.scale * self._x.reshape(self.action_shape)
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

    `nvec=(n_1, ..., n_k)`: a MultiDiscrete(nvec) action space instead, one mask per component
    side by side (sum(nvec) flags, each component with one allowed value at least); an action
    pays the mean over the components of `(a_j + 1) / n_j`, and any forbidden value -1 (ended).
    """

    metadata = {"render_modes": []}

    def __init__(self, n: int = 4, episode_length: int = 10, mask_via: str = "info",
                 mask_shape: tuple | None = None, empty_mask_at: int | None = None,
                 nvec: tuple | None = None):
        if mask_via not in ("info", "method"):
            raise ValueError(f"mask_via must be 'info' or 'method', got {mask_via!r}.")
        self.nvec = None if nvec is None else tuple(int(k) for k in nvec)
        self.n = n = n if nvec is None else sum(self.nvec)  # mask entries
        self.episode_length = episode_length
        self.mask_via = mask_via
        self.mask_shape = mask_shape
        self.empty_mask_at = empty_mask_at
        self.observation_space = spaces.Box(0.0, 1.0, shape=(n,), dtype=np.float32)
        self.action_space = (spaces.Discrete(n) if nvec is None
                             else spaces.MultiDiscrete(np.array(self.nvec)))
        self._mask = np.ones(n, dtype=np.int8)
        self._t = 0

    def _draw_mask(self) -> None:
        mask = (self.np_random.random(self.n) < 0.5).astype(np.int8)
        start = 0
        for size in self.nvec or (self.n,):  # at least one allowed (in each component)
            mask[start + self.np_random.integers(size)] = 1
            start += size
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
        self._t += 1
        if self.nvec is None:
            action = int(action)
            allowed, reward = bool(self._mask[action]), (action + 1) / self.n
        else:
            action = np.asarray(action, np.int64)
            starts = np.cumsum((0,) + self.nvec)[:-1]
            allowed = bool(np.all(self._mask[starts + action]))
            reward = float(np.mean((action + 1) / np.array(self.nvec)))
        if not allowed:
            obs, info = self._result()
            return obs, -1.0, True, False, info
        self._draw_mask()
        obs, info = self._result()
        return obs, reward, False, self._t >= self.episode_length, info


class ImageVectorEnv(gym.Env):
    """Structured observations with a known answer: a `size` x `size` x 1 uint8 image with one lit
    pixel (255) in its left or right half (columns < size // 2, or > size // 2), and a flag 0 or 1
    in a vector leaf. The right action of Discrete(4) is `2 * side + flag` (side 1 = right): it
    pays 1, any other 0. Each step draws a new image and flag, so the best action does not depend
    on the future; episodes are truncated after `episode_length` steps.

    The optimal return is `episode_length`; a policy that reads one leaf only gets half of it,
    a uniform one a quarter.

    `layout`: "dict" `{"image", "vector" Box(0, 1, (2,)) one-hot flag}`; "tuple" `(image, vector)`;
    "nested" `{"image", "extra": {"flag": Discrete(2), "noise": Box(-1, 1, (3,))}}` (noise is
    uninformative). `continuous=True`: a Box(-1, 1, (1,)) action whose best value is
    `(2 * side - 1) * (0.25 if flag else 1.0)`, reward `-(action - best)^2`: the best return is 0,
    the side alone earns about -1.4 per episode, the flag alone -5.3, uniform actions -8.6.
    """

    metadata = {"render_modes": []}

    def __init__(self, size: int = 7, episode_length: int = 10, layout: str = "dict",
                 continuous: bool = False):
        if layout not in ("dict", "tuple", "nested"):
            raise ValueError(f"layout must be 'dict', 'tuple' or 'nested', got {layout!r}.")
        self.size, self.episode_length, self.layout = size, episode_length, layout
        self.continuous = continuous
        image = spaces.Box(0, 255, shape=(size, size, 1), dtype=np.uint8)
        vector = spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
        if layout == "dict":
            self.observation_space = spaces.Dict({"image": image, "vector": vector})
        elif layout == "tuple":
            self.observation_space = spaces.Tuple((image, vector))
        else:
            self.observation_space = spaces.Dict({"image": image, "extra": spaces.Dict({
                "flag": spaces.Discrete(2),
                "noise": spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)})})
        self.action_space = (spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32) if continuous
                             else spaces.Discrete(4))
        self._side, self._flag, self._t = 0, 0, 0
        self._image = np.zeros((size, size, 1), np.uint8)

    def _draw(self):
        self._side, self._flag = (int(v) for v in self.np_random.integers(0, 2, size=2))
        half = self.size // 2
        column = int(self.np_random.integers(0, half))
        self._image = np.zeros((self.size, self.size, 1), np.uint8)
        self._image[int(self.np_random.integers(0, self.size)),
                    column + (self.size - half if self._side else 0), 0] = 255
        vector = np.eye(2, dtype=np.float32)[self._flag]
        if self.layout == "dict":
            return {"image": self._image.copy(), "vector": vector}
        if self.layout == "tuple":
            return (self._image.copy(), vector)
        noise = self.np_random.uniform(-1.0, 1.0, 3).astype(np.float32)
        return {"image": self._image.copy(), "extra": {"flag": self._flag, "noise": noise}}

    def best_action(self):
        """The action that pays most now."""
        if self.continuous:
            return np.array([(2 * self._side - 1) * (0.25 if self._flag else 1.0)], np.float32)
        return 2 * self._side + self._flag

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._draw(), {}

    def step(self, action):
        best = self.best_action()
        if self.continuous:
            reward = -float(np.square(np.asarray(action, np.float64).ravel()[0] - best[0]))
        else:
            reward = 1.0 if int(action) == best else 0.0
        self._t += 1
        return self._draw(), reward, False, self._t >= self.episode_length, {}
