"""MinAtar in keras.ops: Breakout, Asterix, Freeway and SpaceInvaders, batched.

The games of the `minatar` package (Young and Tian 2019, version 1.0.15, `minatar.environments`),
rule for rule, over a batch of games: the same (10, 10, C) observation as the reference's
`state()` (its bool channels as float32 0/1), its minimal action sets (the ids `MinAtar/*-v1`),
sticky actions (`Environment(sticky_action_prob=0.1)`: with that probability a step repeats the
game's last action) and difficulty ramping (Asterix and SpaceInvaders speed up).

Random draws: every step draws a fixed number of values from the game's xorshift stream (the
sticky-action draw first, then the game's own, in the reference's order), whether the reference
would use them or not, so there is no Python control flow. A draw u = k / 2**24 stands for the
reference's `random.rand()`, `randint(n)` is `floor(u * n)` (`base.random_index`): a reference
whose generator returns those numbers plays the same game (tests/envs/test_ops_minatar.py).

Differences from the reference, both out of reach of a learner:
- the last action, which sticky actions repeat, is 0 at the start of every episode (the
  reference's `Environment.reset` keeps the previous episode's, and starts at 0 too);
- Freeway: a car direction drawn from u = 0.5 exactly (probability 2**-24 per draw) moves right;
  the reference's `sign(u - 0.5)` gives that car speed 0, which its `state()` cannot draw.
"""

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


def _cells(y, x):
    """(n, 100) bool: the one cell (y, x) of each game (y, x int32 (n,))."""
    from keras import ops

    return ops.arange(CELLS, dtype="int32")[None, :] == (y * SIZE + x)[:, None]


def _lanes(x, present):
    """(n, 100) bool: one entity per row 1-8 (Asterix's slots, Freeway's lanes) at column x (n, 8),
    where `present` (n, 8). Built row by row, so no reduction over the entities is needed."""
    from keras import ops

    rows = ops.where(present[:, :, None], x[:, :, None], -1) == ops.arange(SIZE, dtype="int32")[None, None, :]
    return ops.reshape(ops.pad(rows, ((0, 0), (1, 1), (0, 0))), (-1, CELLS))  # rows 0 and 9 empty


def _observation(channels):
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


class MinAtarBreakout(MinAtarEnv):
    """Bounce the ball off the paddle to break bricks: +1 a brick; the ball past the paddle ends
    the game. Actions: no-op, left, right. Channels: paddle, ball, trail, brick."""

    name = "MinAtar-Breakout"
    game = "breakout"
    channels = ("paddle", "ball", "trail", "brick")
    action_set = (NOOP, LEFT, RIGHT)

    def new_game(self, rng, params):
        from keras import ops

        rng, k = random_bits(rng)
        right = index_draw(k, 2) == 1
        ball_x = ops.where(right, 9, 0)
        rows = ops.arange(CELLS, dtype="int32") // SIZE
        bricks = ops.cast((rows >= 1) & (rows <= 3), "int32")
        zeros = ops.zeros_like(rng)
        return {"ball_x": ball_x, "ball_y": zeros + 3, "ball_dir": ops.where(right, 3, 2), "pos": zeros + 4,
                "bricks": ops.tile(bricks[None, :], (ops.shape(rng)[0], 1)), "strike": zeros,
                "last_x": ball_x, "last_y": zeros + 3}, rng

    def play(self, state, action, params):
        from keras import ops

        def turn(mapping, direction):
            return ops.take(ops.convert_to_tensor(np.int32(mapping)), direction)

        pos = ops.clip(state["pos"] + ops.cast(action == RIGHT, "int32") - ops.cast(action == LEFT, "int32"), 0, 9)
        last_x, last_y, direction = state["ball_x"], state["ball_y"], state["ball_dir"]
        new_x = last_x + turn((-1, 1, 1, -1), direction)
        new_y = last_y + turn((-1, -1, 1, 1), direction)
        direction = ops.where((new_x < 0) | (new_x > 9), turn((1, 0, 3, 2), direction), direction)
        new_x = ops.clip(new_x, 0, 9)
        # The reference's branches, in its order, each excluding the ones before.
        top = new_y < 0
        at = _cells(ops.clip(new_y, 0, 9), new_x)
        bricks = state["bricks"]
        brick = ops.logical_not(top) & ops.any(at & (bricks > 0), axis=1)
        bottom = ops.logical_not(top | brick) & (new_y == 9)
        breaks = brick & (state["strike"] == 0)  # a ball still in a broken brick's place passes through
        bricks = ops.where(at & breaks[:, None], 0, bricks)
        refill = bottom & (ops.sum(bricks, axis=1) == 0)
        rows = ops.arange(CELLS, dtype="int32")[None, :] // SIZE
        bricks = ops.where(refill[:, None] & (rows >= 1) & (rows <= 3), 1, bricks)
        straight = bottom & (last_x == pos)
        side = bottom & ops.logical_not(straight) & (new_x == pos)
        direction = ops.where(top | breaks | straight, turn((3, 2, 1, 0), direction),
                              ops.where(side, turn((2, 3, 0, 1), direction), direction))
        new_y = ops.where(top, 0, ops.where(breaks | straight | side, last_y, new_y))
        terminated = bottom & ops.logical_not(straight | side)
        state = dict(state, pos=pos, ball_x=new_x, ball_y=new_y, ball_dir=direction, bricks=bricks,
                     strike=ops.cast(brick, "int32"), last_x=last_x, last_y=last_y)
        return state, ops.cast(breaks, "float32"), terminated

    def observe(self, state):
        from keras import ops

        return _observation([_cells(ops.full_like(state["pos"], 9), state["pos"]),
                             _cells(state["ball_y"], state["ball_x"]),
                             _cells(state["last_y"], state["last_x"]), state["bricks"] > 0])

    def game_state(self, game):
        return {"ball_x": game.ball_x, "ball_y": game.ball_y, "ball_dir": game.ball_dir, "pos": game.pos,
                "bricks": np.asarray(game.brick_map).reshape(CELLS), "strike": game.strike,
                "last_x": game.last_x, "last_y": game.last_y}


ASTERIX_RAMP_INTERVAL, ASTERIX_SPAWN_SPEED, ASTERIX_MOVE_INTERVAL = 100, 10, 5


class MinAtarAsterix(MinAtarEnv):
    """Move in four directions: +1 for a treasure picked up, an enemy touched ends the game.
    Enemies and treasure enter from the sides, one per row of 8; they come faster as the game
    goes on. Actions: no-op, left, up, right, down. Channels: player, enemy, trail, gold."""

    name = "MinAtar-Asterix"
    game = "asterix"
    channels = ("player", "enemy", "trail", "gold")
    action_set = (NOOP, LEFT, UP, RIGHT, DOWN)

    def new_game(self, rng, params):
        from keras import ops

        zeros = ops.zeros_like(rng)
        slots = ops.zeros((ops.shape(rng)[0], 8), "int32")
        return {"player_x": zeros + 5, "player_y": zeros + 5, "entity_x": slots, "entity_on": slots,
                "entity_right": slots, "entity_gold": slots, "spawn_speed": zeros + ASTERIX_SPAWN_SPEED,
                "spawn_timer": zeros + ASTERIX_SPAWN_SPEED, "move_speed": zeros + ASTERIX_MOVE_INTERVAL,
                "move_timer": zeros + ASTERIX_MOVE_INTERVAL, "ramp_timer": zeros + ASTERIX_RAMP_INTERVAL,
                "ramp_index": zeros}, rng

    def play(self, state, action, params):
        from keras import ops

        # Spawn: side, gold, then which free row (drawn every step; used when the timer is up).
        rng, k_side = random_bits(state["rng"])
        rng, k_gold = random_bits(rng)
        rng, k_slot = random_bits(rng)
        on, x = state["entity_on"] > 0, state["entity_x"]
        right, gold = state["entity_right"] > 0, state["entity_gold"] > 0
        spawn = state["spawn_timer"] == 0
        free = ops.logical_not(on)
        n_free = ops.sum(ops.cast(free, "int32"), axis=1)
        slot = ops.argmax(ops.cast(ops.cumsum(ops.cast(free, "int32"), axis=1) > index_draw(k_slot, n_free)[:, None],
                                   "int32"), axis=1)
        new = ((ops.arange(8, dtype="int32")[None, :] == ops.cast(slot, "int32")[:, None])
               & (spawn & (n_free > 0))[:, None])
        side, new_gold = below(k_side, 1 / 2), below(k_gold, 1 / 3)
        x = ops.where(new, ops.where(side, 0, 9)[:, None], x)
        right = ops.where(new, side[:, None], right)
        gold = ops.where(new, new_gold[:, None], gold)
        on = on | new
        spawn_timer = ops.where(spawn, state["spawn_speed"], state["spawn_timer"])

        player_x = ops.clip(state["player_x"] + ops.cast(action == RIGHT, "int32") - ops.cast(action == LEFT, "int32"),
                            0, 9)
        player_y = ops.clip(state["player_y"] + ops.cast(action == DOWN, "int32") - ops.cast(action == UP, "int32"),
                            1, 8)
        row = ops.arange(1, 9, dtype="int32")[None, :]

        def touch(candidates, x):
            """(reward, death, treasures taken) of the `candidates` on the player's square."""
            touched = candidates & (x == player_x[:, None]) & (row == player_y[:, None])
            taken = touched & gold
            return (ops.sum(ops.cast(taken, "float32"), axis=1),
                    ops.any(touched & ops.logical_not(gold), axis=1), taken)

        reward, terminated, taken = touch(on, x)
        on = on & ops.logical_not(taken)
        move = state["move_timer"] == 0
        move_timer = ops.where(move, state["move_speed"], state["move_timer"])
        moving = on & move[:, None]
        x = ops.where(moving, x + ops.where(right, 1, -1), x)
        on = on & ops.logical_not(moving & ((x < 0) | (x > 9)))
        moved_reward, moved_death, taken = touch(moving & on, x)
        reward, terminated = reward + moved_reward, terminated | moved_death
        on = on & ops.logical_not(taken)

        spawn_speed, move_speed = state["spawn_speed"], state["move_speed"]
        ramp_timer, ramp_index = state["ramp_timer"], state["ramp_index"]
        if params.difficulty_ramping:
            active = (spawn_speed > 1) | (move_speed > 1)
            ramp = active & (ramp_timer < 0)
            ramp_timer = ops.where(active & (ramp_timer >= 0), ramp_timer - 1,
                                   ops.where(ramp, ASTERIX_RAMP_INTERVAL, ramp_timer))
            move_speed = move_speed - ops.cast(ramp & (move_speed > 1) & (ramp_index % 2 == 1), "int32")
            spawn_speed = spawn_speed - ops.cast(ramp & (spawn_speed > 1), "int32")
            ramp_index = ramp_index + ops.cast(ramp, "int32")
        # Empty rows hold zeros, so that one game has one state (as the reference's None).
        state = dict(state, rng=rng, player_x=player_x, player_y=player_y, entity_on=ops.cast(on, "int32"),
                     entity_x=ops.where(on, x, 0), entity_right=ops.cast(on & right, "int32"),
                     entity_gold=ops.cast(on & gold, "int32"), spawn_timer=spawn_timer - 1,
                     move_timer=move_timer - 1, spawn_speed=spawn_speed, move_speed=move_speed,
                     ramp_timer=ramp_timer, ramp_index=ramp_index)
        return state, reward, terminated

    def observe(self, state):
        from keras import ops

        on, x = state["entity_on"] > 0, state["entity_x"]
        gold, right = state["entity_gold"] > 0, state["entity_right"] > 0
        back = x + ops.where(right, -1, 1)
        return _observation([_cells(state["player_y"], state["player_x"]), _lanes(x, on & ops.logical_not(gold)),
                             _lanes(back, on & (back >= 0) & (back <= 9)), _lanes(x, on & gold)])

    def game_state(self, game):
        entities = [entity or [0, 0, False, False] for entity in game.entities]
        return {"player_x": game.player_x, "player_y": game.player_y,
                "entity_x": [entity[0] for entity in entities],
                "entity_on": [entity is not None for entity in game.entities],
                "entity_right": [entity[2] for entity in entities], "entity_gold": [entity[3] for entity in entities],
                "spawn_speed": game.spawn_speed, "spawn_timer": game.spawn_timer, "move_speed": game.move_speed,
                "move_timer": game.move_timer, "ramp_timer": game.ramp_timer, "ramp_index": game.ramp_index}


FREEWAY_PLAYER_SPEED, FREEWAY_TIME_LIMIT = 3, 2500


class MinAtarFreeway(MinAtarEnv):
    """Cross eight lanes of traffic: +1 at the top (back to the bottom, the cars' speeds drawn
    anew); a car sends the chicken back to the bottom. The game ends after 2,500 steps (terminated,
    as the reference says). Actions: no-op, up, down. Channels: chicken, car, and a trail for each
    of the five car speeds."""

    name = "MinAtar-Freeway"
    game = "freeway"
    channels = ("chicken", "car", "speed1", "speed2", "speed3", "speed4", "speed5")
    action_set = (NOOP, UP, DOWN)

    @staticmethod
    def _speeds(rng):
        """`(rng, speeds)`: 8 speeds in 1..5, then 8 directions (`randint(1, 6, 8)`, `rand(8)`)."""
        from keras import ops

        draws = []
        for _ in range(16):
            rng, k = random_bits(rng)
            draws.append(k)
        speed = 1 + index_draw(ops.stack(draws[:8], axis=1), 5)
        left = below(ops.stack(draws[8:], axis=1), 1 / 2)
        return rng, ops.where(left, -speed, speed)

    def new_game(self, rng, params):
        from keras import ops

        rng, speed = self._speeds(rng)
        zeros = ops.zeros_like(rng)
        return {"pos": zeros + 9, "move_timer": zeros + FREEWAY_PLAYER_SPEED, "timer": zeros + FREEWAY_TIME_LIMIT,
                "car_x": ops.zeros_like(speed), "car_timer": ops.abs(speed), "car_speed": speed}, rng

    def play(self, state, action, params):
        from keras import ops

        rng, drawn = self._speeds(state["rng"])
        ready = state["move_timer"] == 0
        up, down = ready & (action == UP), ready & (action == DOWN)
        move_timer = ops.where(up | down, FREEWAY_PLAYER_SPEED, state["move_timer"])
        pos = ops.clip(state["pos"] - ops.cast(up, "int32") + ops.cast(down, "int32"), 0, 9)
        win = pos == 0
        speed = ops.where(win[:, None], drawn, state["car_speed"])
        timer = ops.where(win[:, None], ops.abs(drawn), state["car_timer"])
        pos = ops.where(win, 9, pos)
        # Cars are in rows 1-8, so once one sends the chicken to row 9 no other can: the
        # reference's car-by-car loop is one test against the position before it.
        row = ops.arange(1, 9, dtype="int32")[None, :]
        x = state["car_x"]
        hit = ops.any((x == 4) & (row == pos[:, None]), axis=1)
        due = timer == 0
        moved = x + ops.where(speed > 0, 1, -1)
        x = ops.where(due, ops.where(moved < 0, 9, ops.where(moved > 9, 0, moved)), x)
        hit = hit | ops.any(due & (x == 4) & (row == pos[:, None]), axis=1)
        timer = ops.where(due, ops.abs(speed), timer - 1)
        countdown = state["timer"] - 1
        state = dict(state, rng=rng, pos=ops.where(hit, 9, pos),
                     move_timer=move_timer - ops.cast(move_timer > 0, "int32"),
                     timer=countdown, car_x=x, car_timer=timer, car_speed=speed)
        return state, ops.cast(win, "float32"), countdown < 0

    def observe(self, state):
        from keras import ops

        x, speed = state["car_x"], state["car_speed"]
        back = x + ops.where(speed > 0, -1, 1)
        back = ops.where(back < 0, 9, ops.where(back > 9, 0, back))
        trails = [_lanes(back, ops.abs(speed) == s) for s in range(1, 6)]
        return _observation([_cells(state["pos"], ops.full_like(state["pos"], 4)),
                             _lanes(x, ops.ones_like(x, dtype="bool")), *trails])

    def game_state(self, game):
        return {"pos": game.pos, "move_timer": game.move_timer, "timer": game.terminate_timer,
                "car_x": [car[0] for car in game.cars], "car_timer": [car[2] for car in game.cars],
                "car_speed": [car[3] for car in game.cars]}


INVADERS_SHOT_COOL_DOWN, INVADERS_MOVE_INTERVAL, INVADERS_SHOT_INTERVAL = 5, 12, 10


class MinAtarSpaceInvaders(MinAtarEnv):
    """Shoot the aliens from the cannon: +1 an alien. An alien or its bullet reaching the cannon
    ends the game; a cleared wave comes back faster. Actions: no-op, left, right, fire. Channels:
    cannon, alien, alien moving left, alien moving right, friendly bullet, enemy bullet."""

    name = "MinAtar-SpaceInvaders"
    game = "space_invaders"
    channels = ("cannon", "alien", "alien_left", "alien_right", "friendly_bullet", "enemy_bullet")
    action_set = (NOOP, LEFT, RIGHT, FIRE)

    @staticmethod
    def _wave():
        """(100,) int32: the aliens of a new wave, rows 0-3, columns 2-7."""
        rows, columns = np.divmod(np.arange(CELLS), SIZE)
        return ((rows <= 3) & (columns >= 2) & (columns <= 7)).astype(np.int32)

    def new_game(self, rng, params):
        from keras import ops

        zeros = ops.zeros_like(rng)
        empty = ops.zeros((ops.shape(rng)[0], CELLS), "int32")
        return {"pos": zeros + 5, "aliens": empty + ops.convert_to_tensor(self._wave())[None, :],
                "friendly_bullets": empty, "enemy_bullets": empty, "alien_dir": zeros - 1,
                "move_interval": zeros + INVADERS_MOVE_INTERVAL, "move_timer": zeros + INVADERS_MOVE_INTERVAL,
                "shot_timer": zeros + INVADERS_SHOT_INTERVAL, "ramp_index": zeros, "cool_down": zeros}, rng

    def play(self, state, action, params):
        from keras import ops

        def grid(cells):
            return ops.reshape(cells, (-1, SIZE, SIZE))

        n = ops.shape(action)[0]
        fire = (action == FIRE) & (state["cool_down"] == 0)
        pos = state["pos"]
        friendly = grid(ops.where(_cells(ops.full_like(pos, 9), pos) & fire[:, None], 1, state["friendly_bullets"]))
        cool_down = ops.where(fire, INVADERS_SHOT_COOL_DOWN, state["cool_down"])
        pos = ops.clip(pos + ops.cast(action == RIGHT, "int32") - ops.cast(action == LEFT, "int32"), 0, 9)
        row_of_zeros = ops.zeros((n, 1, SIZE), "int32")
        friendly = ops.concatenate([friendly[:, 1:], row_of_zeros], axis=1)  # bullets go up a row
        enemy = grid(state["enemy_bullets"])
        enemy = ops.concatenate([row_of_zeros, enemy[:, :-1]], axis=1)  # and theirs down
        at_cannon = _cells(ops.full_like(pos, 9), pos)
        terminated = ops.any(at_cannon & (ops.reshape(enemy, (n, CELLS)) > 0), axis=1)
        aliens = state["aliens"]
        terminated = terminated | ops.any(at_cannon & (aliens > 0), axis=1)

        move = state["move_timer"] == 0
        count = ops.sum(aliens, axis=1)
        move_timer = ops.where(move, ops.minimum(count, state["move_interval"]), state["move_timer"])
        alien_grid = grid(aliens)
        direction = state["alien_dir"]
        at_edge = ((ops.any(alien_grid[:, :, 0] > 0, axis=1) & (direction < 0))
                   | (ops.any(alien_grid[:, :, 9] > 0, axis=1) & (direction > 0)))
        descend = move & at_edge
        terminated = terminated | (descend & ops.any(alien_grid[:, 9, :] > 0, axis=1))
        sideways = ops.where((direction > 0)[:, None, None], ops.roll(alien_grid, 1, axis=2),
                             ops.roll(alien_grid, -1, axis=2))
        alien_grid = ops.where(descend[:, None, None], ops.roll(alien_grid, 1, axis=1),
                               ops.where((move & ops.logical_not(at_edge))[:, None, None], sideways, alien_grid))
        direction = ops.where(descend, -direction, direction)
        aliens = ops.reshape(alien_grid, (n, CELLS))
        terminated = terminated | (move & ops.any(at_cannon & (aliens > 0), axis=1))

        # The alien nearest the cannon shoots: the nearest column with aliens (the left one on a
        # tie, as the reference's stable sort), from its lowest alien.
        shoot = state["shot_timer"] == 0
        shot_timer = ops.where(shoot, INVADERS_SHOT_INTERVAL, state["shot_timer"])
        columns = ops.arange(SIZE, dtype="int32")[None, :]
        occupied = ops.any(alien_grid > 0, axis=1)  # (n, columns)
        key = ops.where(occupied, ops.abs(columns - pos[:, None]) * SIZE + columns, 1000)
        column = ops.cast(ops.argmin(key, axis=1), "int32")
        rows = ops.arange(SIZE, dtype="int32")[None, :, None]
        in_column = (alien_grid > 0) & (columns[:, None, :] == column[:, None, None])
        row = ops.max(ops.where(in_column, rows, -1), axis=(1, 2))
        enemy = ops.reshape(enemy, (n, CELLS))
        enemy = ops.where(_cells(row, column) & shoot[:, None], 1, enemy)

        friendly = ops.reshape(friendly, (n, CELLS))
        kill = (aliens > 0) & (friendly > 0)
        reward = ops.sum(ops.cast(kill, "float32"), axis=1)
        aliens = ops.where(kill, 0, aliens)
        friendly = ops.where(kill, 0, friendly)
        cleared = ops.sum(aliens, axis=1) == 0
        interval, ramp_index = state["move_interval"], state["ramp_index"]
        if params.difficulty_ramping:
            ramp = cleared & (interval > 6)
            interval = interval - ops.cast(ramp, "int32")
            ramp_index = ramp_index + ops.cast(ramp, "int32")
        aliens = ops.where(cleared[:, None], ops.convert_to_tensor(self._wave())[None, :], aliens)
        state = dict(state, pos=pos, aliens=aliens, friendly_bullets=friendly, enemy_bullets=enemy,
                     alien_dir=direction, move_interval=interval, move_timer=move_timer - 1,
                     shot_timer=shot_timer - 1, ramp_index=ramp_index,
                     cool_down=cool_down - ops.cast(cool_down > 0, "int32"))
        return state, reward, terminated

    def observe(self, state):
        from keras import ops

        aliens = state["aliens"] > 0
        left = (state["alien_dir"] < 0)[:, None]
        return _observation([_cells(ops.full_like(state["pos"], 9), state["pos"]), aliens, aliens & left,
                             aliens & ops.logical_not(left), state["friendly_bullets"] > 0, state["enemy_bullets"] > 0])

    def game_state(self, game):
        return {"pos": game.pos, "aliens": np.asarray(game.alien_map).reshape(CELLS),
                "friendly_bullets": np.asarray(game.f_bullet_map).reshape(CELLS),
                "enemy_bullets": np.asarray(game.e_bullet_map).reshape(CELLS), "alien_dir": game.alien_dir,
                "move_interval": game.enemy_move_interval, "move_timer": game.alien_move_timer,
                "shot_timer": game.alien_shot_timer, "ramp_index": game.ramp_index, "cool_down": game.shot_timer}
