"""The keras.ops MinAtar games against the `minatar` package (1.0.15), step for step, on the
backend under test.

The reference draws from numpy's RandomState, which the ops games cannot share, so its generator
is replaced by `Replay`, which hands it the draws the ops game made at that step (computed from
the game's xorshift state with `numpy_bits`): `rand()` is u = k / 2**24, `randint(n)` is
floor(u * n). Both then play the same game, sticky actions included (probability 0.1, as the
reference's default), so every step is compared, resets too: observation, reward and termination,
and the whole state (every timer, the random state) read back from the reference's game object
with `state_from_minatar`. Every few steps some games are moved to random states of the reference
(bricks cleared, crowded rows, ramped speeds, a wave about to be cleared, the clock about to run
out) so that rare rules run too; the ops game is then set from the reference with the converter.
"""

from __future__ import annotations

import numpy as np
import pytest

from kerasrl import backend
from kerasrl.envs.ops.base import make_rng, numpy_bits

GAMES = {  # ops name: (reference module, draws per step, draws per reset)
    "MinAtar-Breakout": ("breakout", 1, 1),
    "MinAtar-Asterix": ("asterix", 4, 0),
    "MinAtar-Freeway": ("freeway", 17, 16),
    "MinAtar-SpaceInvaders": ("space_invaders", 1, 0),
}
# Half the steps on TensorFlow and PyTorch (eager, slow to step): JAX runs the thorough check, the
# others show the same keras.ops code means the same there.
N_GAMES, SCATTER_EVERY = 8, 5
N_STEPS = 120 if backend.NAME == "jax" else 60


class Replay:
    """Stands in for the reference's `numpy.random.RandomState`: serves the ops game's draws."""

    def __init__(self):
        self.draws: list[int] = []

    def load(self, draws):
        self.draws = list(draws)

    def _u(self) -> float:
        return self.draws.pop(0) / (1 << 24)

    def rand(self, *size):
        return self._u() if not size else np.array([self._u() for _ in range(size[0])])

    def randint(self, low, high=None, size=None):
        low, high = (0, low) if high is None else (low, high)

        def one():
            return low + int(self._u() * (high - low))

        return one() if size is None else np.array([one() for _ in range(size)])


def _scatter(name, game, rng):
    """Move one reference game (its `env`) to a random state of its rules."""
    if name == "MinAtar-Breakout":
        game.brick_map = np.zeros((10, 10))
        game.brick_map[1:4] = rng.random((3, 10)) < rng.choice([0.0, 0.05, 0.5])
        game.ball_x, game.ball_y, game.ball_dir = int(rng.integers(10)), int(rng.integers(1, 9)), int(rng.integers(4))
        game.last_x, game.last_y = game.ball_x, game.ball_y
        game.pos, game.strike = int(rng.integers(10)), bool(rng.integers(2))
    elif name == "MinAtar-Asterix":
        full = rng.random() < 0.3
        game.entities = [[int(rng.integers(10)), slot + 1, bool(rng.integers(2)), bool(rng.random() < 0.4)]
                         if full or rng.random() < 0.5 else None for slot in range(8)]
        game.player_x, game.player_y = int(rng.integers(10)), int(rng.integers(1, 9))
        game.spawn_speed, game.move_speed = int(rng.integers(1, 11)), int(rng.integers(1, 6))
        game.spawn_timer = int(rng.integers(game.spawn_speed + 1))
        game.move_timer = int(rng.integers(game.move_speed + 1))
        game.ramp_timer, game.ramp_index = int(rng.integers(-1, 3)), int(rng.integers(20))
    elif name == "MinAtar-Freeway":
        for car in game.cars:
            speed = int(rng.integers(1, 6)) * int(rng.choice([-1, 1]))
            car[:] = [int(rng.integers(10)), car[1], int(rng.integers(abs(speed) + 1)), speed]
        # Often one move from the top, free to move: an `up` scores.
        game.pos = int(rng.choice([1, 1, rng.integers(1, 10)]))
        game.move_timer = int(rng.choice([0, 0, rng.integers(4)]))
        game.terminate_timer = int(rng.choice([0, 1, 1000]))
    else:
        aliens = rng.random((10, 10)) < rng.choice([0.02, 0.2])
        aliens[rng.integers(9), rng.integers(10)] = True
        game.alien_map = aliens.astype(float)
        game.f_bullet_map = (rng.random((10, 10)) < 0.1).astype(float)
        game.e_bullet_map = (rng.random((10, 10)) < 0.1).astype(float)
        game.alien_dir = int(rng.choice([-1, 1]))
        game.enemy_move_interval = int(rng.integers(6, 13))
        game.alien_move_timer = int(rng.integers(2))
        game.alien_shot_timer = int(rng.integers(2))
        game.shot_timer, game.pos = int(rng.integers(3)), int(rng.integers(10))


def _assert_same_state(env, state, references, rng, where):
    """The ops games' whole state equals the reference games', with the random state `rng`."""
    expected = env.state_from_minatar(references, rng)
    state = backend.to_numpy(state)
    assert set(state) == set(expected), where
    for key in expected:
        if key != "time":  # the ops game's step count (for time limits), which the reference has not
            np.testing.assert_array_equal(state[key], expected[key], err_msg=f"{where}: {key}")


@pytest.mark.backend
@pytest.mark.parametrize("name", sorted(GAMES))
def test_minatar_games_match_the_reference_step_for_step(name):
    import minatar  # the reference, in the dev extra (it imports seaborn: not at collection)

    from kerasrl.envs.ops.gym import make_ops_env

    game, step_draws, reset_draws = GAMES[name]
    env = make_ops_env(name)
    params = env.default_params
    assert params.sticky_action_prob == 0.1 and params.difficulty_ramping
    reset = backend.compile(lambda rng: env.reset(rng, params))
    step = backend.compile(lambda state, action: env.step(state, action, params))
    replay = Replay()
    references = [minatar.Environment(game) for _ in range(N_GAMES)]
    for reference in references:
        reference.random = reference.env.random = replay
    assert tuple(env.action_set) == tuple(references[0].minimal_action_set())
    assert env.observation_space.shape == tuple(references[0].state_shape())

    rng = make_rng(7, N_GAMES)
    obs, state = backend.to_numpy(reset(rng))
    for i, reference in enumerate(references):
        replay.load(numpy_bits(rng[i], reset_draws)[1])
        reference.reset()
        np.testing.assert_array_equal(obs[i], reference.state())
    after = np.array([numpy_bits(r, reset_draws)[0] for r in rng], np.int32)
    _assert_same_state(env, state, references, after, "reset")

    chooser = np.random.default_rng(0)
    counts = {"sticky": 0, "reward": 0, "terminal": 0}
    for t in range(N_STEPS):
        if t % SCATTER_EVERY == SCATTER_EVERY - 1:
            for i in chooser.choice(N_GAMES, N_GAMES // 2, replace=False):
                _scatter(name, references[i].env, chooser)
            state = env.state_from_minatar(references, state["rng"])
        actions = chooser.integers(env.action_space.n, size=N_GAMES).astype(np.int32)
        before = backend.to_numpy(state)["rng"]
        obs, state, reward, terminated, truncated, info = backend.to_numpy(step(backend.to_tensors(state), actions))
        assert not truncated.any()
        expected_rng = np.zeros(N_GAMES, np.int32)
        for i, reference in enumerate(references):
            where = f"{name}, step {t}, game {i}"
            _, draws = numpy_bits(before[i], step_draws + reset_draws)
            replay.load(draws[:step_draws])
            counts["sticky"] += draws[0] < 0.1 * (1 << 24) and env.action_set[actions[i]] != reference.last_action
            expected_reward, done = reference.act(env.action_set[actions[i]])
            np.testing.assert_array_equal(info["final_obs"][i], reference.state(), err_msg=where)
            assert reward[i] == expected_reward and terminated[i] == done, where
            counts["reward"] += expected_reward > 0
            counts["terminal"] += done
            if done:
                replay.load(draws[step_draws:])
                reference.reset()
                reference.last_action = 0  # the ops game starts every episode at action 0
            np.testing.assert_array_equal(obs[i], reference.state(), err_msg=where)
            expected_rng[i] = numpy_bits(before[i], step_draws + (reset_draws if done else 0))[0]
        _assert_same_state(env, state, references, expected_rng, f"{name}, step {t}")
    # The comparison saw the rules that matter: sticky actions that changed the action, rewards
    # and ends of games (the scattered states make these happen in every game).
    assert counts["sticky"] > 5 and counts["reward"] > 5 and counts["terminal"] > 5, counts


@pytest.mark.backend
def test_ramping_and_sticky_actions_follow_the_params():
    """Ramping off keeps Asterix's speeds; sticky_action_prob=1 repeats action 0 forever."""
    from kerasrl.envs.ops.gym import make_ops_env

    env = make_ops_env("MinAtar-Asterix")
    for ramping, expected in ((True, 9), (False, 10)):
        params = env.params(difficulty_ramping=ramping)
        _, state = env.reset(make_rng(0, 2), params)
        state = dict(backend.to_numpy(state), ramp_timer=np.full(2, -1, np.int32))  # ramps this step
        _, state, *_ = env.step(backend.to_tensors(state), np.zeros(2, np.int32), params)
        assert backend.to_numpy(state)["spawn_speed"].tolist() == [expected] * 2
    breakout = make_ops_env("MinAtar-Breakout")
    params = breakout.params(sticky_action_prob=1.0)
    _, state = breakout.reset(make_rng(0, 2), params)
    _, state, *_ = breakout.step(state, np.array([1, 2], np.int32), params)
    assert backend.to_numpy(state)["pos"].tolist() == [4, 4]  # left and right ignored
    with pytest.raises(ValueError, match=r"sticky_action_prob must be in \[0, 1\], got 1.5"):
        breakout.params(sticky_action_prob=1.5)


def test_frames_are_the_references_picture():
    """rgb_array frames are the reference's picture of the observation (`minatar.gym`'s rgb_array:
    each cell the colour of its highest channel in seaborn's cubehelix palette, black if empty),
    16 pixels a cell, as uint8."""
    import gymnasium as gym
    from matplotlib import colormaps

    import kerasrl  # noqa: F401 -- registers the envs

    for game in ("Breakout", "Freeway", "SpaceInvaders"):  # 4, 7 and 6 channels (Asterix: 4)
        env = gym.make(f"kerasrl/OpsMinAtar-{game}-v1", render_mode="rgb_array")
        assert env.metadata["render_modes"] == ["rgb_array"] and env.metadata["render_fps"] == 20
        obs, _ = env.reset(seed=0)
        for _ in range(5):
            obs, *_ = env.step(env.action_space.sample())
        channels = obs.shape[-1]
        # seaborn's color_palette("cubehelix", n): matplotlib's map at n inner points.
        palette = np.concatenate([np.zeros((1, 3)),
                                  colormaps["cubehelix"](np.linspace(0, 1, channels + 2)[1:-1])[:, :3]])
        picture = palette[np.amax(obs.astype(bool) * np.reshape(np.arange(channels) + 1, (1, 1, -1)), 2)]
        expected = np.repeat(np.repeat(np.round(picture * 255).astype(np.uint8), 16, axis=0), 16, axis=1)
        frame = env.render()
        assert frame.dtype == np.uint8 and frame.shape == (160, 160, 3)
        np.testing.assert_array_equal(frame, expected)
        assert len(np.unique(frame.reshape(-1, 3), axis=0)) >= 2  # not a blank picture
        env.close()
    with pytest.raises(ValueError, match=r"render_mode must be None or one of \['rgb_array'\], got 'human'"):
        gym.make("kerasrl/OpsMinAtar-Breakout-v1", render_mode="human")


# -- the compiled loop on the MinAtar games ---------------------------------------------------------
@pytest.mark.slow_on_other_backends
@pytest.mark.backend
@pytest.mark.slow  # ~20 s a game for the two compilations; the fast tier's compiled loops run CartPole
@pytest.mark.parametrize("name", sorted(GAMES))
def test_compiled_dqn_and_ppo_train_two_seeds_on_each_game(name):
    """A short fit of both compiled loops, two seeds at once: steps counted, episodes booked on
    Breakout (random play ends within a few dozen steps), finite losses, each seed its own weights.
    Compiling both loops takes about 15 s a game on JAX: Breakout in the fast tier, the others slow
    (every game's step is compiled in the fast tier by the reference test above)."""
    from kerasrl.compiled import CompiledDQN, CompiledPPO
    from kerasrl.envs.ops.gym import make_ops_env
    from kerasrl.networks import mlp

    env = make_ops_env(name)
    model = mlp(env.observation_space.shape, env.action_space.n, (16,))  # the default CNN is slow to compile
    dqn = CompiledDQN(name, seeds=[0, 1], model=model, n_envs=4, learning_starts=32, train_freq=4,
                      gradient_steps=1, batch_size=16, buffer_size=256, target_update_interval=32)
    ppo = CompiledPPO(name, seeds=[0, 1], n_envs=4, n_steps=32, batch_size=64, n_epochs=1, hidden_sizes=(16,))
    for loop in (dqn, ppo):
        history = loop.fit(256, rounds_per_call=4)
        assert loop.num_timesteps == 256 and np.isfinite(history[-1]["loss"]).all(), history
        assert not np.array_equal(loop.weights(0)[0], loop.weights(1)[0])
        if name == "MinAtar-Breakout":
            assert (sum(record["episodes"] for record in history) > 0).all(), history


@pytest.mark.slow
@pytest.mark.backend
def test_ppo_learns_minatar_breakout():
    """PPO in the compiled loop, PureJaxRL's MinAtar settings (64 envs x 128 steps, 4 epochs of 8
    minibatches, lr 5e-4 annealed, clip 0.2, entropy 0.01) on a 64x64 ReLU MLP, 1M steps, two seeds
    at once. Random play scores about 0.6 a game; measured on JAX: 5.6 and 5.5 over the last
    rollouts, greedy 6.0 and 5.7."""
    from kerasrl.compiled import CompiledPPO

    agent = CompiledPPO("MinAtar-Breakout", seeds=[0, 1], n_envs=64, n_steps=128, batch_size=1024, n_epochs=4,
                        learning_rate=5e-4, lr_schedule="linear", gamma=0.99, gae_lambda=0.95, clip_range=0.2,
                        ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5, hidden_sizes=(64, 64), activation="relu")
    history = agent.fit(1_000_000, rounds_per_call=10)
    first, last = history[0]["mean_return"], history[-1]["mean_return"]
    assert (first < 1.5).all() and (last >= 4.0).all(), [record["mean_return"] for record in history]
    for seed in range(2):
        assert agent.evaluate(seed, n_episodes=10, max_steps=5_000)[0] >= 4.0
