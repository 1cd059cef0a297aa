"""Snake in keras.ops: the rules of `kerasrl.envs.snake` (SNAKE.md), exactly, batched.

The snake is kept as a grid of remaining lifetimes: a body square holds how many more plain moves
it stays covered (the head holds the length, the tail 1). A plain move decrements every square
and writes the length at the new head, so the tail square empties; eating skips the decrement, so
the snake grows. This needs no ring buffer, and every step is the same array operations.

Random draws follow the numpy Snake: one draw per choice, index `int(u * n)` with
u = k / 2**bits (see `base.random_index`), in the same order (start row, start column, then one
per fruit placed), so a numpy Snake whose generator returns those u plays the same games.
"""

from __future__ import annotations

import dataclasses
import operator

import numpy as np
from gymnasium import spaces

from kerasrl.envs.ops.base import EnvParams, OpsEnv, random_index
from kerasrl.envs.snake import DEATH_REWARD, FRUIT_REWARD, STEP_REWARD


@dataclasses.dataclass(frozen=True, kw_only=True)
class SnakeParams(EnvParams):
    """Snake's parameters beyond the board (which fixes shapes and so belongs to the env)."""

    max_steps_without_fruit: int | None = None
    """Truncate after this many steps without eating; None (the reference) for no limit."""


# Per heading (right, up, left, down): row and column steps; heading change per action.
_D_ROW = (0, -1, 0, 1)
_D_COLUMN = (1, 0, -1, 0)
_TURNS = (0, 1, 3)


class Snake(OpsEnv):
    """Snake on a `height` x `width` board (SNAKE.md): actions 0 straight, 1 left, 2 right.

    Observation float32 (height, width, 2): channel 0 is 2 at the head and 1 on the body, channel
    1 is 1 on fruits. Rewards -10 for dying (terminated), +10 for a fruit, -0.2 otherwise.
    `info["fruits_eaten"]` counts the fruits of the episode that the step ended or continued.
    """

    name = "Snake"
    default_params = SnakeParams()
    reference = "kerasrl.envs.snake:Snake"

    def __init__(self, *, height: int = 9, width: int = 9, n_fruits: int = 1, initial_length: int = 2):
        values = {}
        for key, value in (("height", height), ("width", width), ("n_fruits", n_fruits),
                           ("initial_length", initial_length)):
            try:
                value = operator.index(value)
            except TypeError:
                raise ValueError(f"Snake: {key} must be a positive integer, got {value!r}.") from None
            if value <= 0:
                raise ValueError(f"Snake: {key} must be positive, got {value}.")
            values[key] = value
        self.height, self.width = values["height"], values["width"]
        self.n_fruits, self.initial_length = values["n_fruits"], values["initial_length"]
        self.cells = self.height * self.width
        if self.initial_length > self.width:
            raise ValueError(f"Snake: initial_length={self.initial_length} does not fit on a board of width "
                             f"{self.width} (the snake starts horizontal); use initial_length <= width.")
        if self.n_fruits > self.cells - self.initial_length:
            raise ValueError(f"Snake: n_fruits={self.n_fruits} is more than the free squares at the start; use "
                             "fewer fruits or a bigger board.")
        # k * n must fit in an int32 for every n <= cells.
        self.bits = min(24, 31 - self.cells.bit_length())
        if self.bits < 8:
            raise ValueError(f"Snake: a {self.height}x{self.width} board is too big for the int32 draws; use at "
                             "most 2**22 squares.")
        self.observation_space = spaces.Box(0.0, 2.0, (self.height, self.width, 2), np.float32)
        self.action_space = spaces.Discrete(3)
        cell = np.arange(self.cells, dtype=np.int32)
        self._row_of, self._column_of = cell // self.width, cell % self.width  # (cells,)

    def settings(self) -> tuple:
        """The board and the snake's start (the rest is derived from them)."""
        return (self.height, self.width, self.n_fruits, self.initial_length)

    def _observation(self, state):
        from keras import ops

        cells = ops.arange(self.cells, dtype="int32")
        head = ops.cast(cells[None, :] == state["head"][:, None], "float32")
        body = ops.cast(state["life"] > 0, "float32") + head
        obs = ops.stack([body, ops.cast(state["fruit"], "float32")], axis=-1)
        return ops.reshape(obs, (-1, self.height, self.width, 2))

    def _place_fruit(self, rng, life, fruit, where):
        """One fruit on the k-th free square of each game in `where` that has a free square."""
        from keras import ops

        free = ops.cast((life == 0) & (fruit == 0), "int32")  # (n, cells)
        n_free = ops.sum(free, axis=1)
        place = where & (n_free > 0)
        drawn, k = random_index(rng, n_free, self.bits)
        square = ops.argmax(ops.cast(ops.cumsum(free, axis=1) > k[:, None], "int32"), axis=1)
        hit = (ops.arange(self.cells, dtype="int32")[None, :] == ops.cast(square, "int32")[:, None])
        fruit = ops.where(hit & place[:, None], 1, fruit)
        return ops.where(place, drawn, rng), fruit

    def reset_env(self, rng, params):
        from keras import ops

        length = self.initial_length
        rng, row = random_index(rng, self.height, self.bits)
        rng, column = random_index(rng, self.width - length + 1, self.bits)
        column = column + (length - 1)
        row_of = ops.convert_to_tensor(self._row_of)[None, :]
        column_of = ops.convert_to_tensor(self._column_of)[None, :]
        on_snake = (row_of == row[:, None]) & (column_of <= column[:, None]) & (column_of > column[:, None] - length)
        life = ops.where(on_snake, length - (column[:, None] - column_of), 0)  # (n, cells) int32
        fruit = ops.zeros_like(life)
        everywhere = ops.ones_like(row, dtype="bool")
        for _ in range(self.n_fruits):
            rng, fruit = self._place_fruit(rng, life, fruit, everywhere)
        zeros = ops.zeros_like(row)
        state = {
            "life": life, "fruit": fruit, "head": row * self.width + column, "heading": zeros,
            "length": zeros + length, "steps_without_fruit": zeros, "fruits_eaten": zeros,
        }
        return self._observation(state), state, rng

    def step_env(self, state, action, params):
        from keras import ops

        action = ops.cast(action, "int32")
        heading = ops.bitwise_and(state["heading"] + ops.take(ops.convert_to_tensor(np.int32(_TURNS)), action), 3)
        head = state["head"]
        row = head // self.width + ops.take(ops.convert_to_tensor(np.int32(_D_ROW)), heading)
        column = head % self.width + ops.take(ops.convert_to_tensor(np.int32(_D_COLUMN)), heading)
        off_board = (row < 0) | (row >= self.height) | (column < 0) | (column >= self.width)
        new_head = ops.clip(row, 0, self.height - 1) * self.width + ops.clip(column, 0, self.width - 1)
        at_new = ops.arange(self.cells, dtype="int32")[None, :] == new_head[:, None]  # (n, cells)
        life, fruit = state["life"], state["fruit"]
        # The tail counts: it has not moved away yet when the head arrives.
        covered = ops.any(at_new & (life > 0), axis=1)
        dead = off_board | covered
        alive = ops.logical_not(dead)
        eaten = alive & ops.any(at_new & (fruit > 0), axis=1)
        moving = alive & ops.logical_not(eaten)

        length = state["length"] + ops.cast(eaten, "int32")
        life = ops.where(moving[:, None], ops.maximum(life - 1, 0), life)
        life = ops.where(at_new & alive[:, None], length[:, None], life)
        fruit = ops.where(at_new & eaten[:, None], 0, fruit)
        rng, fruit = self._place_fruit(state["rng"], life, fruit, eaten)

        steps = ops.where(eaten, 0, state["steps_without_fruit"] + ops.cast(moving, "int32"))
        terminated = dead | (eaten & (length == self.cells))
        if params.max_steps_without_fruit is None:
            truncated = ops.zeros_like(terminated)
        else:
            truncated = moving & (steps >= params.max_steps_without_fruit)
        reward = ops.where(dead, DEATH_REWARD, ops.where(eaten, FRUIT_REWARD, STEP_REWARD))
        state = dict(state, life=life, fruit=fruit, head=ops.where(alive, new_head, head), heading=heading,
                     length=length, steps_without_fruit=steps,
                     fruits_eaten=state["fruits_eaten"] + ops.cast(eaten, "int32"), rng=rng)
        return self._observation(state), state, reward, terminated, truncated

    def info(self, state):
        return {"fruits_eaten": state["fruits_eaten"]}

    def renderer(self, render_mode, params=None):
        """Draws a game's observation as the numpy Snake draws its own (`render_ansi`, `render_rgb`)."""
        from kerasrl.envs.ops.render import ObservationRenderer, check_render_mode
        from kerasrl.envs.snake import render_ansi, render_rgb

        check_render_mode(self.name, render_mode, self.metadata["render_modes"])
        return ObservationRenderer(render_ansi if render_mode == "ansi" else render_rgb)
