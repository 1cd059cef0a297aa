"""Agents: one algorithm per file."""

from kerasrl.agents.base import Agent
from kerasrl.agents.dqn import DQN
from kerasrl.agents.ppo import PPO

__all__ = ["DQN", "PPO", "Agent"]
