"""Environments: the Snake game of the tfjs snake-dqn example, single and vectorized."""

from kerasrl.envs.snake import Snake, SnakeVectorEnv, register_envs

register_envs()

__all__ = ["Snake", "SnakeVectorEnv", "register_envs"]
