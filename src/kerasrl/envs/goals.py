"""Goal-conditioned environments, for hindsight experience replay (docs/hindsight.md).

`kerasrl/BitFlipping-v0` is the first experiment of the HER paper (Andrychowicz et al., 2017): a
state of `n_bits` bits and a goal of as many, both drawn at random at reset; each action flips one
bit (Discrete(n_bits)), or with `continuous=True` every bit whose action component is positive
(Box(-1, 1, (n_bits,)), for DDPG, TD3 and SAC, as Stable-Baselines3's BitFlippingEnv). The reward
is 0 once the state equals the goal (which ends the episode) and -1 before; an episode is cut
after `max_steps` (n_bits by default, enough for a perfect policy). Observations take Gymnasium's
GoalEnv form: {"observation", "achieved_goal" (both the state), "desired_goal"}, and
`compute_reward` gives the reward of any achieved and desired goals, batched. A random policy
almost never reaches a goal beyond 10 bits, so the reward never varies and DQN alone learns
nothing; with hindsight replay it does.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from kerasrl import registry

BIT_FLIPPING_ID = "kerasrl/BitFlipping-v0"


class BitFlipping(gym.Env):
    """Flip bits until the state equals the goal (see the module docstring)."""

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}
    CELL = 24  # pixels per bit in rgb_array frames

    def __init__(self, n_bits: int = 10, continuous: bool = False, max_steps: int | None = None,
                 render_mode: str | None = None):
        if int(n_bits) != n_bits or n_bits < 1:
            raise ValueError(f"n_bits must be a positive integer, got {n_bits!r}.")
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be at least 1 (or None: n_bits), got {max_steps!r}.")
        self.n_bits, self.continuous = int(n_bits), bool(continuous)
        self.max_steps = self.n_bits if max_steps is None else int(max_steps)
        self.render_mode = render_mode
        bits = gym.spaces.MultiBinary(self.n_bits)
        self.observation_space = gym.spaces.Dict(
            {"observation": bits, "achieved_goal": bits, "desired_goal": bits})
        self.action_space = (gym.spaces.Box(-1.0, 1.0, (self.n_bits,), np.float32) if self.continuous
                             else gym.spaces.Discrete(self.n_bits))
        self.state = np.zeros(self.n_bits, np.int8)
        self.goal = np.zeros(self.n_bits, np.int8)
        self.steps = 0

    def _observation(self) -> dict[str, np.ndarray]:
        return {"observation": self.state.copy(), "achieved_goal": self.state.copy(),
                "desired_goal": self.goal.copy()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = self.np_random.integers(0, 2, self.n_bits, dtype=np.int8)
        self.goal = self.state
        while np.array_equal(self.goal, self.state):  # a goal already reached is no task
            self.goal = self.np_random.integers(0, 2, self.n_bits, dtype=np.int8)
        self.steps = 0
        return self._observation(), {}

    def step(self, action):
        if self.continuous:
            flip = np.asarray(action, np.float32).reshape(self.n_bits) > 0
        else:
            if not self.action_space.contains(np.int64(action)):
                raise ValueError(f"BitFlipping takes an action in 0..{self.n_bits - 1}, got {action!r}.")
            flip = np.arange(self.n_bits) == int(action)
        self.state = np.where(flip, 1 - self.state, self.state).astype(np.int8)
        self.steps += 1
        reward = float(self.compute_reward(self.state, self.goal, {}))
        terminated = reward == 0.0
        truncated = not terminated and self.steps >= self.max_steps
        return self._observation(), reward, terminated, truncated, {"is_success": terminated}

    def compute_reward(self, achieved_goal, desired_goal, info) -> np.ndarray:
        """0 where the achieved goal equals the desired one, -1 elsewhere: (B,) for goals (B,
        n_bits), a 0-d array for one goal."""
        differs = np.any(np.asarray(achieved_goal) != np.asarray(desired_goal), axis=-1)
        return -differs.astype(np.float32)

    def render(self):
        """"ansi": the two bit strings, one above the other; "rgb_array": the state above the goal, one square per bit
        (lit: 1), a bit that already matches its goal in green, one that does not in red."""
        if self.render_mode == "ansi":
            return f"state {''.join(map(str, self.state))}\ngoal  {''.join(map(str, self.goal))}"
        if self.render_mode == "rgb_array":
            matches = self.state == self.goal
            colours = np.where(matches[:, None], [[60, 200, 90]], [[220, 70, 60]])  # (n_bits, 3)
            rows = np.stack([self.state, self.goal])  # (2, n_bits)
            cells = np.where(rows[..., None] == 1, colours[None], colours[None] // 4)  # (2, n, 3)
            frame = np.repeat(np.repeat(cells, self.CELL, axis=0), self.CELL, axis=1)
            frame[:, ::self.CELL] = 0  # the grid between bits
            frame[::self.CELL, :] = 0
            return frame.astype(np.uint8)
        return None


def register_goal_envs() -> None:
    """Registers kerasrl/BitFlipping-v0 with Gymnasium; safe to call twice."""
    registry.register_env_ids(__name__ + ":")
