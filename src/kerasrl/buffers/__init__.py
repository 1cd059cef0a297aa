"""Numpy storage for experience: replay for off-policy agents, rollouts for on-policy ones."""

from kerasrl.buffers.frame_stack import (FrameStackReplayBuffer,
                                         PrioritizedFrameStackReplayBuffer)
from kerasrl.buffers.prioritized import PrioritizedReplayBuffer, SumTree
from kerasrl.buffers.replay import ReplayBuffer
from kerasrl.buffers.rollout import RolloutBuffer

__all__ = ["FrameStackReplayBuffer", "PrioritizedFrameStackReplayBuffer", "PrioritizedReplayBuffer",
           "ReplayBuffer", "RolloutBuffer", "SumTree"]
