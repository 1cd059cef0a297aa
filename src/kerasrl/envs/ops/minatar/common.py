"""What every MinAtar game in keras.ops shares: the grid, the draws, the cell masks, sticky
actions over the minimal action set, the observation space and the drawing (the package's
docstring says how the games follow the reference)."""


from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
from gymnasium import spaces

from kerasrl.envs.ops.base import UNIFORM_BITS, EnvParams, OpsEnv, random_bits

SIZE = 10
CELLS = SIZE * SIZE
# The reference's full action set, ['n', 'l', 'u', 'r', 'd', 'f']; the minimal sets index into it.
NOOP, LEFT, UP, RIGHT, DOWN, FIRE = range(6)


@dataclasses.dataclass(frozen=True, kw_only=True)
class MinAtarParams(EnvParams):
    """The reference `minatar.Environment`'s settings; no time limit, as MinAtar's own ids."""

    sticky_action_prob: float = 0.1
    """Probability that a step repeats the game's last action instead of the one given."""
    difficulty_ramping: bool = True
    """Whether Asterix and SpaceInvaders speed up as the game goes on (the others never do)."""

    def __post_init__(self):
        if not 0.0 <= self.sticky_action_prob <= 1.0:
            raise ValueError(f"MinAtar: sticky_action_prob must be in [0, 1], got {self.sticky_action_prob!r}.")


def below(k, probability: float):
    """Whether the draw u = k / 2**24 is below `probability`: the reference's `rand() < p`, exactly."""
    return k < math.ceil(Fraction(probability) * (1 << UNIFORM_BITS))


def index_draw(k, n):
    """floor(u * n) for u = k / 2**24: the reference's `randint(n)` (n at most 127)."""
    from keras import ops

    return ops.right_shift(k * n, UNIFORM_BITS)


def cell_mask(y, x):
    """(n, 100) bool: the one cell (y, x) of each game (y, x int32 (n,))."""
    from keras import ops

    return ops.arange(CELLS, dtype="int32")[None, :] == (y * SIZE + x)[:, None]


def lane_mask(x, present):
    """(n, 100) bool: one entity per row 1-8 (Asterix's slots, Freeway's lanes) at column x (n, 8),
    where `present` (n, 8). Built row by row, so no reduction over the entities is needed."""
    from keras import ops

    rows = ops.where(present[:, :, None], x[:, :, None], -1) == ops.arange(SIZE, dtype="int32")[None, None, :]
    return ops.reshape(ops.pad(rows, ((0, 0), (1, 1), (0, 0))), (-1, CELLS))  # rows 0 and 9 empty


def stack_channels(channels):
    """float32 (n, 10, 10, C) from C bool (n, 100) channels."""
    from keras import ops

    # Cast before stacking: XLA on a CPU stacks bool planes ten times slower than float ones.
    channels = [ops.cast(channel, "float32") for channel in channels]
    return ops.reshape(ops.stack(channels, axis=-1), (-1, SIZE, SIZE, len(channels)))


# The reference draws with seaborn's `color_palette("cubehelix", C)` (matplotlib's cubehelix map
# at C evenly spaced inner points) after black for empty cells; these are those colours x 255,
# rounded (tests/envs/test_ops_minatar.py recomputes them with matplotlib).
PALETTES = {
    4: ((0, 0, 0), (22, 61, 78), (84, 121, 47), (208, 126, 147), (193, 202, 243)),
    6: ((0, 0, 0), (26, 36, 65), (27, 97, 69), (105, 123, 48), (200, 123, 124), (205, 162, 224),
        (198, 225, 241)),
    7: ((0, 0, 0), (27, 30, 59), (22, 83, 76), (68, 119, 49), (161, 121, 74), (212, 132, 169),
        (198, 180, 238), (203, 232, 240)),
}


def render_rgb(observation: np.ndarray, cell: int = 16) -> np.ndarray:
    """uint8 (10 * cell, 10 * cell, 3): the MinAtar reference's picture of one observation
    (each cell the colour of its highest channel, black if empty), `cell` pixels a side."""
    observation = np.asarray(observation) > 0.5
    channels = observation.shape[-1]
    palette = np.asarray(PALETTES[channels], np.uint8)
    index = np.max(observation * np.arange(1, channels + 1), axis=-1)
    return np.repeat(np.repeat(palette[index], cell, axis=0), cell, axis=1)


class MinAtarEnv(OpsEnv):
    """The part every MinAtar game shares: sticky actions over the minimal action set, the
    observation space, drawing, and reading a reference game's state (`state_from_minatar`).

    Subclasses give `game` (the reference's module name), `channels`, `action_set` (the minimal
    actions as indices into the full set) and write `new_game(rng, params) -> (state, rng)`,
    `play(state, action, params) -> (state, reward, terminated)` (action in the full set),
    `observe(state)` and `game_state(game)` (one reference game's state as numpy).
    """

    game = ""
    channels: tuple[str, ...] = ()
    action_set: tuple[int, ...] = ()
    default_params = MinAtarParams()

    def __init__(self):
        self.observation_space = spaces.Box(0.0, 1.0, (SIZE, SIZE, len(self.channels)), np.float32)
        self.action_space = spaces.Discrete(len(self.action_set))

    @property
    def metadata(self) -> dict:
        """`rgb_array` (the reference's picture, `render_rgb`), at the reference display's 50 ms a frame."""
        return {"render_modes": ["rgb_array"], "render_fps": 20}

    def renderer(self, render_mode: str, params=None):
        """Draws a game's observation as the reference does (`render_rgb`)."""
        from kerasrl.envs.ops.render import ObservationRenderer, check_render_mode

        check_render_mode(self.name, render_mode, self.metadata["render_modes"])
        return ObservationRenderer(render_rgb)

    def reset_env(self, rng, params):
        from keras import ops

        state, rng = self.new_game(rng, params)
        state = dict(state, last_action=ops.zeros_like(rng))
        return self.observe(state), state, rng

    def step_env(self, state, action, params):
        from keras import ops

        rng, k = random_bits(state["rng"])
        chosen = ops.take(ops.convert_to_tensor(np.int32(self.action_set)), ops.cast(action, "int32"))
        action = ops.where(below(k, params.sticky_action_prob), state["last_action"], chosen)
        state, reward, terminated = self.play(dict(state, rng=rng, last_action=action), action, params)
        return self.observe(state), state, reward, terminated, ops.zeros_like(terminated)

    def new_game(self, rng, params):
        raise NotImplementedError

    def play(self, state, action, params):
        raise NotImplementedError

    def observe(self, state):
        raise NotImplementedError

    def game_state(self, game) -> dict:
        raise NotImplementedError

    def state_from_minatar(self, environments, rng) -> dict[str, np.ndarray]:
        """The state (numpy, one row per game) of reference `minatar.Environment`s, to step from:
        each game as its `env` holds it, its `last_action`, `rng` (int32 (n,)) and time 0."""
        games = [dict(self.game_state(environment.env), last_action=environment.last_action)
                 for environment in environments]
        state = {key: np.stack([np.asarray(game[key], np.int32) for game in games]) for key in games[0]}
        state["rng"] = np.asarray(rng, np.int32)
        state["time"] = np.zeros(len(games), np.int32)
        return state
