"""Tests of the Snake game: each rule on hand-built states, then the vector env against single games."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from kerasrl.envs.snake import (
    DEATH_REWARD,
    FRUIT_REWARD,
    REFERENCE_MIN_BOARD,
    STEP_REWARD,
    Snake,
    register_envs,
)
from kerasrl.envs.snake_vector import SnakeVectorEnv

STRAIGHT, LEFT, RIGHT = 0, 1, 2
MOVES = {"right": (0, 1), "up": (-1, 0), "left": (0, -1), "down": (1, 0)}
AFTER_LEFT = {"right": "up", "up": "left", "left": "down", "down": "right"}
AFTER_RIGHT = {v: k for k, v in AFTER_LEFT.items()}


def make_game(body, heading, fruits, **kwargs):
    game = Snake(**kwargs)
    game.reset(seed=0)
    game._set_state(body, heading, fruits)
    return game


def head_of(obs):
    return tuple(int(i) for i in np.argwhere(obs[..., 0] == 2)[0])


def snake_squares(obs):
    return {tuple(int(i) for i in sq) for sq in np.argwhere(obs[..., 0] > 0)}


def fruit_squares(obs):
    return {tuple(int(i) for i in sq) for sq in np.argwhere(obs[..., 1] > 0)}


def test_rewards_are_the_documented_ones():
    """docs/snake.md: +10 for a fruit, -10 for a death, -0.2 for any other step."""
    assert (FRUIT_REWARD, DEATH_REWARD) == (10.0, -10.0)
    assert STEP_REWARD == pytest.approx(-0.2, abs=1e-7)


# Moves ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("heading", ["right", "up", "left", "down"])
@pytest.mark.parametrize("action", [STRAIGHT, LEFT, RIGHT])
def test_turns_and_straight_from_every_heading(heading, action):
    d_row, d_column = MOVES[heading]
    head = (4, 4)
    neck = (4 - d_row, 4 - d_column)
    game = make_game([head, neck], heading, [(0, 0)])
    new_heading = {STRAIGHT: heading, LEFT: AFTER_LEFT[heading], RIGHT: AFTER_RIGHT[heading]}[action]
    obs, reward, terminated, truncated, info = game.step(action)
    d_row, d_column = MOVES[new_heading]
    assert head_of(obs) == (4 + d_row, 4 + d_column)
    assert snake_squares(obs) == {(4 + d_row, 4 + d_column), head}  # the tail moved up
    assert obs[head][0] == 1.0
    assert reward == pytest.approx(-0.2)
    assert not terminated and not truncated
    assert info == {"fruits_eaten": 0}


def test_heading_persists_over_several_turns():
    game = make_game([(4, 4), (4, 3)], "right", [(0, 0)])
    for action, expected in [(LEFT, (3, 4)), (LEFT, (3, 3)), (LEFT, (4, 3)), (LEFT, (4, 4)), (RIGHT, (5, 4))]:
        obs, *_ = game.step(action)
        assert head_of(obs) == expected


# Fruit and growth -------------------------------------------------------------------------------
def test_eating_grows_keeps_tail_and_respawns_fruit():
    game = make_game([(2, 2), (2, 1), (2, 0)], "right", [(2, 3)], height=5, width=5)
    obs, reward, terminated, truncated, info = game.step(STRAIGHT)
    assert reward == 10.0
    assert not terminated and not truncated
    assert info == {"fruits_eaten": 1}
    assert snake_squares(obs) == {(2, 3), (2, 2), (2, 1), (2, 0)}
    assert head_of(obs) == (2, 3)
    fruits = fruit_squares(obs)
    assert len(fruits) == 1 and not fruits & snake_squares(obs)


def test_fruit_only_on_free_squares_many_seeds():
    for seed in range(300):
        game = Snake(height=2, width=3, n_fruits=3, initial_length=2)
        obs, _ = game.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for _ in range(20):
            assert len(fruit_squares(obs)) <= 3
            assert not fruit_squares(obs) & snake_squares(obs)
            assert np.all(obs[..., 1] <= 1)
            obs, _, terminated, truncated, _ = game.step(int(rng.integers(3)))
            if terminated or truncated:
                obs, _ = game.reset()


def test_first_fruit_is_uniform_over_free_squares():
    # 3x3 board, length 2 in row r, head at column 1 or 2: 7 free squares, each about 1/7.
    counts = {}
    for seed in range(2800):
        obs, _ = Snake(height=3, width=3).reset(seed=seed)
        (fruit,) = fruit_squares(obs)
        counts[fruit] = counts.get(fruit, 0) + 1
    assert len(counts) == 9
    # Each square is free in the starts that avoid it; no square should be starved or favoured.
    assert min(counts.values()) > 150 and max(counts.values()) < 500


# Deaths -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "body, heading",
    [
        ([(2, 4), (2, 3)], "right"),
        ([(0, 2), (1, 2)], "up"),
        ([(2, 0), (2, 1)], "left"),
        ([(4, 2), (3, 2)], "down"),
    ],
)
def test_wall_death_on_each_side(body, heading):
    game = make_game(body, heading, [(0, 0)] if body[0] != (0, 0) else [(4, 4)], height=5, width=5)
    before = game._observation()
    obs, reward, terminated, truncated, info = game.step(STRAIGHT)
    assert reward == -10.0 and terminated and not truncated
    np.testing.assert_array_equal(obs, before)  # the reference does not move a dead snake
    assert info == {"fruits_eaten": 0}


def test_moving_onto_the_current_tail_square_dies():
    # A 2x2 loop: head (0, 0) going up, tail (0, 1); turning right heads onto the tail.
    game = make_game([(0, 0), (1, 0), (1, 1), (0, 1)], "up", [(3, 3)], height=4, width=4)
    obs, reward, terminated, truncated, _ = game.step(RIGHT)
    assert reward == -10.0 and terminated and not truncated


def test_body_death():
    # Head (1, 1) going up; body wraps round to (1, 2); turning right runs into it.
    body = [(1, 1), (2, 1), (2, 2), (2, 3), (1, 3), (1, 2), (0, 2)]
    game = make_game(body, "up", [(4, 4)], height=5, width=5)
    obs, reward, terminated, truncated, _ = game.step(RIGHT)
    assert reward == -10.0 and terminated and not truncated


# Observation and rewards ------------------------------------------------------------------------
def test_observation_encoding():
    game = make_game([(1, 2), (1, 1), (2, 1)], "right", [(3, 0), (0, 3)], height=4, width=5, n_fruits=2)
    obs = game._observation()
    assert obs.dtype == np.float32 and obs.shape == (4, 5, 2)
    expected = np.zeros((4, 5, 2), dtype=np.float32)
    expected[1, 2, 0] = 2
    expected[1, 1, 0] = expected[2, 1, 0] = 1
    expected[3, 0, 1] = expected[0, 3, 1] = 1
    np.testing.assert_array_equal(obs, expected)
    assert game.observation_space.contains(obs)


def test_reset_start_position():
    for seed in range(200):
        game = Snake(height=6, width=7, initial_length=3)
        obs, info = game.reset(seed=seed)
        assert info == {"fruits_eaten": 0}
        (row, column) = head_of(obs)
        assert 2 <= column <= 6
        assert snake_squares(obs) == {(row, column), (row, column - 1), (row, column - 2)}
        assert len(fruit_squares(obs)) == 1
        # Heading right: going straight moves right.
        if column < 6 and (row, column + 1) not in fruit_squares(obs):
            obs, *_ = game.step(STRAIGHT)
            assert head_of(obs) == (row, column + 1)


def test_seeding_is_reproducible():
    def run(seed):
        game = Snake(height=5, width=5)
        out = [game.reset(seed=seed)[0]]
        rng = np.random.default_rng(1)
        for _ in range(200):
            obs, _, terminated, truncated, _ = game.step(int(rng.integers(3)))
            out.append(obs)
            if terminated or truncated:
                out.append(game.reset()[0])
        return np.stack(out)

    np.testing.assert_array_equal(run(3), run(3))
    assert not np.array_equal(run(3), run(4))


# Truncation and the full board ------------------------------------------------------------------
def test_truncation_after_steps_without_fruit_and_eating_resets_the_count():
    game = make_game([(2, 0), (3, 0)], "up", [(0, 0)], height=9, width=9, max_steps_without_fruit=3)
    # Head (2, 0) going up: (1, 0), then the fruit at (0, 0).
    _, reward, terminated, truncated, _ = game.step(STRAIGHT)
    assert reward == pytest.approx(-0.2) and not terminated and not truncated
    _, reward, terminated, truncated, info = game.step(STRAIGHT)
    assert reward == 10.0 and not truncated and info["fruits_eaten"] == 1
    game._fruits = [(8, 8)]  # out of the way
    for step in range(3):
        _, reward, terminated, truncated, _ = game.step(RIGHT if step == 0 else STRAIGHT)
        assert not terminated
        assert truncated == (step == 2)


def test_no_truncation_by_default():
    game = Snake(height=9, width=9)
    game.reset(seed=0)
    game._set_state([(4, 4), (4, 3)], "right", [(0, 0)])
    for _ in range(500):  # circle on a 2x2 loop forever
        _, _, terminated, truncated, _ = game.step(LEFT)
        assert not terminated and not truncated


def test_full_board_terminates_with_fruit_reward():
    game = make_game([(0, 1), (0, 0)], "right", [(0, 2)], height=1, width=3)
    obs, reward, terminated, truncated, info = game.step(STRAIGHT)
    assert reward == 10.0 and terminated and not truncated
    assert info == {"fruits_eaten": 1}
    assert snake_squares(obs) == {(0, 0), (0, 1), (0, 2)} and not fruit_squares(obs)

    game = make_game([(1, 0), (0, 0), (0, 1)], "down", [(1, 1)], height=2, width=2)
    obs, reward, terminated, truncated, _ = game.step(LEFT)
    assert reward == 10.0 and terminated and not truncated
    assert obs[..., 0].sum() == 2 + 3


def test_full_board_happens_in_play_on_a_1x3_board():
    outcomes = set()
    for seed in range(50):
        game = Snake(height=1, width=3)
        game.reset(seed=seed)
        _, reward, terminated, _, _ = game.step(STRAIGHT)
        outcomes.add((reward, terminated))
    assert outcomes == {(10.0, True), (-10.0, True)}


# Bad input --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"height": 0}, "height must be positive"),
        ({"width": -1}, "width must be positive"),
        ({"initial_length": 0}, "initial_length must be positive"),
        ({"n_fruits": 0}, "n_fruits must be positive"),
        ({"height": 2.5}, "height must be an integer"),
        ({"width": 3, "initial_length": 4}, "initial_length <= width"),
        ({"height": 1, "width": 3, "n_fruits": 2}, "free squares"),
        ({"max_steps_without_fruit": 0}, "max_steps_without_fruit"),
        ({"render_mode": "human"}, "render_mode"),
    ],
)
@pytest.mark.parametrize("cls", [Snake, SnakeVectorEnv])
def test_bad_input_raises(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


def test_bad_actions_raise():
    game = Snake()
    game.reset(seed=0)
    with pytest.raises(ValueError, match="action"):
        game.step(3)
    envs = SnakeVectorEnv(4)
    envs.reset(seed=0)
    with pytest.raises(ValueError, match="actions"):
        envs.step(np.array([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="shape"):
        envs.step(np.array([0, 1]))
    with pytest.raises(ValueError, match="autoreset_mode"):
        SnakeVectorEnv(4, autoreset_mode=AutoresetMode.DISABLED)
    with pytest.raises(ValueError, match="num_envs"):
        SnakeVectorEnv(0)


def test_reference_min_board():
    assert REFERENCE_MIN_BOARD == 7
    Snake(height=3, width=3)  # the game itself takes small boards


# Gymnasium integration and rendering ------------------------------------------------------------
def test_check_env_passes():
    register_envs()
    for mode in (None, "ansi", "rgb_array"):
        check_env(gym.make("kerasrl/Snake-v0", render_mode=mode).unwrapped)


def test_registration_is_idempotent_and_makes_both_kinds(recwarn):
    register_envs()
    register_envs()
    assert not [w for w in recwarn if "kerasrl" in str(w.message)]
    env = gym.make("kerasrl/Snake-v0")
    assert isinstance(env.unwrapped, Snake) and env.unwrapped.height == 9
    assert env.unwrapped.max_steps_without_fruit is None
    envs = gym.make_vec("kerasrl/Snake-v0", num_envs=1024, vectorization_mode="vector_entry_point")
    assert isinstance(envs, SnakeVectorEnv) and envs.num_envs == 1024
    assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    obs, info = envs.reset(seed=0)
    assert obs.shape == (1024, 9, 9, 2) and obs.dtype == np.float32
    envs = gym.make_vec(
        "kerasrl/Snake-v0", num_envs=4, vectorization_mode="vector_entry_point",
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    envs = gym.make_vec(
        "kerasrl/Snake-v0", num_envs=4, vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )
    assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP


def test_render_ansi_and_rgb():
    game = Snake(height=4, width=5, render_mode="ansi")
    game.reset(seed=0)
    game._set_state([(1, 2), (1, 1)], "right", [(3, 4)])
    assert game.render() == ".....\n.oH..\n.....\n....*\n"
    game = Snake(height=4, width=5, render_mode="rgb_array")
    game.reset(seed=0)
    image = game.render()
    assert image.shape == (40, 50, 3) and image.dtype == np.uint8
    assert Snake().render() is None
    envs = SnakeVectorEnv(3, height=4, width=5, render_mode="ansi")
    envs.reset(seed=0)
    frames = envs.render()
    assert len(frames) == 3 and all(frame.count("H") == 1 for frame in frames)


# The vector env against independent single games ------------------------------------------------
def _assert_infos_equal(got, want):
    assert set(got) == set(want)
    for key, value in want.items():
        if key == "final_obs":
            for a, b in zip(got[key], value):
                assert (a is None and b is None) or np.array_equal(a, b)
        elif isinstance(value, dict):
            _assert_infos_equal(got[key], value)
        else:
            assert got[key].dtype == value.dtype, key
            np.testing.assert_array_equal(got[key], value, err_msg=key)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_vector_env_equals_independent_single_games(mode):
    configs = [
        dict(height=4, width=4, n_fruits=1, max_steps_without_fruit=6),
        dict(height=5, width=5, n_fruits=2, max_steps_without_fruit=4),
        dict(height=3, width=4, n_fruits=1, initial_length=3),
        dict(height=2, width=2, n_fruits=1),
        dict(height=1, width=3, n_fruits=1),
    ]
    seen = {"deaths": 0, "fruits": 0, "full_boards": 0, "truncations": 0, "resets": 0}
    total_steps = 0
    for number, config in enumerate(configs):
        n_games = 12
        vector = SnakeVectorEnv(n_games, autoreset_mode=mode, **config)
        # SyncVectorEnv runs plain Snake games, seeded seed + i, with Gymnasium's own auto-reset.
        singles = SyncVectorEnv([lambda: Snake(**config) for _ in range(n_games)], autoreset_mode=mode)
        obs_v, info_v = vector.reset(seed=100 * number)
        obs_s, info_s = singles.reset(seed=100 * number)
        np.testing.assert_array_equal(obs_v, obs_s)
        _assert_infos_equal(info_v, info_s)
        rng = np.random.default_rng(number)
        for t in range(400):
            # Mostly straight, so that snakes live long enough to grow.
            actions = rng.choice(3, size=n_games, p=[0.6, 0.2, 0.2])
            out_v = vector.step(actions)
            out_s = singles.step(actions)
            for got, want, name in zip(out_v[:4], out_s[:4], ["obs", "rewards", "terminated", "truncated"]):
                assert got.dtype == want.dtype, name
                np.testing.assert_array_equal(got, want, err_msg=f"{name} config {config} step {t}")
            _assert_infos_equal(out_v[4], out_s[4])
            rewards, terminated, truncated = out_s[1], out_s[2], out_s[3]
            seen["deaths"] += int(np.sum(rewards == -10.0))
            seen["fruits"] += int(np.sum(rewards == 10.0))
            seen["full_boards"] += int(np.sum((rewards == 10.0) & terminated))
            seen["truncations"] += int(np.sum(truncated))
            seen["resets"] += int(np.sum(terminated | truncated))
            total_steps += n_games
    assert total_steps >= 20_000
    assert all(count > 10 for count in seen.values()), seen


def test_vector_env_fruits_on_free_squares_and_counts():
    envs = SnakeVectorEnv(256, height=3, width=3, n_fruits=2)
    obs, _ = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(200):
        assert not np.any((obs[..., 0] > 0) & (obs[..., 1] > 0))
        assert np.all((obs[..., 0] == 2).sum(axis=(1, 2)) == 1)
        assert np.all(obs[..., 1].sum(axis=(1, 2)) <= 2)
        obs, *_ = envs.step(rng.integers(0, 3, 256))


def test_vector_env_seeds_and_reset_mask():
    envs = SnakeVectorEnv(4, height=5, width=5)
    first, _ = envs.reset(seed=[7, 8, 9, 10])
    again, _ = envs.reset(seed=7)
    np.testing.assert_array_equal(first, again)
    single, _ = Snake(height=5, width=5).reset(seed=9)
    np.testing.assert_array_equal(first[2], single)
    envs.step(np.zeros(4, dtype=np.int64))
    before = envs._observations()
    obs, info = envs.reset(options={"reset_mask": np.array([False, True, False, False])})
    np.testing.assert_array_equal(obs[[0, 2, 3]], before[[0, 2, 3]])
    assert info["fruits_eaten"].shape == (4,)


def test_deadly_move_masks_match_the_rules_and_the_single_game():
    """mask_deadly_moves=True: a move is masked exactly when taking it dies at once (unless every
    move dies), and the vector env's masks, final masks included, are the single games'."""
    import copy

    n = 6
    vec = SnakeVectorEnv(n, height=5, width=5, max_steps_without_fruit=30, mask_deadly_moves=True,
                         autoreset_mode=AutoresetMode.SAME_STEP)
    games = [Snake(height=5, width=5, max_steps_without_fruit=30, mask_deadly_moves=True)
             for _ in range(n)]
    _, info = vec.reset(seed=3)
    masks = np.stack([g.reset(seed=3 + i)[1]["action_mask"] for i, g in enumerate(games)])
    np.testing.assert_array_equal(info["action_mask"], masks)
    rng, ended = np.random.default_rng(0), 0
    for _ in range(400):
        for game, mask in zip(games, masks):
            dies = []
            for action in range(3):
                _, reward, terminated, _, _ = copy.deepcopy(game).step(action)
                dies.append(terminated and reward == DEATH_REWARD)
            expected = np.ones(3, np.int8) if all(dies) else 1 - np.array(dies, np.int8)
            np.testing.assert_array_equal(mask, expected)
        actions = rng.integers(0, 3, n)
        obs, _, _, _, info = vec.step(actions)
        masks = []
        for i, game in enumerate(games):
            game_obs, _, terminated, truncated, game_info = game.step(int(actions[i]))
            if terminated or truncated:
                ended += 1
                np.testing.assert_array_equal(info["final_info"]["action_mask"][i],
                                              game_info["action_mask"])
                game_obs, game_info = game.reset()
            np.testing.assert_array_equal(obs[i], game_obs)
            masks.append(game_info["action_mask"])
        np.testing.assert_array_equal(info["action_mask"], np.stack(masks))
    assert ended > 50
    assert "action_mask" not in Snake().reset(seed=0)[1]  # off by default
