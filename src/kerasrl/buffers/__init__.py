"""Numpy storage for experience: replay for off-policy agents, rollouts for on-policy ones."""

import numpy as np

from kerasrl.buffers.frame_stack import (FrameStackReplayBuffer, PrioritizedFrameStackReplayBuffer,
                                         frames_last, model_layout, stacked_frames)
from kerasrl.buffers.hindsight import GoalLayout, HindsightReplayBuffer
from kerasrl.buffers.prioritized import PrioritizedReplayBuffer, SumTree
from kerasrl.buffers.replay import ReplayBuffer
from kerasrl.buffers.rollout import RolloutBuffer

__all__ = ["FrameStackReplayBuffer", "GoalLayout", "HindsightReplayBuffer", "PrioritizedFrameStackReplayBuffer",
           "PrioritizedReplayBuffer", "ReplayBuffer", "RolloutBuffer", "SumTree", "frames_last",
           "model_layout", "replay_buffer_for"]


def replay_buffer_for(env, observation_space, capacity: int, n_envs: int, gamma: float,
                      n_step: int = 1, *, priority_alpha: float | None = None,
                      priority_eps: float = 1e-6, hindsight: dict | None = None,
                      action_layout: tuple = ((), np.int32)) -> ReplayBuffer:
    """The replay buffer for transitions of `env`: each frame stored once when the env declares
    stacked frames (kerasrl.envs.atari), prioritized when `priority_alpha` is given, with goals
    replayed in hindsight when `hindsight` is (HindsightReplayBuffer's keywords). `action_layout`:
    (shape, dtype) of one action (`replay.action_layout`; Discrete by default; the prioritized
    and frame buffers take Discrete actions only)."""
    args = (capacity, n_envs, observation_space.shape, observation_space.dtype, gamma, n_step)
    actions = {"action_shape": action_layout[0], "action_dtype": action_layout[1]}
    if hindsight is not None:
        return HindsightReplayBuffer(*args, **hindsight, **actions)
    prioritized = {} if priority_alpha is None else {"alpha": priority_alpha, "eps": priority_eps}
    stacked = stacked_frames(env)
    if stacked is not None:  # Atari: Discrete actions
        frames = PrioritizedFrameStackReplayBuffer if prioritized else FrameStackReplayBuffer
        return frames(*args, **prioritized, padding=stacked[1])
    return PrioritizedReplayBuffer(*args, **prioritized) if prioritized else ReplayBuffer(*args, **actions)
