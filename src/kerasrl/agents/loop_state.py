"""The training loop's state between env steps.

`LoopState` is the one value (PureJaxRL's `runner_state`) that `Agent.loop` holds: the envs'
current observations, each episode's return and length so far, the step count and the run's
length, saved and restored whole with a checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class LoopState:
    """The training loop's state between env steps, saved and restored as one value (PureJaxRL's
    `runner_state`): with the weights, optimizer, buffers and RNG it is all a resume needs."""

    observations: np.ndarray | None
    """(n_envs, *obs_shape): each env's current observation; None until the first reset."""
    episode_returns: np.ndarray
    """(n_envs,) float64: the return so far of each env's running episode."""
    episode_lengths: np.ndarray
    """(n_envs,) int64: the steps so far of each env's running episode."""
    num_timesteps: int = 0
    """Env steps taken, over all envs: the schedules' position."""
    total_steps: int | None = None
    """The run's length that the schedules span (the last `fit`'s total_steps); None before one."""
    action_masks: np.ndarray | None = None
    """(n_envs, n_actions) bool: the allowed actions at `observations`, for an env with action
    masks (Discrete agents); None otherwise."""
    compiled_streams: dict[str, np.ndarray] | None = None
    """The compiled loop's random streams (int32 xorshift states, kerasrl.compiled.engine) once a
    fit has run on it; None before."""

    @classmethod
    def start(cls, n_envs: int) -> LoopState:
        """The state before any step: no observations yet, every counter at 0."""
        return cls(None, np.zeros(n_envs), np.zeros(n_envs, dtype=np.int64))

    def restart(self, observations: np.ndarray) -> None:
        """Every env starts a new episode at `observations`; the step count goes on."""
        self.observations = observations
        self.episode_returns[...] = 0
        self.episode_lengths[...] = 0

    def state_dict(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """(arrays, JSON-ready values), under the names checkpoints have always used."""
        arrays = {"loop/episode_returns": self.episode_returns.copy(),
                  "loop/episode_lengths": self.episode_lengths.copy()}
        if self.observations is not None:
            arrays["loop/observations"] = np.array(self.observations)
        if self.action_masks is not None:
            arrays["loop/action_masks"] = np.array(self.action_masks)
        for key, value in (self.compiled_streams or {}).items():
            arrays[f"loop/compiled/{key}"] = np.array(value)
        return arrays, {"num_timesteps": self.num_timesteps, "total_steps": self.total_steps}

    def load_state_dict(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Restore what `state_dict` returned, in place."""
        self.episode_returns[...] = arrays["loop/episode_returns"]
        self.episode_lengths[...] = arrays["loop/episode_lengths"]
        self.observations = (np.array(arrays["loop/observations"])
                             if "loop/observations" in arrays else None)
        self.action_masks = (np.array(arrays["loop/action_masks"])
                             if "loop/action_masks" in arrays else None)
        streams = {key[len("loop/compiled/"):]: np.array(value) for key, value in arrays.items()
                   if key.startswith("loop/compiled/")}
        self.compiled_streams = streams or None
        self.num_timesteps = int(meta["num_timesteps"])
        total = meta.get("total_steps")
        self.total_steps = None if total is None else int(total)

