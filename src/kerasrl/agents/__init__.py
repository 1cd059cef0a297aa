"""Agents: one algorithm per file."""

from kerasrl.agents.a2c import A2C
from kerasrl.agents.base import Agent
from kerasrl.agents.ddpg import DDPG
from kerasrl.agents.dqn import DQN
from kerasrl.agents.ppo import PPO
from kerasrl.agents.sac import SAC
from kerasrl.agents.sarsa import SARSA, ExpectedSARSA
from kerasrl.agents.td3 import TD3

__all__ = ["A2C", "DDPG", "DQN", "PPO", "SAC", "SARSA", "TD3", "Agent", "ExpectedSARSA"]
