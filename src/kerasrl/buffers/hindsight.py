"""Hindsight experience replay (Andrychowicz et al., 2017): replay a transition with the goal it
did reach instead of the one it was given.

A goal-conditioned environment (Gymnasium's GoalEnv form: a Dict observation with
"achieved_goal" and "desired_goal" leaves, and `compute_reward(achieved_goal, desired_goal, info)`)
pays a sparse reward, so an agent that never reaches a goal by chance never sees a reward. Here a
share `n_goals / (n_goals + 1)` of each sampled batch is replayed with another goal: the goal
achieved at a step of the same episode, chosen by `strategy` ("future": a step at or after this
one; "final": the episode's last; "episode": any), and the reward that goal would have paid,
from the env's own `compute_reward`. Only an episode that has ended can lend goals; a transition
of an episode still running, or one whose episode the ring has begun to overwrite, is replayed
with its own goal. Observations are stored flat (kerasrl.spaces), so a goal is a slice of them.

The env's compute_reward is checked against its steps' rewards before it is used
(`kerasrl.envs.checker.goal_reward`). The episode bookkeeping (where each stored episode starts and how long it is) is saved with the
buffer, so that a resumed run samples the same batches.
"""

from __future__ import annotations

from dataclasses import dataclass
import gymnasium as gym
import numpy as np

from kerasrl.buffers.replay import ReplayBuffer
from kerasrl.spaces import FlatObservations, Leaf, is_goal_space, structure_of

STRATEGIES = ("future", "final", "episode")


@dataclass(frozen=True)
class GoalLayout:
    """Where the achieved and the desired goal sit in a flat observation, and how a slice of it
    turns back into the env's own goal array."""

    achieved: Leaf
    desired: Leaf

    @classmethod
    def of(cls, observation_space: gym.Space, env_name: str) -> GoalLayout:
        """The goals of a goal-conditioned env's observations, or a ValueError saying what the
        env lacks."""
        structure = structure_of(observation_space)
        if not isinstance(observation_space, FlatObservations) or not is_goal_space(structure):
            raise ValueError(
                f"Hindsight replay (hindsight_goals > 0) needs a goal-conditioned env: Dict "
                f"observations with 'observation', 'achieved_goal' and 'desired_goal' keys, and "
                f"env.compute_reward(achieved_goal, desired_goal, info) (Gymnasium's GoalEnv form, "
                f"as gymnasium-robotics' Fetch envs and kerasrl/BitFlipping-v0). {env_name} "
                f"observes {structure}. Set hindsight_goals=0 for other envs.")
        found = {leaf.name: leaf for leaf in observation_space.leaves}
        achieved, desired = found["achieved_goal"], found["desired_goal"]
        for leaf in (achieved, desired):
            if not isinstance(leaf.space, (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.Discrete)):
                raise ValueError(f"Hindsight replay copies goals as arrays: {env_name}'s "
                                 f"{leaf.name!r} is {leaf.space}; give it a Box goal.")
        if achieved.space != desired.space:
            raise ValueError(f"Hindsight replay puts achieved goals where desired goals go, so their "
                             f"spaces must be equal; {env_name} has achieved_goal {achieved.space} "
                             f"and desired_goal {desired.space}.")
        return cls(achieved, desired)

    def goals(self, flat: np.ndarray, leaf: Leaf | None = None) -> np.ndarray:
        """The goals in flat observations (B, D), as the env gives them: (B, *goal shape) in the
        goal space's dtype (a Discrete goal as its index)."""
        leaf = leaf or self.achieved
        values = flat[:, leaf.start:leaf.start + leaf.size]
        if isinstance(leaf.space, gym.spaces.Discrete):  # carried one-hot
            return values.argmax(axis=-1).astype(leaf.space.dtype) + leaf.space.start
        return values.reshape(-1, *leaf.space.shape).astype(leaf.space.dtype)


class HindsightReplayBuffer(ReplayBuffer):
    """Uniform replay of flat goal-conditioned observations, a share of each batch with goals
    replayed in hindsight (see the module docstring).

    Args (beyond ReplayBuffer's; n_step must be 1):
        layout: where the goals are in an observation (`GoalLayout.of`).
        rewards: `(achieved, desired) -> rewards` (`kerasrl.envs.checker.goal_reward`).
        n_goals: replayed goals per real transition (HER's k): a share k / (k + 1) of a batch.
        strategy: "future", "final" or "episode".
    """

    def __init__(self, capacity, n_envs, obs_shape, obs_dtype=np.float32, gamma=0.99, n_step=1, *,
                 layout: GoalLayout, rewards, n_goals: int = 4, strategy: str = "future", **action_layout):
        if n_step != 1:
            raise ValueError("Hindsight replay recomputes one step's reward for a new goal; it does "
                             f"not sum n-step returns (n_step_return={n_step}): use 1.")
        if strategy not in STRATEGIES:
            raise ValueError(f"hindsight_strategy must be one of {', '.join(map(repr, STRATEGIES))}, "
                             f"got {strategy!r}.")
        super().__init__(capacity, n_envs, obs_shape, obs_dtype, gamma, n_step, **action_layout)
        self.layout, self.rewards_for, self.strategy = layout, rewards, strategy
        self.relabel_share = n_goals / (n_goals + 1)
        shape = (self.capacity_per_env, n_envs)
        # Each stored row's episode: the row it starts at, and its length once it has ended (0
        # while it runs, and again once the ring overwrites any of it).
        self.episode_start = np.zeros(shape, dtype=np.int64)
        self.episode_length = np.zeros(shape, dtype=np.int64)
        self.current_start = np.zeros(n_envs, dtype=np.int64)  # (n_envs,) the running episodes'
        self.current_length = np.zeros(n_envs, dtype=np.int64)

    def add(self, obs, actions, rewards, next_obs, terminated, truncated,
            next_action_masks=None) -> None:
        row, rows_per_env = self.position, self.capacity_per_env
        if self.full:  # the oldest episode loses its first row: it can no longer lend goals
            for env in np.flatnonzero(self.episode_length[row] > 0):
                start, length = self.episode_start[row, env], self.episode_length[row, env]
                left = length - (row - start) % rows_per_env
                self.episode_length[(row + np.arange(left)) % rows_per_env, env] = 0
        # An episode longer than the ring keeps its newest rows.
        wrapped = self.current_length >= rows_per_env
        self.current_start[wrapped] = (row + 1) % rows_per_env
        self.current_length = np.minimum(self.current_length + 1, rows_per_env)
        self.episode_start[row] = self.current_start
        self.episode_length[row] = 0
        super().add(obs, actions, rewards, next_obs, terminated, truncated, next_action_masks)
        for env in np.flatnonzero(np.asarray(terminated) | np.asarray(truncated)):
            length = self.current_length[env]
            episode = (self.current_start[env] + np.arange(length)) % rows_per_env
            self.episode_start[episode, env] = self.current_start[env]
            self.episode_length[episode, env] = length
            self.current_start[env], self.current_length[env] = (row + 1) % rows_per_env, 0

    def sample(self, batch_size: int, rng: np.random.Generator, n_batches: int = 1):
        if len(self) == 0:
            raise ValueError("Cannot sample from an empty replay buffer.")
        rows, envs = self.sample_indices(batch_size * n_batches, rng)
        batch = self.gather(rows, envs)
        self._replay_goals(batch, rows, envs, rng)
        return {k: v.reshape(n_batches, batch_size, *v.shape[1:]) for k, v in batch.items()}

    def _replay_goals(self, batch, rows, envs, rng) -> None:
        """Give the chosen share of `batch` (those of ended episodes) goals achieved later in their
        episode, and the rewards those goals pay, in place."""
        lengths = self.episode_length[rows, envs]
        chosen = np.flatnonzero((rng.random(len(rows)) < self.relabel_share) & (lengths > 0))
        if len(chosen) == 0:
            return
        rows, envs, lengths = rows[chosen], envs[chosen], lengths[chosen]
        starts = self.episode_start[rows, envs]
        if self.strategy == "future":  # this step's own achieved goal included (as SB3)
            steps = rng.integers((rows - starts) % self.capacity_per_env, lengths)
        elif self.strategy == "final":
            steps = lengths - 1
        else:
            steps = rng.integers(0, lengths)
        goal_rows = (starts + steps) % self.capacity_per_env
        achieved, desired = self.layout.achieved, self.layout.desired
        goals = self.next_observations[goal_rows, envs, achieved.start:achieved.start + achieved.size]
        at = slice(desired.start, desired.start + desired.size)
        batch["observations"][chosen, at] = goals
        batch["next_observations"][chosen, at] = goals
        next_obs = batch["next_observations"][chosen]
        batch["rewards"][chosen] = self.rewards_for(self.layout.goals(next_obs),
                                                    self.layout.goals(next_obs, desired))

    def _episode_state(self) -> dict[str, np.ndarray]:
        return {"episode_start": self.episode_start, "episode_length": self.episode_length,
                "current_start": self.current_start, "current_length": self.current_length}

    def state_dict(self) -> dict[str, np.ndarray]:
        return {**super().state_dict(), **self._episode_state()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        super().load_state_dict(state)
        for key, target in self._episode_state().items():
            if key not in state:
                raise ValueError(f"The saved replay buffer has no {key!r}: it was not saved with "
                                 f"hindsight replay (hindsight_goals=0 then?).")
            target[...] = state[key]
