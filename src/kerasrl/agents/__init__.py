"""Agents: one algorithm per file."""

from kerasrl.agents.base import Agent
from kerasrl.agents.dqn import DQN
from kerasrl.agents.ppo import PPO
from kerasrl.agents.sarsa import SARSA, ExpectedSARSA

__all__ = ["DQN", "PPO", "SARSA", "Agent", "ExpectedSARSA"]
