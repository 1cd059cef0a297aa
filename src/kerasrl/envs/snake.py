"""The Snake game of the TensorFlow.js ``snake-dqn`` example: its rules, its rendering, and one game.

Two independent implementations of the same rules (see ``SNAKE.md``):

- :class:`Snake`, here, is one game in plain Python over a deque, written to be read;
- :class:`kerasrl.envs.snake_vector.SnakeVectorEnv` steps ``num_envs`` games at once as numpy
  arrays, with no Python loop over games on the per-step path.

The tests check one against the other. For that, both draw their randomness the same way: every
game owns a ``numpy.random.Generator`` (game ``i`` of a vector env seeded with ``seed + i`` is the
single game seeded with ``seed + i``), and each random choice is one ``random()`` double ``u``
turned into an index ``int(u * n)``, drawn in the same order: start row, start column, then one
draw per fruit placed. Board squares are numbered row-major, ``p = row * width + column``, and a
fruit goes to the ``int(u * n_free)``-th free square in that order.
"""

from __future__ import annotations

import operator
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from kerasrl.registry import ENV_IDS, SNAKE_ID

__all__ = [
    "DEATH_REWARD",
    "FRUIT_REWARD",
    "REFERENCE_MIN_BOARD",
    "STEP_REWARD",
    "Snake",
    "register_envs",
]

DEATH_REWARD = -10.0
FRUIT_REWARD = 10.0
STEP_REWARD = -0.2
REFERENCE_MIN_BOARD = 7
"""Smallest height and width the reference network accepts (three valid 3x3 convolutions)."""

# Headings, numbered so that turning left is +1 and turning right is -1 (mod 4).
RIGHT, UP, LEFT, DOWN = 0, 1, 2, 3
HEADING_NAMES = ("right", "up", "left", "down")
_MOVES = ((0, 1), (-1, 0), (0, -1), (1, 0))  # (d_row, d_column) per heading
_TURNS = (0, 1, 3)  # heading change for actions 0 straight, 1 left, 2 right

_CELL_PIXELS = 10
_COLOURS = {  # RGB for rgb_array rendering
    "empty": (30, 30, 30),
    "body": (40, 170, 60),
    "head": (150, 240, 120),
    "fruit": (220, 40, 40),
}


def _check_params(height, width, n_fruits, initial_length, max_steps_without_fruit, render_mode, modes):
    """Validates the game parameters; returns them as Python ints."""
    values = {}
    for name, value in (
        ("height", height),
        ("width", width),
        ("n_fruits", n_fruits),
        ("initial_length", initial_length),
    ):
        try:
            value = operator.index(value)
        except TypeError:
            raise ValueError(f"Snake: {name} must be an integer, got {value!r}.") from None
        if value <= 0:
            raise ValueError(f"Snake: {name} must be positive, got {value}.")
        values[name] = value
    if values["initial_length"] > values["width"]:
        raise ValueError(
            f"Snake: initial_length={values['initial_length']} does not fit on a board of width "
            f"{values['width']} (the snake starts horizontal); use initial_length <= width."
        )
    free = values["height"] * values["width"] - values["initial_length"]
    if values["n_fruits"] > free:
        raise ValueError(
            f"Snake: n_fruits={values['n_fruits']} is more than the {free} free squares at the start "
            f"({values['height']}x{values['width']} board minus a snake of {values['initial_length']}); "
            "use fewer fruits or a bigger board."
        )
    if max_steps_without_fruit is not None:
        try:
            max_steps_without_fruit = operator.index(max_steps_without_fruit)
        except TypeError:
            raise ValueError(
                f"Snake: max_steps_without_fruit must be None or a positive integer, got {max_steps_without_fruit!r}."
            ) from None
        if max_steps_without_fruit <= 0:
            raise ValueError(
                f"Snake: max_steps_without_fruit must be None (no limit) or positive, got {max_steps_without_fruit}."
            )
    if render_mode is not None and render_mode not in modes:
        raise ValueError(f"Snake: render_mode must be None or one of {modes}, got {render_mode!r}.")
    return values, max_steps_without_fruit


def render_ansi(observation: np.ndarray) -> str:
    """Text board of one observation (height, width, 2): ``H`` head, ``o`` body, ``*`` fruit, ``.`` empty."""
    snake, fruit = observation[..., 0], observation[..., 1]
    chars = np.full(snake.shape, ".", dtype="<U1")
    chars[fruit == 1] = "*"
    chars[snake == 1] = "o"
    chars[snake == 2] = "H"
    return "\n".join("".join(row) for row in chars) + "\n"


def render_rgb(observation: np.ndarray, cell_pixels: int = _CELL_PIXELS) -> np.ndarray:
    """uint8 image (height * cell_pixels, width * cell_pixels, 3) of one observation."""
    snake, fruit = observation[..., 0], observation[..., 1]
    image = np.empty((*snake.shape, 3), dtype=np.uint8)  # (height, width, 3)
    image[...] = _COLOURS["empty"]
    image[fruit == 1] = _COLOURS["fruit"]
    image[snake == 1] = _COLOURS["body"]
    image[snake == 2] = _COLOURS["head"]
    return np.repeat(np.repeat(image, cell_pixels, axis=0), cell_pixels, axis=1)


class Snake(gym.Env):
    """One game of Snake, as in the tfjs ``snake-dqn`` example.

    Observation: float32 (height, width, 2); channel 0 is 2 at the head and 1 on the rest of the
    snake, channel 1 is 1 on fruits. Actions: 0 straight, 1 turn left, 2 turn right. Rewards: -10
    for dying (terminated), +10 for a fruit, -0.2 otherwise. Filling the board terminates with the
    fruit reward. With ``max_steps_without_fruit`` set, that many steps without eating truncate.
    ``info["fruits_eaten"]`` counts the fruits eaten so far this episode.

    ``mask_deadly_moves=True`` adds ``info["action_mask"]`` (int8, 3 flags, 1 = allowed): the moves
    that die at once (off the board, or onto the snake, tail included) are masked; when every move
    dies none is masked (the agent cannot act on an empty mask, and the game ends either way).
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 10}

    def __init__(
        self,
        *,
        height: int = 9,
        width: int = 9,
        n_fruits: int = 1,
        initial_length: int = 2,
        max_steps_without_fruit: int | None = None,
        render_mode: str | None = None,
        mask_deadly_moves: bool = False,
    ):
        values, max_steps = _check_params(
            height, width, n_fruits, initial_length, max_steps_without_fruit, render_mode,
            self.metadata["render_modes"],
        )
        self.height = values["height"]
        self.width = values["width"]
        self.n_fruits = values["n_fruits"]
        self.initial_length = values["initial_length"]
        self.max_steps_without_fruit = max_steps
        self.render_mode = render_mode
        self.mask_deadly_moves = bool(mask_deadly_moves)
        self.observation_space = spaces.Box(0.0, 2.0, (self.height, self.width, 2), np.float32)
        self.action_space = spaces.Discrete(3)
        self._snake: deque[tuple[int, int]] = deque()  # (row, column) squares, head first
        self._heading = RIGHT
        self._fruits: list[tuple[int, int]] = []
        self._fruits_eaten = 0
        self._steps_without_fruit = 0

    def _draw_index(self, n: int) -> int:
        """A uniform index in [0, n), from one double of the game's generator (see module docstring)."""
        return int(self.np_random.random() * n)

    def _place_fruit(self) -> None:
        """Puts a fruit on a uniformly random free square; does nothing (draws nothing) if none is free."""
        taken = set(self._snake) | set(self._fruits)
        free = [(r, c) for r in range(self.height) for c in range(self.width) if (r, c) not in taken]
        if free:
            self._fruits.append(free[self._draw_index(len(free))])

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Starts a game: a horizontal snake heading right in a random row, then the fruits."""
        super().reset(seed=seed)
        row = self._draw_index(self.height)
        column = self.initial_length - 1 + self._draw_index(self.width - self.initial_length + 1)
        self._snake = deque((row, column - i) for i in range(self.initial_length))
        self._heading = RIGHT
        self._fruits = []
        for _ in range(self.n_fruits):
            self._place_fruit()
        self._fruits_eaten = 0
        self._steps_without_fruit = 0
        return self._observation(), self._info()

    def step(self, action):
        """Turns, moves the head one square, and applies death, fruit or plain move."""
        if not self.action_space.contains(action):
            raise ValueError(f"Snake: action must be 0 (straight), 1 (left) or 2 (right), got {action!r}.")
        self._heading = (self._heading + _TURNS[int(action)]) % 4
        d_row, d_column = _MOVES[self._heading]
        head_row, head_column = self._snake[0]
        new_head = (head_row + d_row, head_column + d_column)

        off_board = not (0 <= new_head[0] < self.height and 0 <= new_head[1] < self.width)
        # The tail counts: it has not moved away yet when the head arrives.
        if off_board or new_head in self._snake:
            return self._observation(), DEATH_REWARD, True, False, self._info()

        self._snake.appendleft(new_head)
        terminated = False
        if new_head in self._fruits:
            self._fruits.remove(new_head)
            self._fruits_eaten += 1
            self._steps_without_fruit = 0
            self._place_fruit()  # the tail stays: the snake grows
            reward = FRUIT_REWARD
            terminated = len(self._snake) == self.height * self.width
        else:
            self._snake.pop()
            self._steps_without_fruit += 1
            reward = STEP_REWARD
        truncated = (
            not terminated
            and self.max_steps_without_fruit is not None
            and self._steps_without_fruit >= self.max_steps_without_fruit
        )
        return self._observation(), reward, terminated, truncated, self._info()

    def _observation(self) -> np.ndarray:
        obs = np.zeros((self.height, self.width, 2), dtype=np.float32)
        for row, column in self._snake:
            obs[row, column, 0] = 1.0
        head_row, head_column = self._snake[0]
        obs[head_row, head_column, 0] = 2.0
        for row, column in self._fruits:
            obs[row, column, 1] = 1.0
        return obs

    def _info(self) -> dict[str, Any]:
        if self.mask_deadly_moves:
            return {"fruits_eaten": self._fruits_eaten, "action_mask": self._deadly_moves_mask()}
        return {"fruits_eaten": self._fruits_eaten}

    def _deadly_moves_mask(self) -> np.ndarray:
        """1 for each action (straight, left, right) that does not die at once; all 1 if all do."""
        mask = np.ones(3, dtype=np.int8)
        head_row, head_column = self._snake[0]
        for action, turn in enumerate(_TURNS):
            d_row, d_column = _MOVES[(self._heading + turn) % 4]
            square = (head_row + d_row, head_column + d_column)
            inside = 0 <= square[0] < self.height and 0 <= square[1] < self.width
            if not inside or square in self._snake:
                mask[action] = 0
        return mask if mask.any() else np.ones(3, dtype=np.int8)

    def render(self):
        """The board as text (``"ansi"``) or as an RGB image (``"rgb_array"``); None without a render mode."""
        if self.render_mode == "ansi":
            return render_ansi(self._observation())
        if self.render_mode == "rgb_array":
            return render_rgb(self._observation())
        return None

    def _set_state(self, body, heading, fruits, *, fruits_eaten=0, steps_without_fruit=0) -> None:
        """For tests: puts the game in a given state.

        ``body`` is a list of (row, column) squares, head first; ``heading`` a name in
        ``HEADING_NAMES`` or its index; ``fruits`` a list of (row, column) squares.
        """
        if isinstance(heading, str):
            heading = HEADING_NAMES.index(heading)
        self._snake = deque(tuple(square) for square in body)
        self._heading = heading
        self._fruits = [tuple(square) for square in fruits]
        self._fruits_eaten = fruits_eaten
        self._steps_without_fruit = steps_without_fruit


def register_envs() -> None:
    """Registers ``kerasrl/Snake-v0`` (9x9, one fruit, length 2, no step limit); safe to call twice.

    ``gymnasium.make("kerasrl/Snake-v0")`` gives a :class:`Snake`;
    ``gymnasium.make_vec("kerasrl/Snake-v0", num_envs=..., vectorization_mode="vector_entry_point")``
    gives a :class:`~kerasrl.envs.snake_vector.SnakeVectorEnv`. Its ``autoreset_mode`` goes in the keyword arguments of
    ``make_vec`` (Gymnasium refuses ``vector_kwargs`` for a vector entry point); with
    ``vectorization_mode="sync"`` it goes in ``vector_kwargs`` as usual.
    """
    if SNAKE_ID not in gym.registry:
        gym.register(id=SNAKE_ID, **ENV_IDS[SNAKE_ID])
