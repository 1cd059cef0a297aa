"""Numpy storage for one on-policy rollout: n_steps rows of n_envs transitions, then GAE.

Layout (T, N, ...): T = n_steps, N = n_envs, time first. Observations are stored as the network
saw them (normalized, if the policy normalizes), in `obs_dtype`: uint8 frames stay uint8 (a
quarter of float32's bytes, to the host's memory and to the learner's device), and the update
converts its minibatch to float32 where it reads it. Actions are stored as sampled: a Gaussian
action is clipped to the Box bounds only when it is sent to the env, so its log-probability stays
exact.
"""

from __future__ import annotations

import numpy as np

from kerasrl.returns import gae


class RolloutBuffer:
    """One rollout of `n_steps` steps from `n_envs` environments.

    Args:
        n_steps, n_envs: rows and columns.
        obs_shape: of one observation.
        action_shape, action_dtype: of one action: () int32 for Discrete, (D,) float32 for Box.
        obs_dtype: what observations are stored as: float32, or the env's own integer dtype
            where the network sees them unnormalized (uint8 frames; `stored_observation_dtype`).
    """

    def __init__(self, n_steps: int, n_envs: int, obs_shape, action_shape=(), action_dtype=np.int32,
                 obs_dtype=np.float32):
        self.n_steps, self.n_envs = n_steps, n_envs
        shape = (n_steps, n_envs)
        self.observations = np.zeros((*shape, *obs_shape), dtype=obs_dtype)
        self.actions = np.zeros((*shape, *action_shape), dtype=action_dtype)
        self.log_probs = np.zeros(shape, dtype=np.float32)
        self.values = np.zeros(shape, dtype=np.float32)  # V(s_t) at collection time
        self.rewards = np.zeros(shape, dtype=np.float32)
        self.terminated = np.zeros(shape, dtype=bool)
        self.episode_ends = np.zeros(shape, dtype=bool)  # terminated or truncated
        # V(true final observation) where an episode was truncated: the time-limit bootstrap.
        self.truncation_values = np.zeros(shape, dtype=np.float32)
        self.advantages = np.zeros(shape, dtype=np.float32)
        self.returns = np.zeros(shape, dtype=np.float32)
        # The allowed actions at each observation (T, N, n_actions) bool, made at the first
        # masked add: an env without action masks never has it.
        self.action_masks = None
        self.position = 0

    @property
    def full(self) -> bool:
        """All n_steps rows are written."""
        return self.position == self.n_steps

    def reset(self) -> None:
        """Start a new rollout (the arrays are overwritten row by row)."""
        self.position = 0
        self.truncation_values[...] = 0.0

    def add(self, obs, actions, log_probs, values, rewards, terminated, truncated,
            truncation_values=None, action_masks=None) -> None:
        """Store one step of every env; each argument has leading dimension n_envs.

        `truncation_values` are V(final observation) for the envs whose episode was truncated
        (any value elsewhere; ignored). `action_masks` (n_envs, n_actions) bool: the actions
        allowed at `obs` (an env with action masks); the update masks the logits with them.
        """
        if self.full:
            raise RuntimeError("The rollout is full: compute its advantages and reset it first.")
        row = self.position
        if action_masks is not None:
            if self.action_masks is None:
                self.action_masks = np.ones((self.n_steps, self.n_envs,
                                             np.shape(action_masks)[-1]), dtype=bool)
            self.action_masks[row] = action_masks
        elif self.action_masks is not None:
            self.action_masks[row] = True
        self.observations[row] = obs
        self.actions[row] = actions
        self.log_probs[row] = log_probs
        self.values[row] = values
        self.rewards[row] = rewards
        self.terminated[row] = terminated
        self.episode_ends[row] = np.logical_or(terminated, truncated)
        if truncation_values is not None:
            self.truncation_values[row] = np.where(truncated, truncation_values, 0.0)
        self.position += 1

    def compute_advantages(self, last_values: np.ndarray, gamma: float, gae_lambda: float) -> None:
        """GAE over the rollout. `last_values` (N,) are V of the observations after the last row.

        Within an episode V(s_{t+1}) is the next row's value; where an episode was truncated it is
        the value of the true final observation; after a termination it is not used.
        """
        next_values = np.empty_like(self.values)  # (T, N)
        next_values[:-1] = self.values[1:]
        next_values[-1] = last_values
        next_values = np.where(self.episode_ends, self.truncation_values, next_values)
        self.advantages, self.returns = gae(self.rewards, self.values, next_values,
                                            self.terminated, self.episode_ends, gamma, gae_lambda)

    def training_data(self) -> dict[str, np.ndarray]:
        """The rollout flattened to (T * N, ...) arrays: what the compiled update reads."""
        n = self.n_steps * self.n_envs
        data = {
            "observations": self.observations.reshape(n, *self.observations.shape[2:]),
            "actions": self.actions.reshape(n, *self.actions.shape[2:]),
            "old_log_probs": self.log_probs.reshape(n),
            "old_values": self.values.reshape(n),
            "advantages": self.advantages.reshape(n),
            "returns": self.returns.reshape(n),
        }
        if self.action_masks is not None:
            data["action_masks"] = self.action_masks.reshape(n, self.action_masks.shape[-1])
        return data


def stored_observation_dtype(observation_space, normalized: bool):
    """The rollout's observation dtype for `observation_space`: uint8 where the env's frames are
    uint8 and reach the network unnormalized (the values are exact either way), else float32."""
    if not normalized and getattr(observation_space, "dtype", None) == np.uint8:
        return np.uint8
    return np.float32


def minibatch_indices(n_samples: int, batch_size: int, n_epochs: int,
                      rng: np.random.Generator) -> np.ndarray:
    """(n_epochs * n_samples // batch_size, batch_size) int32: one fresh permutation per epoch.

    When batch_size does not divide n_samples, each epoch leaves out the last
    `n_samples % batch_size` of its permutation (a different few each epoch), so that every
    minibatch has the same shape and all of them fit one compiled loop.
    """
    per_epoch = n_samples // batch_size
    rows = [rng.permutation(n_samples)[: per_epoch * batch_size].reshape(per_epoch, batch_size)
            for _ in range(n_epochs)]
    return np.concatenate(rows).astype(np.int32)
