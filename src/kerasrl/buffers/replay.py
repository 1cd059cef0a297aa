"""A preallocated numpy ring of transitions from `n_envs` environments, sampled uniformly.

Layout (as Stable-Baselines3's `ReplayBuffer`): arrays of shape (T, n_envs, ...), T the capacity per
environment, so that consecutive steps of one environment sit next to each other. `terminated` and
`truncated` are kept apart: a time-limit cut bootstraps from the next observation, a death does
not. The next observation of a finished episode is its true final observation, not the reset one.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from kerasrl.returns import n_step_returns


def action_layout(action_space) -> tuple[tuple[int, ...], type]:
    """(shape, dtype) in which a buffer stores actions of `action_space`: () int32 for Discrete,
    the space's shape as float32 for Box (what a compiled step takes on every backend)."""
    if isinstance(action_space, gym.spaces.Discrete):
        return (), np.int32
    if isinstance(action_space, gym.spaces.Box):
        return tuple(action_space.shape), np.float32
    raise ValueError(f"Replay buffers store Discrete or Box actions, not {action_space}.")


class ReplayBuffer:
    """Uniform experience replay.

    Args:
        capacity: transitions kept in total (rounded up to a multiple of n_envs).
        n_envs: environments that add one transition each per `add`.
        obs_shape, obs_dtype: of one observation (stored as given; cast to float32 on sampling).
        gamma: the discount, used to turn `terminated` into the bootstrap factor of each sample.
        n_step: sample n-step returns: the rewards of up to `n_step` consecutive steps of the same
            env, stopping at an episode's end (a termination does not bootstrap, a truncation
            bootstraps from its final observation) and at the newest stored step.
        action_shape, action_dtype: of one action: () int32 for Discrete (the default), (D,)
            float32 for Box; see `action_layout`.
    """

    def __init__(self, capacity: int, n_envs: int, obs_shape, obs_dtype=np.float32, gamma=0.99,
                 n_step: int = 1, *, action_shape=(), action_dtype=np.int32):
        if capacity < 1:
            raise ValueError(f"buffer_size must be at least 1, got {capacity}.")
        if n_step < 1:
            raise ValueError(f"n_step must be at least 1, got {n_step}.")
        self.n_step = n_step
        self.n_envs = n_envs
        self.capacity_per_env = max(1, -(-capacity // n_envs))
        self.gamma = gamma
        shape = (self.capacity_per_env, n_envs)
        self._allocate_observations(shape, tuple(obs_shape), obs_dtype)
        self.actions = np.zeros((*shape, *action_shape), dtype=action_dtype)
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.terminated = np.zeros(shape, dtype=bool)
        self.truncated = np.zeros(shape, dtype=bool)
        # The allowed actions of each next observation (T, n_envs, n_actions) bool, made at the
        # first masked add: an env without action masks never has it.
        self.next_action_masks = None
        self.position = 0  # the next row to write
        self.full = False

    def _allocate_observations(self, shape, obs_shape, obs_dtype) -> None:
        # (T, n_envs, *obs_shape) each; FrameStackReplayBuffer stores frames instead.
        self.observations = np.zeros((*shape, *obs_shape), dtype=obs_dtype)
        self.next_observations = np.zeros((*shape, *obs_shape), dtype=obs_dtype)

    def _store_observations(self, row, obs, next_obs, terminated, truncated) -> None:
        self.observations[row] = obs
        self.next_observations[row] = next_obs

    def _observations(self, rows, envs) -> np.ndarray:
        return self.observations[rows, envs]

    def _next_observations(self, rows, envs) -> np.ndarray:
        return self.next_observations[rows, envs]

    def _observation_state(self) -> dict[str, np.ndarray]:
        return {"observations": self.observations, "next_observations": self.next_observations}

    def __len__(self) -> int:
        """Transitions stored."""
        return (self.capacity_per_env if self.full else self.position) * self.n_envs

    def add(self, obs, actions, rewards, next_obs, terminated, truncated,
            next_action_masks=None) -> None:
        """Store one step of every environment; each argument has leading dimension n_envs.

        `next_action_masks` (n_envs, n_actions) bool: the actions allowed at `next_obs` (an env
        with action masks), sampled as "next_action_masks" for masked TD targets.
        """
        row = self.position
        if next_action_masks is not None:
            if self.next_action_masks is None:
                self.next_action_masks = np.ones(
                    (self.capacity_per_env, self.n_envs, np.shape(next_action_masks)[-1]), bool)
            self.next_action_masks[row] = next_action_masks
        elif self.next_action_masks is not None:
            self.next_action_masks[row] = True
        self._store_observations(row, obs, next_obs, terminated, truncated)
        self.actions[row] = actions
        self.rewards[row] = rewards
        self.terminated[row] = terminated
        self.truncated[row] = truncated
        self.position = (row + 1) % self.capacity_per_env
        self.full = self.full or self.position == 0

    def sample_indices(self, n: int, rng: np.random.Generator):
        """`n` uniform (row, env) index pairs of stored transitions."""
        rows_stored = self.capacity_per_env if self.full else self.position
        flat = rng.integers(0, rows_stored * self.n_envs, size=n)
        return flat // self.n_envs, flat % self.n_envs

    def gather(self, rows, envs) -> dict[str, np.ndarray]:
        """The batch at the given indices, as float32 / int32 arrays ready for a compiled step.

        Keys: observations, actions, rewards, next_observations, discounts (gamma, or 0 after a
        terminal state), weights (importance weights; ones for uniform replay).
        """
        if self.n_step == 1:
            last_rows = rows
            returns = self.rewards[rows, envs]
            discounts = np.where(self.terminated[rows, envs], 0.0, self.gamma)
        else:
            last_rows, returns, discounts = self._n_step_returns(rows, envs)
        batch = {
            "observations": self._sent(self._observations(rows, envs)),
            "actions": self.actions[rows, envs],
            "rewards": returns.astype(np.float32, copy=False),
            "next_observations": self._sent(self._next_observations(last_rows, envs)),
            "discounts": discounts.astype(np.float32),
            "weights": np.ones(len(rows), dtype=np.float32),
        }
        if self.next_action_masks is not None:
            batch["next_action_masks"] = self.next_action_masks[last_rows, envs]
        return batch

    frames_first = False
    """Whether samples carry stacked frames as stored, frames first (FrameStackReplayBuffer)."""

    def _sent(self, observations: np.ndarray) -> np.ndarray:
        """Sampled observations as the batch carries them: float32."""
        return observations.astype(np.float32, copy=False)

    def _n_step_returns(self, rows, envs):
        """Discounted sums of up to n_step rewards from each (row, env) (`returns.n_step_returns`:
        the row whose next observation bootstraps, the reward sum, gamma**k or 0)."""
        newest = (self.position - 1) % self.capacity_per_env
        return n_step_returns(self.rewards, self.terminated, self.truncated, rows, envs, newest,
                              self.n_step, self.gamma)

    def sample(self, batch_size: int, rng: np.random.Generator, n_batches: int = 1):
        """`n_batches` batches of `batch_size`, stacked on a leading axis: (n_batches, batch_size, ...)."""
        if len(self) == 0:
            raise ValueError("Cannot sample from an empty replay buffer.")
        rows, envs = self.sample_indices(batch_size * n_batches, rng)
        batch = self.gather(rows, envs)
        return {k: v.reshape(n_batches, batch_size, *v.shape[1:]) for k, v in batch.items()}

    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything needed to restore the buffer exactly, as numpy arrays (no Python objects)."""
        state = {
            **self._observation_state(),
            "actions": self.actions,
            "rewards": self.rewards,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "position": np.asarray(self.position),
            "full": np.asarray(self.full),
        }
        if self.next_action_masks is not None:
            state["next_action_masks"] = self.next_action_masks
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore from `state_dict()` output, checking that the shapes match this buffer."""
        for key in (*self._observation_state(), "actions", "rewards", "terminated", "truncated"):
            target = getattr(self, key)
            if state[key].shape != target.shape:
                raise ValueError(
                    f"Saved replay buffer field {key!r} has shape {state[key].shape}, "
                    f"this buffer expects {target.shape} (buffer_size or n_envs changed?)."
                )
            target[...] = state[key]
        if "next_action_masks" in state:
            self.next_action_masks = np.array(state["next_action_masks"], dtype=bool)
        self.position = int(state["position"])
        self.full = bool(state["full"])
