"""MinAtar SpaceInvaders in keras.ops, rule for rule as `minatar.environments.space_invaders` (1.0.15)."""

from __future__ import annotations

import numpy as np

from kerasrl.envs.ops.minatar.common import (
    SIZE, CELLS, NOOP, LEFT, RIGHT, FIRE, cell_mask, stack_channels, MinAtarEnv)


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
        friendly = grid(ops.where(cell_mask(ops.full_like(pos, 9), pos) & fire[:, None], 1, state["friendly_bullets"]))
        cool_down = ops.where(fire, INVADERS_SHOT_COOL_DOWN, state["cool_down"])
        pos = ops.clip(pos + ops.cast(action == RIGHT, "int32") - ops.cast(action == LEFT, "int32"), 0, 9)
        row_of_zeros = ops.zeros((n, 1, SIZE), "int32")
        friendly = ops.concatenate([friendly[:, 1:], row_of_zeros], axis=1)  # bullets go up a row
        enemy = grid(state["enemy_bullets"])
        enemy = ops.concatenate([row_of_zeros, enemy[:, :-1]], axis=1)  # and theirs down
        at_cannon = cell_mask(ops.full_like(pos, 9), pos)
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
        enemy = ops.where(cell_mask(row, column) & shoot[:, None], 1, enemy)

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
        return stack_channels([cell_mask(ops.full_like(state["pos"], 9), state["pos"]), aliens, aliens & left,
                             aliens & ops.logical_not(left), state["friendly_bullets"] > 0, state["enemy_bullets"] > 0])

    def game_state(self, game):
        return {"pos": game.pos, "aliens": np.asarray(game.alien_map).reshape(CELLS),
                "friendly_bullets": np.asarray(game.f_bullet_map).reshape(CELLS),
                "enemy_bullets": np.asarray(game.e_bullet_map).reshape(CELLS), "alien_dir": game.alien_dir,
                "move_interval": game.enemy_move_interval, "move_timer": game.alien_move_timer,
                "shot_timer": game.alien_shot_timer, "ramp_index": game.ramp_index, "cool_down": game.shot_timer}
