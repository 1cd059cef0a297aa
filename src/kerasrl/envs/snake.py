"""The Snake game of the TensorFlow.js ``snake-dqn`` example, as a single game and a vector of games.

Two independent implementations of the same rules (see ``SNAKE.md``):

- :class:`Snake` is one game in plain Python over a deque, written to be read;
- :class:`SnakeVectorEnv` steps ``num_envs`` games at once as numpy arrays, with no Python loop
  over games on the per-step path.

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
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from kerasrl.registry import ENV_IDS, SNAKE_ID

__all__ = [
    "DEATH_REWARD",
    "FRUIT_REWARD",
    "REFERENCE_MIN_BOARD",
    "STEP_REWARD",
    "Snake",
    "SnakeVectorEnv",
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


class SnakeVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` Snake games stepped together as numpy arrays, with auto-reset.

    Same rules, observations, rewards and randomness as ``num_envs`` :class:`Snake` games seeded
    ``seed, seed + 1, ...`` (as ``SyncVectorEnv`` seeds them), in either Gymnasium auto-reset mode:

    - ``AutoresetMode.NEXT_STEP`` (default): the step after a game ends resets it, returning its
      first observation with reward 0 and no termination or truncation;
    - ``AutoresetMode.SAME_STEP``: a game that ends is reset at once; the returned observation is
      the new game's, the last one is in ``info["final_obs"]`` (object array, None elsewhere, mask
      ``info["_final_obs"]``) and its info in ``info["final_info"]`` (mask ``info["_final_info"]``).

    State per game: the observation itself (which doubles as the occupancy grid), a ring buffer of
    the snake's squares, the head square, heading, length and counters. A step is a fixed number
    of array operations over all games; fruit placement and resets touch only the games concerned.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 10, "autoreset_mode": AutoresetMode.NEXT_STEP}

    _RANDOM_BLOCK = 64  # doubles pre-drawn per game; refilled from the game's generator when low

    def __init__(
        self,
        num_envs: int = 1,
        *,
        height: int = 9,
        width: int = 9,
        n_fruits: int = 1,
        initial_length: int = 2,
        max_steps_without_fruit: int | None = None,
        render_mode: str | None = None,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
        mask_deadly_moves: bool = False,
    ):
        values, max_steps = _check_params(
            height, width, n_fruits, initial_length, max_steps_without_fruit, render_mode,
            self.metadata["render_modes"],
        )
        try:
            num_envs = operator.index(num_envs)
        except TypeError:
            raise ValueError(f"SnakeVectorEnv: num_envs must be a positive integer, got {num_envs!r}.") from None
        if num_envs <= 0:
            raise ValueError(f"SnakeVectorEnv: num_envs must be positive, got {num_envs}.")
        try:
            autoreset_mode = AutoresetMode(autoreset_mode)
        except ValueError:
            raise ValueError(
                f"SnakeVectorEnv: autoreset_mode must be AutoresetMode.NEXT_STEP or AutoresetMode.SAME_STEP, "
                f"got {autoreset_mode!r}."
            ) from None
        if autoreset_mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ValueError(
                f"SnakeVectorEnv: autoreset_mode {autoreset_mode} is not supported; use NEXT_STEP or SAME_STEP."
            )

        self.num_envs = num_envs
        self.height = values["height"]
        self.width = values["width"]
        self.n_fruits = values["n_fruits"]
        self.initial_length = values["initial_length"]
        self.max_steps_without_fruit = max_steps
        self.render_mode = render_mode
        self.autoreset_mode = autoreset_mode
        self.mask_deadly_moves = bool(mask_deadly_moves)
        self.metadata = {**type(self).metadata, "autoreset_mode": autoreset_mode}
        self.single_observation_space = spaces.Box(0.0, 2.0, (self.height, self.width, 2), np.float32)
        self.single_action_space = spaces.Discrete(3)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

        n, cells = num_envs, self.height * self.width
        self._cells = cells
        # Flat index of square p, channel k of game i in the observation buffer: i * 2 * cells + 2 * p + k.
        # Squares are kept as q = 2 * p, the flat offset of their channel 0 inside a game's row.
        self._obs = np.zeros((n, 2 * cells), dtype=np.float32)  # (num_envs, height * width * 2)
        self._obs_flat = self._obs.reshape(-1)
        self._obs_base = np.arange(n, dtype=np.int64) * (2 * cells)  # (num_envs,)
        self._body = np.zeros((n, cells), dtype=np.int64)  # (num_envs, cells) ring buffer of q, tail to head
        self._body_flat = self._body.reshape(-1)
        self._body_base = np.arange(n, dtype=np.int64) * cells  # (num_envs,)
        self._head_ptr = np.zeros(n, dtype=np.int64)  # ring position of the head
        self._tail_ptr = np.zeros(n, dtype=np.int64)  # ring position of the tail
        self._head_q = np.zeros(n, dtype=np.int64)  # q of the head
        self._heading = np.zeros(n, dtype=np.int64)
        self._length = np.zeros(n, dtype=np.int64)
        self._steps_without_fruit = np.zeros(n, dtype=np.int64)
        self._fruits_eaten = np.zeros(n, dtype=np.int64)
        self._autoreset = np.zeros(n, dtype=bool)
        self._all_true = np.ones(n, dtype=bool)

        # _next_q[2 * q + heading] = q of the square ahead, or q itself when that is off the board:
        # the head square is never empty, so a move off the board reads as a collision.
        next_q = np.empty((cells, 4), dtype=np.int64)  # (cells, 4)
        rows, columns = np.divmod(np.arange(cells), self.width)
        for heading, (d_row, d_column) in enumerate(_MOVES):
            r, c = rows + d_row, columns + d_column
            inside = (r >= 0) & (r < self.height) & (c >= 0) & (c < self.width)
            next_q[:, heading] = np.where(inside, 2 * (r * self.width + c), 2 * np.arange(cells))
        self._next_q = next_q.reshape(-1)
        self._turns = np.array(_TURNS, dtype=np.int64)
        self._rewards_by_outcome = np.array([STEP_REWARD, FRUIT_REWARD, DEATH_REWARD, DEATH_REWARD])

        self._generators: list[np.random.Generator] | None = None
        self._random = np.zeros((n, self._RANDOM_BLOCK), dtype=np.float64)  # (num_envs, block)
        self._random_ptr = np.zeros(n, dtype=np.int64)
        # A step uses at most one fruit draw, then (same-step reset) 2 + n_fruits draws.
        self._max_draws = 3 + self.n_fruits
        if self._max_draws > self._RANDOM_BLOCK:
            self._random = np.zeros((n, 2 * self._max_draws), dtype=np.float64)

    # Randomness ---------------------------------------------------------------------------------
    def _seed(self, seed) -> None:
        if seed is None:
            seeds = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(
                    f"SnakeVectorEnv: a list of seeds must have num_envs={self.num_envs} entries, got {len(seeds)}."
                )
        self._generators = [seeding.np_random(s)[0] for s in seeds]
        block = self._random.shape[1]
        for i, generator in enumerate(self._generators):
            self._random[i] = generator.random(block)
        self._random_ptr[:] = 0

    def _refill_random(self) -> None:
        """Tops up the pre-drawn doubles of games about to run out (a loop over those few games only)."""
        block = self._random.shape[1]
        low = np.flatnonzero(self._random_ptr > block - self._max_draws)
        for i in low:
            ptr = self._random_ptr[i]
            left = block - ptr
            self._random[i, :left] = self._random[i, ptr:]
            self._random[i, left:] = self._generators[i].random(block - left)
            self._random_ptr[i] = 0

    def _draw_index(self, games: np.ndarray, n) -> np.ndarray:
        """For each game in ``games``, a uniform index in [0, n), exactly as :meth:`Snake._draw_index`."""
        u = self._random[games, self._random_ptr[games]]
        self._random_ptr[games] += 1
        return (u * n).astype(np.int64)

    # Game logic ---------------------------------------------------------------------------------
    def _place_fruits(self, games: np.ndarray) -> None:
        """Puts one fruit on a uniformly random free square in each of ``games`` that has one."""
        board = self._obs[games].reshape(len(games), self._cells, 2)  # (games, cells, 2)
        free = (board[:, :, 0] == 0) & (board[:, :, 1] == 0)  # (games, cells)
        n_free = free.sum(axis=1)
        has_free = n_free > 0
        if not has_free.all():
            games, free, n_free = games[has_free], free[has_free], n_free[has_free]
        if len(games) == 0:
            return
        k = self._draw_index(games, n_free)
        square = (np.cumsum(free, axis=1) > k[:, None]).argmax(axis=1)  # the k-th free square
        self._obs[games, 2 * square + 1] = 1.0

    def _reset_games(self, games: np.ndarray) -> None:
        """Starts new games in the given slots, drawing as :meth:`Snake.reset` does."""
        length = self.initial_length
        row = self._draw_index(games, self.height)
        column = length - 1 + self._draw_index(games, self.width - length + 1)
        self._obs[games] = 0.0
        body_q = 2 * (row * self.width + column - (length - 1))[:, None] + 2 * np.arange(length)  # (games, length)
        self._body[games, :length] = body_q
        obs_base = self._obs_base[games]
        self._obs_flat[obs_base[:, None] + body_q] = 1.0
        self._head_q[games] = body_q[:, -1]
        self._obs_flat[obs_base + body_q[:, -1]] = 2.0
        self._head_ptr[games] = length - 1
        self._tail_ptr[games] = 0
        self._length[games] = length
        self._heading[games] = RIGHT
        self._steps_without_fruit[games] = 0
        self._fruits_eaten[games] = 0
        for _ in range(self.n_fruits):
            self._place_fruits(games)

    def _info(self) -> dict[str, Any]:
        info = {"fruits_eaten": self._fruits_eaten.copy(), "_fruits_eaten": self._all_true.copy()}
        if self.mask_deadly_moves:
            info["action_mask"] = self._deadly_moves_masks()
            info["_action_mask"] = self._all_true.copy()
        return info

    def _deadly_moves_masks(self) -> np.ndarray:
        """(num_envs, 3) int8: 1 for each move that does not die at once, as
        :meth:`Snake._deadly_moves_mask` (all 1 where every move dies)."""
        headings = (self._heading[:, None] + self._turns[None, :]) & 3  # (num_envs, 3)
        ahead = self._next_q.take(2 * self._head_q[:, None] + headings)  # q of each move's square
        dead = self._obs_flat.take(ahead + self._obs_base[:, None]) != 0  # off board reads the head
        dead[dead.all(axis=1)] = False
        return (~dead).astype(np.int8)

    def _observations(self) -> np.ndarray:
        return self._obs.reshape(self.num_envs, self.height, self.width, 2).copy()

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        """Resets all games (or those in ``options["reset_mask"]``).

        ``seed``: an int seeds game i with ``seed + i``; a list gives one seed per game; None keeps
        the games' generators (fresh random ones on the first reset).
        """
        if seed is not None or self._generators is None:
            self._seed(seed)
        self._refill_random()
        if options is not None and "reset_mask" in options:
            mask = np.asarray(options["reset_mask"])
            if mask.shape != (self.num_envs,) or mask.dtype != np.bool_:
                raise ValueError(
                    f"SnakeVectorEnv: options['reset_mask'] must be a bool array of shape ({self.num_envs},)."
                )
            games = np.flatnonzero(mask)
        else:
            games = np.arange(self.num_envs)
        self._reset_games(games)
        self._autoreset[games] = False
        return self._observations(), self._info()

    def step(self, actions):
        """Steps every game; see the class docstring for what auto-reset does."""
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"SnakeVectorEnv: expected actions of shape ({self.num_envs},), got {actions.shape}.")
        if actions.min() < 0 or actions.max() > 2:
            raise ValueError("SnakeVectorEnv: actions must be 0 (straight), 1 (left) or 2 (right).")
        self._refill_random()
        obs_flat, obs_base = self._obs_flat, self._obs_base

        heading = self._heading + self._turns.take(actions)
        heading &= 3
        self._heading = heading
        head_q = self._head_q
        new_q = self._next_q.take(2 * head_q + heading)
        new_at = new_q + obs_base
        # Off the board reads the head itself (see _next_q); the tail square counts as snake.
        dead = obs_flat.take(new_at) != 0
        eaten = obs_flat.take(new_at + 1) != 0  # never true for a dead game: fruit is never on the snake
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            pending = self._autoreset
            if pending.any():
                eaten &= ~pending  # these games are reset below: no fruit draw for them
            else:
                pending = None
        else:
            pending = None
        moving = ~(dead | eaten)

        # Write order makes dead games a no-op: tail <- 0, old head <- 1, new head <- 2, where a game
        # that does not move its tail "clears" its head, and a dead game's new head is its old head.
        tail_q = self._body_flat.take(self._body_base + self._tail_ptr)
        obs_flat[np.where(moving, tail_q, head_q) + obs_base] = 0.0
        obs_flat[head_q + obs_base] = 1.0
        new_q = np.where(dead, head_q, new_q)
        obs_flat[new_q + obs_base] = 2.0
        alive = ~dead
        head_ptr = self._head_ptr + alive
        head_ptr[head_ptr == self._cells] = 0
        self._head_ptr = head_ptr
        self._body_flat[self._body_base + head_ptr] = new_q
        tail_ptr = self._tail_ptr + moving
        tail_ptr[tail_ptr == self._cells] = 0
        self._tail_ptr = tail_ptr
        self._head_q = new_q

        rewards = self._rewards_by_outcome.take(2 * dead + eaten)
        terminated = dead
        steps = self._steps_without_fruit + 1
        steps[eaten] = 0
        self._steps_without_fruit = steps
        if self.max_steps_without_fruit is None:
            truncated = np.zeros(self.num_envs, dtype=bool)
        else:
            truncated = (steps >= self.max_steps_without_fruit) & alive

        if eaten.any():
            games = np.flatnonzero(eaten)
            self._fruits_eaten[games] += 1
            self._obs_flat[obs_base[games] + new_q[games] + 1] = 0.0
            self._length[games] += 1
            self._place_fruits(games)
            full = games[self._length[games] == self._cells]
            if len(full):
                terminated = terminated.copy()
                terminated[full] = True
                truncated[full] = False

        infos: dict[str, Any] = {}
        if pending is not None:
            games = np.flatnonzero(pending)
            self._reset_games(games)
            rewards[games] = 0.0
            terminated[games] = False
            truncated[games] = False
        done = terminated | truncated
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            self._autoreset = done
        elif done.any():
            games = np.flatnonzero(done)
            # An object array of per-game arrays, None elsewhere, as SyncVectorEnv gives.
            last = self._obs[games].reshape(len(games), self.height, self.width, 2)
            final_obs = np.full(self.num_envs, None, dtype=object)
            final_obs[games] = np.fromiter(last, dtype=object, count=len(games))
            final_fruits = np.zeros(self.num_envs, dtype=np.int64)
            final_fruits[games] = self._fruits_eaten[games]
            infos["final_obs"] = final_obs
            infos["_final_obs"] = done.copy()
            infos["final_info"] = {"fruits_eaten": final_fruits, "_fruits_eaten": done.copy()}
            if self.mask_deadly_moves:  # the final observations' masks, before the resets
                infos["final_info"]["action_mask"] = self._deadly_moves_masks()
                infos["final_info"]["_action_mask"] = done.copy()
            infos["_final_info"] = done.copy()
            self._reset_games(games)
        infos.update(self._info())
        return self._observations(), rewards, terminated, truncated, infos

    def render(self):
        """One frame per game (a tuple), as text or RGB images; None without a render mode."""
        if self.render_mode is None:
            return None
        render = render_ansi if self.render_mode == "ansi" else render_rgb
        boards = self._obs.reshape(self.num_envs, self.height, self.width, 2)
        return tuple(render(board) for board in boards)


def register_envs() -> None:
    """Registers ``kerasrl/Snake-v0`` (9x9, one fruit, length 2, no step limit); safe to call twice.

    ``gymnasium.make("kerasrl/Snake-v0")`` gives a :class:`Snake`;
    ``gymnasium.make_vec("kerasrl/Snake-v0", num_envs=..., vectorization_mode="vector_entry_point")``
    gives a :class:`SnakeVectorEnv`. Its ``autoreset_mode`` goes in the keyword arguments of
    ``make_vec`` (Gymnasium refuses ``vector_kwargs`` for a vector entry point); with
    ``vectorization_mode="sync"`` it goes in ``vector_kwargs`` as usual.
    """
    if SNAKE_ID not in gym.registry:
        gym.register(id=SNAKE_ID, **ENV_IDS[SNAKE_ID])
