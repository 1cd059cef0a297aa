"""Agents: one algorithm per file."""

from kerasrl.agents.base import Agent
from kerasrl.agents.dqn import DQN

__all__ = ["DQN", "Agent"]
