"""``num_envs`` Snake games stepped together as numpy arrays: the vectorized implementation of the
rules that :class:`kerasrl.envs.snake.Snake` plays one game of.

The two are written independently and tested one against the other (tests/envs/test_snake.py);
they draw their randomness the same way (see kerasrl.envs.snake), so game ``i`` of a vector env
seeded with ``seed`` is the single game seeded with ``seed + i``.
"""

from __future__ import annotations

import operator
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from kerasrl.envs.snake import (_MOVES, _TURNS, DEATH_REWARD, FRUIT_REWARD, RIGHT, STEP_REWARD,
                                _check_params, render_ansi, render_rgb)

__all__ = ["SnakeVectorEnv"]


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
