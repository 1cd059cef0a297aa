"""Prioritized experience replay (Schaul et al., 2016), proportional variant, on a numpy sum tree.

A transition is sampled with probability p_i^alpha / sum_k p_k^alpha, p_i = |TD error| + eps (new
transitions get the highest priority seen), and weighted in the loss by (N P(i))^-beta / max_j w_j,
beta annealed to 1 over training. Every tree operation is vectorized over the batch.
"""

from __future__ import annotations

import numpy as np

from kerasrl.buffers.replay import ReplayBuffer


class SumTree:
    """A binary tree of sums over `capacity` leaves in one array; vectorized updates and search."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.size = 1 << max(0, int(np.ceil(np.log2(capacity))))  # leaves, a power of two
        self.nodes = np.zeros(2 * self.size, dtype=np.float64)  # node i has children 2i, 2i+1

    @property
    def total(self) -> float:
        return float(self.nodes[1])

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set leaves `indices` to `values` and recompute their ancestors (duplicates allowed:
        the last value of a repeated index wins)."""
        nodes = np.asarray(indices, dtype=np.int64) + self.size
        self.nodes[nodes] = values
        nodes = np.unique(nodes // 2)
        while nodes[0] >= 1:
            self.nodes[nodes] = self.nodes[2 * nodes] + self.nodes[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes // 2)

    def find(self, masses: np.ndarray) -> np.ndarray:
        """The leaf index holding each cumulative mass in [0, total)."""
        nodes = np.ones(len(masses), dtype=np.int64)
        masses = np.asarray(masses, dtype=np.float64).copy()
        while nodes[0] < self.size:
            left = self.nodes[2 * nodes]
            go_right = masses >= left
            masses -= np.where(go_right, left, 0.0)
            nodes = 2 * nodes + go_right
        return np.minimum(nodes - self.size, self.capacity - 1)

    def leaves(self, indices: np.ndarray) -> np.ndarray:
        return self.nodes[np.asarray(indices) + self.size]


class PrioritizedReplayBuffer(ReplayBuffer):
    """Replay sampled in proportion to priority**alpha, with importance-sampling weights.

    Args (beyond ReplayBuffer's):
        alpha: how much prioritization is used, in [0, 1] (0: uniform).
        eps: added to |TD error| so that no transition gets probability 0.
    """

    def __init__(self, capacity, n_envs, obs_shape, obs_dtype=np.float32, gamma=0.99, n_step=1,
                 alpha: float = 0.6, eps: float = 1e-6):
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"prioritized_replay_alpha must be in [0, 1], got {alpha!r}.")
        super().__init__(capacity, n_envs, obs_shape, obs_dtype, gamma, n_step)
        self.alpha = alpha
        self.eps = eps
        self.tree = SumTree(self.capacity_per_env * n_envs)
        self.max_priority = 1.0
        self.beta = 0.4  # set by the agent as training progresses

    def add(self, obs, actions, rewards, next_obs, terminated, truncated,
            next_action_masks=None) -> None:
        row = self.position
        super().add(obs, actions, rewards, next_obs, terminated, truncated, next_action_masks)
        flat = row * self.n_envs + np.arange(self.n_envs)
        self.tree.update(flat, np.full(self.n_envs, self.max_priority ** self.alpha))

    def sample_indices(self, n: int, rng: np.random.Generator):
        # Stratified: one draw in each of n equal slices of the total mass.
        total = self.tree.total
        masses = (np.arange(n) + rng.random(n)) * (total / n)
        flat = self.tree.find(np.minimum(masses, np.nextafter(total, 0)))
        # Rounding in the sums can, very rarely, walk into an empty leaf: draw those uniformly.
        empty = self.tree.leaves(flat) <= 0.0
        if empty.any():
            rows, envs = super().sample_indices(int(empty.sum()), rng)
            flat[empty] = rows * self.n_envs + envs
        return flat // self.n_envs, flat % self.n_envs

    def gather(self, rows, envs):
        batch = super().gather(rows, envs)
        flat = rows * self.n_envs + envs
        probabilities = self.tree.leaves(flat) / self.tree.total
        weights = (len(self) * probabilities) ** (-self.beta)
        batch["weights"] = (weights / weights.max()).astype(np.float32)
        batch["indices"] = flat.astype(np.int64)
        return batch

    def update_priorities(self, flat_indices: np.ndarray, td_errors: np.ndarray) -> None:
        """Priorities from the TD errors of the sampled transitions."""
        priorities = np.abs(np.asarray(td_errors, dtype=np.float64)).ravel() + self.eps
        self.max_priority = max(self.max_priority, float(priorities.max()))
        self.tree.update(np.asarray(flat_indices).ravel(), priorities ** self.alpha)

    def state_dict(self):
        state = super().state_dict()
        state["tree"] = self.tree.nodes
        state["max_priority"] = np.asarray(self.max_priority)
        state["beta"] = np.asarray(self.beta)
        return state

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.tree.nodes[...] = state["tree"]
        self.max_priority = float(state["max_priority"])
        self.beta = float(state["beta"])
