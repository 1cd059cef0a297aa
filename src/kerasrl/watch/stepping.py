"""The stepping loop of `kerasrl watch`: a policy plays an env, one `Step` record per frame.

Numpy only (no web server here): the server turns each record into an event for the page, and the
same loop serves any script that wants to show or check what a policy does.
"""

from __future__ import annotations

import base64
import itertools
import os
import struct
import sys
import zlib
from dataclasses import dataclass
from typing import Any, Iterator

import gymnasium as gym
import numpy as np

from kerasrl.envs import env_action
from kerasrl.envs.wrappers import has_action_masks_method
from kerasrl.masks import MASK_KEY

# Board cell codes of a Snake frame (what the page draws) and their colours, the game's own.
EMPTY, BODY, HEAD, FRUIT = 0, 1, 2, 3
BOARD_COLOURS = {"empty": (30, 30, 30), "body": (40, 170, 60), "head": (150, 240, 120),
                 "fruit": (220, 40, 40)}
"""RGB of each board cell kind, shared by the page (sent to it) and the tests that read its pixels."""


@dataclass(frozen=True)
class Step:
    """One frame of play: the state after `action`, and what the policy saw when it chose it.

    At the start of an episode (`step` 0) `action`, `outputs` and `reward` are None / 0.
    """

    episode: int
    """Episode number, from 0."""
    step: int
    """Env steps taken in this episode."""
    observation: np.ndarray
    """The observation now, as the env gave it."""
    reward: float
    """Reward of the last step (0 at the start)."""
    episode_return: float
    """Undiscounted return so far."""
    action: Any
    """The env action that led here (an int for Discrete spaces), None at the start."""
    outputs: np.ndarray | None
    """The policy's outputs where it chose `action`: Q-values, action probabilities or Gaussian means."""
    info: dict
    """The env's info (Snake's has `fruits_eaten`)."""
    ended: str | None
    """"terminated", "truncated" or "step limit" on an episode's last frame, else None."""

    @property
    def fruits(self) -> int | None:
        """Fruits eaten this episode (Snake), else None."""
        fruits = self.info.get("fruits_eaten")
        return None if fruits is None else int(fruits)


def output_kind(policy) -> str | None:
    """What `policy_outputs` gives for this policy: "q_values", "probabilities", "means" or None."""
    from kerasrl.policies import ActorCriticPolicy, QPolicy

    if isinstance(policy, QPolicy):
        return "q_values"
    if isinstance(policy, ActorCriticPolicy):
        return "probabilities" if policy.discrete else "means"
    return None


def policy_outputs(policy, observation: np.ndarray) -> np.ndarray | None:
    """The Q-values (QPolicy), action probabilities (discrete actor-critic) or Gaussian means of one
    observation, float64 (n,); None for a policy kind that gives none of them."""
    kind = output_kind(policy)
    if kind == "q_values":
        return np.asarray(policy.q_values(observation), dtype=np.float64)
    if kind is None:
        return None
    out = np.asarray(policy.distribution(observation), dtype=np.float64)
    if kind == "probabilities":
        from kerasrl.policies import softmax_log_probs

        return np.exp(softmax_log_probs(out[None]))[0]
    return out


def play_steps(policy, env: gym.Env, *, episodes: int | None = None, max_steps: int = 500,
               seed: int = 0, outputs: bool = True, first_episode: int = 0,
               rng: np.random.Generator | None = None) -> Iterator[Step]:
    """Play `policy` in `env`, yielding a `Step` at each reset and after each step: the one
    single-env episode loop of `kerasrl play`, `watch` and `evaluate`.

    Episodes are numbered from `first_episode`; episode k is reset with seed `seed + k`. One ends
    when the env terminates or truncates it, or after `max_steps` steps. `episodes=None` plays on
    forever. Deterministic, or with `rng` the policy's stochastic actions drawn from it. An env
    with action masks (`info["action_mask"]` or an `action_masks()` method) has the policy choose
    among the allowed actions. With `outputs`, each step also carries the policy's Q-values or
    action probabilities (one more forward pass per step).
    """
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}.")
    if episodes is not None and episodes < 1:
        raise ValueError(f"episodes must be at least 1 (or None: forever), got {episodes}.")
    from kerasrl.policies import episode_actor

    allowed_actions = mask_reader(env)
    for episode in (itertools.count(first_episode) if episodes is None
                    else range(first_episode, first_episode + episodes)):
        observation, info = env.reset(seed=seed + episode)
        episode_return, steps = 0.0, 0
        act = episode_actor(policy, rng)  # a recurrent policy's state carried through the episode
        yield Step(episode, 0, observation, 0.0, 0.0, None, None, dict(info), None)
        while True:
            values = policy_outputs(policy, observation) if outputs else None
            action = env_action(act(observation, allowed_actions(info)), env.action_space)
            observation, reward, terminated, truncated, info = env.step(action)
            episode_return += float(reward)
            steps += 1
            ended = ("terminated" if terminated else "truncated" if truncated
                     else "step limit" if steps >= max_steps else None)
            yield Step(episode, steps, observation, float(reward), episode_return, action, values,
                       dict(info), ended)
            if ended:
                break


def mask_reader(env: gym.Env):
    """`allowed(info) -> mask or None`: the actions `env` allows now, from `info["action_mask"]`
    (Gymnasium's convention) or its `action_masks()` method (sb3-contrib's), looked up once per
    env; None for an env without action masks."""
    method = env.get_wrapper_attr("action_masks") if has_action_masks_method(env) else None

    def allowed(info: dict) -> np.ndarray | None:
        if MASK_KEY in info:
            return np.asarray(info[MASK_KEY])
        return None if method is None else np.asarray(method())

    return allowed


# -- frames ----------------------------------------------------------------------------------------

def is_snake(env: gym.Env) -> bool:
    """Whether `env` is kerasrl's Snake, numpy or keras.ops (drawn as a board from its observation,
    not as pixels)."""
    from kerasrl.envs.ops.gym import OpsGymEnv
    from kerasrl.envs.ops.snake import Snake as OpsSnake
    from kerasrl.envs.snake import Snake

    env = env.unwrapped
    return isinstance(env, Snake) or isinstance(env, OpsGymEnv) and isinstance(env.ops_env, OpsSnake)


MODE_NAMES = {"ansi": "text", "rgb_array": "an image"}


def make_render_env(env_id: str, kwargs: dict | None, modes, use: str) -> gym.Env:
    """`env_id` made with the first of the render `modes` it has, and checked to draw a frame; or
    a ValueError naming its modes and `use` (what needs them), or an ImportError naming what to
    install. `kerasrl play`, `watch` and `evaluate --video` make their envs here."""
    kwargs = dict(kwargs or {})
    try:
        env = gym.make(env_id, **kwargs)
    except gym.error.Error as error:
        raise ValueError(f"Cannot make {env_id!r}: {error}. Pass --env with a registered Gymnasium "
                         f"id.") from error
    have = list(env.metadata.get("render_modes", []))
    env.close()
    mode = next((mode for mode in modes if mode in have), None)
    if mode is None:
        wanted = " or ".join(MODE_NAMES.get(mode, repr(mode)) for mode in modes)
        raise ValueError(f"{env_id} cannot draw itself as {wanted} (its render modes: "
                         f"{', '.join(have) or 'none'}), and {use}. For {env_id}, `kerasrl evaluate "
                         f"RUN` reports the returns.")
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        # No window can open here. MuJoCo tries a windowed OpenGL context first and fails; EGL
        # draws off-screen (read when its renderer is made). pygame's SDL probes for a display
        # and prints an error line; its dummy driver draws the same frames. Values the user set
        # are kept.
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    try:
        env = gym.make(env_id, render_mode=mode, **kwargs)
    except gym.error.DependencyNotInstalled as error:
        raise ImportError(f"{env_id} needs a drawing library to render: {error} (pip install "
                          f"'kerasrl[video]' brings pygame for classic control).") from error
    try:  # one frame now, so that a missing library or display is said before anything plays
        env.reset(seed=0)
        env.render()
    except gym.error.DependencyNotInstalled as error:
        env.close()
        raise ImportError(f"{env_id} needs a drawing library to render: {error} (pip install "
                          f"'kerasrl[video]' brings pygame for classic control).") from error
    except Exception as error:  # e.g. MuJoCo without an OpenGL context: say which and how
        env.close()
        hint = (" On a machine without a display, MuJoCo draws with MUJOCO_GL=egl (or osmesa) set "
                "in the environment." if "mujoco" in type(error).__module__.lower()
                or "OpenGL" in str(error) else "")
        raise ValueError(f"{env_id} could not draw a frame with render_mode={mode!r}: "
                         f"{type(error).__name__}: {error}.{hint}") from error
    return env


def make_watch_env(env_id: str, kwargs: dict | None = None) -> gym.Env:
    """`env_id` made to be watched: Snake as it is (the page draws its board), any other env with
    render_mode="rgb_array", or a clear error naming what is missing."""
    try:
        env = gym.make(env_id, **dict(kwargs or {}))
    except gym.error.Error as error:
        raise ValueError(f"Cannot make {env_id!r} to watch: {error}. Pass --env with a registered "
                         f"Gymnasium id.") from error
    if is_snake(env):
        return env
    env.close()
    return make_render_env(env_id, kwargs, ("rgb_array",),
                           "`kerasrl watch` shows envs with the 'rgb_array' render mode")


def board_cells(observation: np.ndarray) -> np.ndarray:
    """Snake's observation (height, width, 2) as cell codes (height, width) int8: EMPTY, BODY,
    HEAD, FRUIT."""
    observation = np.asarray(observation)
    if observation.ndim != 3 or observation.shape[-1] != 2:
        raise ValueError(f"Expected a Snake observation (height, width, 2), got {observation.shape}.")
    snake, fruit = observation[..., 0], observation[..., 1]
    cells = np.full(snake.shape, EMPTY, dtype=np.int8)  # (height, width)
    cells[fruit == 1] = FRUIT
    cells[snake == 1] = BODY
    cells[snake == 2] = HEAD
    return cells


def png_bytes(image: np.ndarray) -> bytes:
    """A PNG file of an RGB or RGBA uint8 image (height, width, 3 or 4), written with zlib alone
    (no imaging library needed to watch)."""
    image = np.asarray(image)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] not in (3, 4):
        raise ValueError(f"Expected an RGB(A) uint8 image (height, width, 3 or 4), got "
                         f"{image.dtype} {image.shape}: render_mode='rgb_array' should give one.")
    height, width, channels = image.shape
    # Each row is preceded by its filter type, 0 (none).
    rows = np.concatenate([np.zeros((height, 1), np.uint8),
                           np.ascontiguousarray(image).reshape(height, width * channels)], axis=1)

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", width, height, 8, 2 if channels == 3 else 6, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows.tobytes(), 3)) + chunk(b"IEND", b""))


def frame_of(env: gym.Env, step: Step, snake: bool | None = None) -> dict:
    """The page's picture of `step`: {"kind": "board", "rows", "cols", "cells"} for Snake, else
    {"kind": "image", "png": base64 PNG of env.render()} (the env must render "rgb_array")."""
    if snake if snake is not None else is_snake(env):
        cells = board_cells(step.observation)
        return {"kind": "board", "rows": int(cells.shape[0]), "cols": int(cells.shape[1]),
                "cells": cells.ravel().tolist()}
    image = env.render()
    if image is None:
        raise ValueError(f"{env} rendered nothing: make it with render_mode='rgb_array' "
                         f"(kerasrl.watch.make_watch_env does).")
    return {"kind": "image", "png": base64.b64encode(png_bytes(np.asarray(image))).decode("ascii")}


def step_event(env: gym.Env, step: Step, snake: bool | None = None) -> dict:
    """`step` as the JSON-ready event the page shows: counters, action, outputs and the frame."""
    action = step.action
    if action is not None and not isinstance(action, int):
        action = np.asarray(action, dtype=np.float64).round(4).tolist()
    return {
        "episode": step.episode, "step": step.step, "reward": round(step.reward, 6),
        "return": round(step.episode_return, 6), "fruits": step.fruits, "action": action,
        "outputs": None if step.outputs is None else [round(float(v), 6) for v in step.outputs],
        "ended": step.ended, "frame": frame_of(env, step, snake),
    }
