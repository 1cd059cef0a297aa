"""MinAtar Breakout in keras.ops, rule for rule as `minatar.environments.breakout` (1.0.15)."""

from __future__ import annotations

import numpy as np

from kerasrl.envs.ops.base import random_bits
from kerasrl.envs.ops.minatar.common import (
    SIZE, CELLS, NOOP, LEFT, RIGHT, index_draw, cell_mask, stack_channels, MinAtarEnv)


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
        at = cell_mask(ops.clip(new_y, 0, 9), new_x)
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

        return stack_channels([cell_mask(ops.full_like(state["pos"], 9), state["pos"]),
                             cell_mask(state["ball_y"], state["ball_x"]),
                             cell_mask(state["last_y"], state["last_x"]), state["bricks"] > 0])

    def game_state(self, game):
        return {"ball_x": game.ball_x, "ball_y": game.ball_y, "ball_dir": game.ball_dir, "pos": game.pos,
                "bricks": np.asarray(game.brick_map).reshape(CELLS), "strike": game.strike,
                "last_x": game.last_x, "last_y": game.last_y}
