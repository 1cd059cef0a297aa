"""Drawing one game of an ops env, as its reference env draws it: numpy in, a frame out.

The ops envs draw nothing of their own. A classic-control env hands the game's state to its
Gymnasium reference env and calls that env's own `render` (`ReferenceRenderer`), so CartPole looks
like CartPole-v1 pixel for pixel, in `rgb_array` and in `human` mode; the ops Snake draws its
observation with the numpy Snake's `render_ansi` / `render_rgb` (`ObservationRenderer`).
Everything here is numpy: a frame is drawn from the observation the wrapper returned (and the
action that led to it), never from backend tensors.
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np


def reference_class(entry: str) -> type:
    """The env class an ops env names as its reference ("module:Class"), imported now."""
    from kerasrl import registry

    return registry.load(entry)


def check_render_mode(name: str, render_mode: str | None, modes) -> None:
    """A ValueError naming the modes when `render_mode` is not None and not one of `modes`."""
    if render_mode is not None and render_mode not in modes:
        raise ValueError(f"{name}: render_mode must be None or one of {list(modes)}, got {render_mode!r}"
                         + ("" if modes else f" ({name} has no reference env to draw it)") + ".")


class ReferenceRenderer:
    """Draws a game with its Gymnasium reference env's own `render`, in `render_mode`.

    `attributes(observation, action)` gives what that `render` reads (e.g. CartPole's `state`); they
    are set on the reference env before each frame. pygame (the `video` extra) is needed, as for
    the reference; it is checked here, where the env is made, not at the first frame.
    """

    def __init__(self, entry: str, render_mode: str, attributes: Callable[[np.ndarray, Any], dict]):
        try:
            import pygame  # noqa: F401
        except ImportError:
            raise gym.error.DependencyNotInstalled(
                f"pygame is not installed, and {entry.rpartition(':')[2]} draws with it: pip install "
                f"'kerasrl[video]' (or gymnasium[classic-control]).") from None
        self.reference = reference_class(entry)(render_mode=render_mode)
        self.attributes = attributes

    def __call__(self, observation: np.ndarray, action) -> np.ndarray | None:
        for name, value in self.attributes(np.asarray(observation), action).items():
            setattr(self.reference, name, value)
        return self.reference.render()

    def close(self) -> None:
        self.reference.close()


class ObservationRenderer:
    """Draws a game from its observation alone with `draw(observation)` (the action is not shown)."""

    def __init__(self, draw: Callable[[np.ndarray], Any]):
        self.draw = draw

    def __call__(self, observation: np.ndarray, action) -> Any:
        return self.draw(np.asarray(observation))

    def close(self) -> None:
        pass
