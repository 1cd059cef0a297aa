"""MinAtar Freeway in keras.ops, rule for rule as `minatar.environments.freeway` (1.0.15)."""

from __future__ import annotations

from kerasrl.envs.ops.base import random_bits
from kerasrl.envs.ops.minatar.common import (
    NOOP, UP, DOWN, below, index_draw, cell_mask, lane_mask, stack_channels, MinAtarEnv)


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
        trails = [lane_mask(back, ops.abs(speed) == s) for s in range(1, 6)]
        return stack_channels([cell_mask(state["pos"], ops.full_like(state["pos"], 4)),
                             lane_mask(x, ops.ones_like(x, dtype="bool")), *trails])

    def game_state(self, game):
        return {"pos": game.pos, "move_timer": game.move_timer, "timer": game.terminate_timer,
                "car_x": [car[0] for car in game.cars], "car_timer": [car[2] for car in game.cars],
                "car_speed": [car[3] for car in game.cars]}
