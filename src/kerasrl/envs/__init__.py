"""Environments: vector envs with the numpy boundary, wrappers, and the built-in Snake game."""

from kerasrl.envs.snake import Snake, register_envs
from kerasrl.envs.snake_vector import SnakeVectorEnv
from kerasrl.envs.vector import (EVALUATION_STEP_CAP, describe, env_action, env_factory, env_with_kwargs,
                                 episode_extras, evaluation_env, final_observations, make_vec_env,
                                 numeric_figures)
from kerasrl.envs.wrappers import ActionRepeat, ApiCheck, NumpyBoundary, RandomStartSteps, as_numpy
from kerasrl.envs.ops.gym import register_ops_envs
from kerasrl.envs.partial import register_partial_envs
from kerasrl.envs.goals import register_goal_envs
from kerasrl.envs.atari import register_atari_envs

register_envs()
register_ops_envs()  # kerasrl/OpsCartPole-v1 and the other keras.ops envs; nothing imported until made
register_partial_envs()  # kerasrl/CartPoleNoVel-v1
register_goal_envs()  # kerasrl/BitFlipping-v0
register_atari_envs()  # kerasrl/Breakout-v5 ...; ale-py imported when one is made

__all__ = [
    "EVALUATION_STEP_CAP",
    "ActionRepeat",
    "ApiCheck",
    "NumpyBoundary",
    "RandomStartSteps",
    "Snake",
    "SnakeVectorEnv",
    "as_numpy",
    "describe",
    "env_action",
    "env_factory",
    "env_with_kwargs",
    "episode_extras",
    "evaluation_env",
    "final_observations",
    "make_vec_env",
    "numeric_figures",
    "register_envs",
]
