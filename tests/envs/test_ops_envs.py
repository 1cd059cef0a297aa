"""The keras.ops environments against their references, step for step, on the backend under test.

Each classic-control env is compared with Gymnasium's own env put in the same state before every
step (so errors never compound): observations and rewards within float32 tolerance
(`RTOL`/`ATOL`, the figures docs/ops_envs.md gives), termination and truncation exactly, auto-reset
included. Some games are moved to random states each step so that terminations happen (a
random policy never reaches MountainCar's goal). The ops Snake is compared with the numpy Snake
exactly: whole games, resets included, with the numpy game drawing the same random numbers.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from kerasrl import backend
from kerasrl.envs.ops import base
from kerasrl.envs.ops.base import make_rng, numpy_bits
from kerasrl.envs.snake import Snake as NumpySnake

pytestmark = pytest.mark.backend

RTOL, ATOL = 1e-5, 1e-5
# Acrobot's RK4 step at the speed bounds (28 rad/s) loses more float32 digits.
TOLERANCE = {"Acrobot": (1e-4, 1e-4)}
N_GAMES, N_STEPS = 6, 100


def _ops_env(name, **kwargs):
    from kerasrl.envs.ops.gym import make_ops_env

    return make_ops_env(name, **kwargs)


def _compiled(env, params):
    reset = backend.compile(lambda rng: env.reset(rng, params))
    step = backend.compile(lambda state, action: env.step(state, action, params))
    return reset, step


def _set_physics(state, physics):
    from keras import ops

    return dict(state, physics=ops.convert_to_tensor(physics.astype(np.float32)))


# Per env: Gymnasium id, ops parameters, how to read the reference's observation, and where to
# scatter some games each step so that terminations happen.
def _cartpole_random(rng, n):
    return rng.uniform([-2.5, -2, -0.25, -2], [2.5, 2, 0.25, 2], (n, 4))


def _acrobot_random(rng, n):
    return rng.uniform([-np.pi, -np.pi, -4 * np.pi, -9 * np.pi], [np.pi, np.pi, 4 * np.pi, 9 * np.pi], (n, 4))


def _mountain_car_random(rng, n):
    return rng.uniform([0.3, -0.07], [0.6, 0.07], (n, 2))


def _pendulum_random(rng, n):
    return rng.uniform([-3 * np.pi, -8], [3 * np.pi, 8], (n, 2))


CLASSIC = {
    "CartPole": ("CartPole-v1", 12, lambda e: np.array(e.state, np.float32), _cartpole_random),
    "Acrobot": ("Acrobot-v1", 15, lambda e: e._get_ob(), _acrobot_random),
    "MountainCar": ("MountainCar-v0", 30, lambda e: np.array(e.state, np.float32), _mountain_car_random),
    "Pendulum": ("Pendulum-v1", 30, lambda e: e._get_obs(), _pendulum_random),
}
RESET_BOUNDS = {
    "CartPole": ([-0.05] * 4, [0.05] * 4),
    "Acrobot": ([-0.1] * 4, [0.1] * 4),
    "MountainCar": ([-0.6, 0.0], [-0.4, 0.0]),
    "Pendulum": ([-np.pi, -1.0], [np.pi, 1.0]),
}


@pytest.mark.parametrize("name", sorted(CLASSIC))
def test_classic_env_matches_gymnasium(name):
    env_id, max_steps, reference_obs, scatter = CLASSIC[name]
    rtol, atol = TOLERANCE.get(name, (RTOL, ATOL))
    env = _ops_env(name)
    params = env.params(max_steps=max_steps)
    reset, step = _compiled(env, params)
    references = [gym.make(env_id, max_episode_steps=max_steps) for _ in range(N_GAMES)]
    chooser = np.random.default_rng(0)
    obs, state = reset(make_rng(1, N_GAMES))
    low, high = (np.array(b) for b in RESET_BOUNDS[name])
    physics = np.array(backend.to_numpy(state["physics"]))
    assert np.all((physics >= low) & (physics <= high))
    assert len({tuple(p) for p in physics}) == N_GAMES  # every game its own start
    for reference, start in zip(references, physics):
        reference.reset(seed=0)
        reference.unwrapped.state = start.astype(np.float64)
    counts = {"terminated": 0, "truncated": 0}
    for t in range(N_STEPS):
        if t % 3 == 2:  # move some games to states where episodes end
            physics = np.array(backend.to_numpy(state["physics"]))
            moved = chooser.random(N_GAMES) < 0.3
            physics[moved] = scatter(chooser, int(moved.sum()))
            state = _set_physics(state, physics)
            for reference, start in zip(references, physics):
                reference.unwrapped.state = start.astype(np.float64)
        if name == "Pendulum":
            actions = chooser.uniform(-2.5, 2.5, (N_GAMES, 1)).astype(np.float32)
        else:
            actions = chooser.integers(0, env.action_space.n, N_GAMES).astype(np.int32)
        obs, state, reward, terminated, truncated, info = backend.to_numpy(step(state, backend.feed(actions)))
        physics = np.array((backend.to_numpy(state["physics"])))
        for i, reference in enumerate(references):
            ref_obs, ref_reward, ref_terminated, ref_truncated, _ = reference.step(
                actions[i] if name == "Pendulum" else int(actions[i]))
            np.testing.assert_allclose(info["final_obs"][i], ref_obs, rtol=rtol, atol=atol, err_msg=f"step {t} game {i}")
            np.testing.assert_allclose(reward[i], ref_reward, rtol=rtol, atol=atol)
            assert (terminated[i], truncated[i]) == (ref_terminated, ref_truncated), f"step {t} game {i}"
            if ref_terminated or ref_truncated:
                counts["terminated" if ref_terminated else "truncated"] += 1
                # Auto-reset: a fresh start, its observation returned, the clock at zero.
                assert np.all((physics[i] >= low) & (physics[i] <= high))
                assert backend.to_numpy(state["time"])[i] == 0
                reference.reset()
            else:
                assert np.array_equal(obs[i], info["final_obs"][i])
            reference.unwrapped.state = physics[i].astype(np.float64)
            np.testing.assert_allclose(obs[i], reference_obs(reference.unwrapped), rtol=rtol, atol=atol)
    assert counts["truncated"] > 0
    assert counts["terminated"] > 0 or name == "Pendulum"


class _SameDraws:
    """A stand-in for a numpy Snake's generator that returns the ops game's draws, u = k / 2**bits."""

    def __init__(self, rng_state, bits):
        self.state, self.bits = int(rng_state), bits

    def random(self):
        self.state, (k,) = numpy_bits(self.state, 1, self.bits)
        return k / 2**self.bits


SNAKE_CASES = {
    "reference 9x9": dict(board={}, params={}),
    "6x5, 3 fruits, length 3, both limits": dict(board=dict(height=6, width=5, n_fruits=3, initial_length=3),
                                                 params=dict(max_steps_without_fruit=8, max_steps=20)),
}


def _safe_action(game, chooser):
    """A random action among those that do not kill the numpy game at once (any if none is safe)."""
    from kerasrl.envs.snake import _MOVES, _TURNS

    safe = []
    for action in range(3):
        d_row, d_column = _MOVES[(game._heading + _TURNS[action]) % 4]
        row, column = game._snake[0][0] + d_row, game._snake[0][1] + d_column
        if 0 <= row < game.height and 0 <= column < game.width and (row, column) not in game._snake:
            safe.append(action)
    return int(chooser.choice(safe or [0, 1, 2]))


@pytest.mark.parametrize("case", sorted(SNAKE_CASES))
def test_snake_matches_numpy_snake_exactly(case):
    board, changes = SNAKE_CASES[case]["board"], SNAKE_CASES[case]["params"]
    env = _ops_env("Snake", **board)
    params = env.params(**changes)
    reset, step = _compiled(env, params)
    rng = make_rng(7, N_GAMES)
    obs, state = backend.to_numpy(reset(rng))
    state = backend.to_tensors(state)
    games = [NumpySnake(**board, max_steps_without_fruit=params.max_steps_without_fruit) for _ in range(N_GAMES)]
    draws = [_SameDraws(r, env.bits) for r in rng]
    for game, drawer in zip(games, draws):
        game._np_random = drawer
    ref_obs = np.stack([game.reset()[0] for game in games])
    np.testing.assert_array_equal(obs, ref_obs)
    ages = np.zeros(N_GAMES, int)
    chooser = np.random.default_rng(3)
    seen = {"fruit": 0, "terminated": 0, "truncated": 0}
    for t in range(N_STEPS):
        # Mostly safe moves, so that snakes live long enough to eat and to be cut by the limits.
        actions = np.array([_safe_action(game, chooser) if chooser.random() < 0.9 else chooser.integers(3)
                            for game in games], np.int32)
        obs, state, reward, terminated, truncated, info = step(state, backend.feed(actions))
        obs, reward, terminated, truncated, info, rng = backend.to_numpy(
            (obs, reward, terminated, truncated, info, state["rng"]))
        ages += 1
        for i, game in enumerate(games):
            ref_obs, ref_reward, ref_terminated, ref_truncated, ref_info = game.step(int(actions[i]))
            # Gymnasium's TimeLimit: truncated at the limit, even on a death there.
            ref_truncated = ref_truncated or (params.max_steps is not None and ages[i] >= params.max_steps)
            where = f"step {t} game {i}"
            np.testing.assert_array_equal(info["final_obs"][i], ref_obs, err_msg=where)
            assert reward[i] == np.float32(ref_reward), where
            assert (terminated[i], truncated[i]) == (ref_terminated, ref_truncated), where
            assert info["fruits_eaten"][i] == ref_info["fruits_eaten"], where
            seen["fruit"] += ref_reward == 10.0
            if ref_terminated or ref_truncated:
                seen["terminated" if ref_terminated else "truncated"] += 1
                ref_obs = game.reset()[0]
                ages[i] = 0
            np.testing.assert_array_equal(obs[i], ref_obs, err_msg=where)
            assert rng[i] == draws[i].state, where  # the same numbers drawn
    assert seen["fruit"] > 0 and seen["terminated"] > 0, seen
    if changes:
        assert seen["truncated"] > 0, seen


def _ops_state(game, env):
    """The ops state (one game) of a numpy Snake's state: lifetimes from the tail (1) to the head."""
    from keras import ops

    life = np.zeros(env.cells, np.int32)
    for age, (row, column) in enumerate(game._snake):
        life[row * env.width + column] = len(game._snake) - age
    fruit = np.zeros(env.cells, np.int32)
    for row, column in game._fruits:
        fruit[row * env.width + column] = 1
    head = game._snake[0][0] * env.width + game._snake[0][1]
    values = dict(life=life[None], fruit=fruit[None], head=[head], heading=[game._heading], length=[len(game._snake)],
                  steps_without_fruit=[game._steps_without_fruit], fruits_eaten=[game._fruits_eaten], rng=[1], time=[0])
    return {key: ops.convert_to_tensor(np.asarray(value, np.int32)) for key, value in values.items()}


def test_snake_fills_the_board_and_bites_its_tail_as_the_numpy_snake():
    from keras import ops

    from kerasrl.envs.snake import Snake as Game

    env = _ops_env("Snake", height=2, width=3)
    # Head at (1, 0) heading up, body around the board, one free square: the fruit at (0, 0).
    # Three copies of the game, one per action, stepped as one batch.
    games = []
    for _ in range(3):
        game = Game(height=2, width=3)
        game._set_state([(1, 0), (1, 1), (1, 2), (0, 2), (0, 1)], "up", [(0, 0)])
        games.append(game)
    states = [backend.to_numpy(_ops_state(game, env)) for game in games]
    state = {key: ops.convert_to_tensor(np.concatenate([s[key] for s in states])) for key in states[0]}
    step = backend.compile(lambda state, action: env.step(state, action, env.default_params))
    _, _, reward, terminated, truncated, info = backend.to_numpy(step(state, backend.feed(np.arange(3, dtype=np.int32))))
    for action, game in enumerate(games):
        ref_obs, ref_reward, ref_terminated, ref_truncated, _ = game.step(action)
        np.testing.assert_array_equal(info["final_obs"][action], ref_obs)
        assert (reward[action], terminated[action], truncated[action]) == (
            np.float32(ref_reward), ref_terminated, ref_truncated)
        # Up fills the board (+10, terminated); left leaves the board; right bites the tail: -10.
        assert (ref_reward, ref_terminated) == ((10.0, True) if action == 0 else (-10.0, True))


def test_random_state_is_the_numpy_reference_on_every_backend():
    from keras import ops

    rng = make_rng(11, 5)
    expected = [numpy_bits(r, 40) for r in rng]
    state = ops.convert_to_tensor(rng)
    draws = []
    for _ in range(40):
        state, k = base.random_bits(state)
        draws.append(backend.to_numpy(k))
    np.testing.assert_array_equal(np.stack(draws, axis=1), [bits for _, bits in expected])
    np.testing.assert_array_equal(backend.to_numpy(state), [s for s, _ in expected])
    # The same seed starts the same CartPoles on any backend: uniform draws in float32.
    obs, _ = _ops_env("CartPole").reset(rng)
    u = np.array([numpy_bits(r, 4)[1] for r in rng], np.float32) / 2**24
    np.testing.assert_allclose(backend.to_numpy(obs), np.float32(-0.05) + np.float32(0.1) * u, rtol=0, atol=1e-8)


def test_vector_env_for_the_agents():
    from kerasrl.envs.ops.gym import OpsVectorEnv
    from kerasrl.envs.vector import final_observations, make_vec_env

    vec = make_vec_env("kerasrl/OpsCartPole-v1", 4)
    assert isinstance(vec, OpsVectorEnv)
    obs, _ = vec.reset(seed=0)
    assert obs.shape == (4, 4) and obs.dtype == np.float32
    again, _ = vec.reset(seed=0)
    np.testing.assert_array_equal(obs, again)
    ended = 0
    for _ in range(60):
        next_obs, reward, terminated, truncated, info = vec.step(np.ones(4, np.int64))
        done = terminated | truncated
        real = final_observations(next_obs, done, info)
        for i in np.flatnonzero(done):
            ended += 1
            assert abs(real[i][2]) > 12 * 2 * np.pi / 360 or abs(real[i][0]) > 2.4  # the pole fell
            assert np.all(np.abs(next_obs[i]) <= 0.05)  # and a new game began
        assert isinstance(reward, np.ndarray) and np.all(reward == 1.0)
    assert ended >= 4
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        vec.step(np.ones(3, np.int64))
    with pytest.raises(ValueError, match=r"in \[0, 2\)"):
        vec.step(np.full(4, 2))

    # Stepped through the vector env's compiled step, the games are the eager env's, step for step.
    snake = OpsVectorEnv("Snake", 3, max_steps_without_fruit=20)
    snake.reset(seed=5)
    state = backend.to_tensors(backend.to_numpy(snake._state))
    actions = np.random.default_rng(0).integers(0, 3, size=(80, 3)).astype(np.int32)
    for action in actions:
        obs, reward, *_ = snake.step(action)
        eager_obs, state, eager_reward, *_ = snake.env.step(state, backend.to_tensors(action), snake.params)
        np.testing.assert_array_equal(obs, backend.to_numpy(eager_obs))
        np.testing.assert_array_equal(reward, backend.to_numpy(eager_reward))

    single = gym.make("kerasrl/OpsSnake-v0")
    first, _ = single.reset(seed=3)
    assert first.shape == (9, 9, 2) and first[..., 0].max() == 2.0
    for _ in range(20):  # straight on from column >= 1: the wall is reached within 9 steps
        last, reward, terminated, truncated, _ = single.step(0)
        if terminated:
            break
    assert terminated and reward == -10.0 and last[..., 0].max() == 2.0


def test_envs_made_alike_share_their_compiled_games_and_others_do_not():
    # Each compiled function compiles once per input signature: a second agent, an evaluation env
    # or each of many seeds' envs made alike reuses the first one's programs.
    from kerasrl.envs.ops.gym import OpsVectorEnv

    first, second = OpsVectorEnv("CartPole", 2), OpsVectorEnv("CartPole", 5)
    assert (first._reset, first._step) == (second._reset, second._step)
    assert OpsVectorEnv("CartPole", 2, max_steps=50)._step is not first._step  # other params
    small, large = OpsVectorEnv("Snake", 2, height=5, width=5), OpsVectorEnv("Snake", 2, height=7, width=7)
    assert small._step is not large._step  # other settings of the env itself
    assert OpsVectorEnv("Snake", 3, height=5, width=5)._step is small._step
    # Sharing changes nothing a game sees: two envs made alike play the same games from one seed,
    # each its own state, stepped in turn.
    other = OpsVectorEnv("CartPole", 2)
    np.testing.assert_array_equal(first.reset(seed=4)[0], other.reset(seed=4)[0])
    for action in np.random.default_rng(1).integers(0, 2, size=(40, 2)):
        step_a, step_b = first.step(action), other.step(action)
        np.testing.assert_array_equal(step_a[0], step_b[0])
        np.testing.assert_array_equal(step_a[2], step_b[2])


def test_bad_input_is_named():
    from kerasrl.envs.ops.gym import OpsVectorEnv, make_ops_env

    with pytest.raises(ValueError, match="unknown parameter"):
        make_ops_env("CartPole").params(gravity_=1.0)
    with pytest.raises(ValueError, match="Unknown ops env 'Cartpole'"):
        make_ops_env("Cartpole")
    with pytest.raises(ValueError, match="unknown keyword"):
        OpsVectorEnv("Pendulum", 2, height=3)
    with pytest.raises(RuntimeError, match="before reset"):
        OpsVectorEnv("Acrobot", 2).step(np.zeros(2, int))
    with pytest.raises(ValueError, match="SAME_STEP"):
        OpsVectorEnv("CartPole", 2, autoreset_mode="NextStep")
    with pytest.raises(ValueError, match="num_envs"):
        make_rng(0, 0)
    with pytest.raises(ValueError, match="initial_length"):
        make_ops_env("Snake", width=3, initial_length=4)


def test_seeding_follows_gymnasiums_contract(monkeypatch):
    """Two envs reset with the same seed, then again without one, stay the same (reset(seed=None)
    goes on from the games' generators, as Gymnasium's envs go on from `np_random`)."""
    from gymnasium.utils.env_checker import check_env

    one, two = gym.make("kerasrl/OpsCartPole-v1"), gym.make("kerasrl/OpsCartPole-v1")
    seeded = one.reset(seed=7)[0]
    np.testing.assert_array_equal(two.reset(seed=7)[0], seeded)
    one.step(0)  # steps in between do not matter: a reset starts from the generators alone
    for _ in range(3):
        obs = one.reset()[0]
        np.testing.assert_array_equal(two.reset()[0], obs)
        assert not np.array_equal(obs, seeded)  # a new episode each time
    # Gymnasium's own check: seeding, and each render mode (human, rgb_array) made through the spec.
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # `human` opens a window
    check_env(one.unwrapped)
