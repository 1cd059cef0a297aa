"""MinAtar Asterix in keras.ops, rule for rule as `minatar.environments.asterix` (1.0.15)."""

from __future__ import annotations

from kerasrl.envs.ops.base import random_bits
from kerasrl.envs.ops.minatar.common import (
    NOOP, LEFT, UP, RIGHT, DOWN, below, index_draw, cell_mask, lane_mask, stack_channels,
    MinAtarEnv)


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
        return stack_channels([cell_mask(state["player_y"], state["player_x"]), lane_mask(x, on & ops.logical_not(gold)),
                             lane_mask(back, on & (back >= 0) & (back <= 9)), lane_mask(x, on & gold)])

    def game_state(self, game):
        entities = [entity or [0, 0, False, False] for entity in game.entities]
        return {"player_x": game.player_x, "player_y": game.player_y,
                "entity_x": [entity[0] for entity in entities],
                "entity_on": [entity is not None for entity in game.entities],
                "entity_right": [entity[2] for entity in entities], "entity_gold": [entity[3] for entity in entities],
                "spawn_speed": game.spawn_speed, "spawn_timer": game.spawn_timer, "move_speed": game.move_speed,
                "move_timer": game.move_timer, "ramp_timer": game.ramp_timer, "ramp_index": game.ramp_index}
