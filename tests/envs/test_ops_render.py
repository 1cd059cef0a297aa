"""Every env kerasrl registers draws as its reference does: the same render modes and frame rate,
and each frame pixel for pixel the reference's own drawing of the same game (Gymnasium's
classic-control envs put in the game's state; the numpy Snake given the game's snake and fruit).
Drawing is numpy after the env's boundary, so this runs on the default backend only."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import kerasrl  # noqa: F401 -- registers the envs
from kerasrl import backend, registry

REFERENCES = {
    "kerasrl/OpsCartPole-v1": "CartPole-v1",
    "kerasrl/OpsAcrobot-v1": "Acrobot-v1",
    "kerasrl/OpsMountainCar-v0": "MountainCar-v0",
    "kerasrl/OpsPendulum-v1": "Pendulum-v1",
    "kerasrl/OpsSnake-v0": "kerasrl/Snake-v0",
    "kerasrl/OpsSnakeTimeLimit-v0": "kerasrl/Snake-v0",
    "kerasrl/Snake-v0": "kerasrl/Snake-v0",
    # The minatar package's MinAtar/*-v1 (not a dependency): tests/envs/test_ops_minatar.py.
    **{f"kerasrl/OpsMinAtar-{game}-v1": f"MinAtar/{game}-v1"
       for game in ("Breakout", "Asterix", "Freeway", "SpaceInvaders")},
    # ALE's games, preprocessed (kerasrl.envs.atari): render() is ale-py's own, passed through.
    **{f"kerasrl/{game}-v5": f"ALE/{game}-v5"
       for game in ("Pong", "Breakout", "SpaceInvaders", "Seaquest", "Qbert", "BeamRider",
                    "Enduro", "Asteroids", "MsPacman")},
    # CartPole with the velocities hidden (kerasrl.envs.partial): Gymnasium's CartPole draws it.
    "kerasrl/CartPoleNoVel-v1": "CartPole-v1",
    # Bit flipping (kerasrl.envs.goals) draws itself: tests/envs/test_goals.py.
    "kerasrl/BitFlipping-v0": "kerasrl/BitFlipping-v0",
}
# The keras.ops envs, whose frames are checked here against their references' drawing.
OPS_IDS = sorted(env_id for env_id in REFERENCES
                 if env_id.startswith("kerasrl/Ops") and "MinAtar" not in env_id)


def test_every_registered_env_is_here():
    assert set(REFERENCES) == set(registry.ENV_IDS)


def _game(env) -> dict:
    """The one game's state of an ops env made by gymnasium.make, as numpy (test-only access)."""
    return {key: value[0] for key, value in backend.to_numpy(env.unwrapped._vector.games).items()}


def _put_reference_in(reference, game: dict, action) -> None:
    """Put the reference env (unwrapped) in the ops game's state, as its own reset/step would."""
    if "physics" in game:  # classic control: the ops state is the reference's `state`
        reference.state = game["physics"].astype(np.float64)
        if hasattr(reference, "last_u"):  # Pendulum: the step's torque, clipped as its step clips
            reference.last_u = None if action is None else np.clip(action, -2.0, 2.0)[0]
        return
    height, width = reference.height, reference.width
    life = game["life"].reshape(height, width)  # head: the length, tail: 1
    body = sorted(zip(*np.nonzero(life)), key=lambda square: -life[square])
    fruits = list(zip(*np.nonzero(game["fruit"].reshape(height, width))))
    reference._set_state(body, int(game["heading"]), fruits)


@pytest.mark.parametrize("env_id", OPS_IDS)
def test_frames_are_the_references_drawing(env_id):
    """rgb_array frames pixel for pixel; Snake's text in the next test (the same drawing of the
    observation, `render_ansi`, as the numpy Snake's)."""
    env = gym.make(env_id, render_mode="rgb_array")
    reference = gym.make(REFERENCES[env_id], render_mode="rgb_array")
    assert env.metadata["render_modes"] == reference.metadata["render_modes"]  # ansi for Snake
    assert env.metadata["render_fps"] == reference.metadata["render_fps"]
    reference.reset(seed=0)
    env.action_space.seed(1)
    env.reset(seed=2)
    action = None
    for _ in range(8):
        frame = env.render()
        _put_reference_in(reference.unwrapped, _game(env), action)
        expected = reference.unwrapped.render()
        assert frame.dtype == np.uint8 and frame.shape == expected.shape, (frame.shape, expected.shape)
        np.testing.assert_array_equal(frame, expected)
        action = env.action_space.sample()
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:  # the game's state is the next episode's: draw that one
            env.reset()
            action = None
    env.close()
    reference.close()


def test_last_frame_of_an_episode_is_its_end_and_reset_frames_show_no_action():
    """A step that ends the episode is drawn as it ended (not the auto-reset game behind it)."""
    from kerasrl.envs.snake import render_ansi

    env = gym.make("kerasrl/OpsSnake-v0", render_mode="ansi")
    obs, _ = env.reset(seed=3)
    assert env.render() == render_ansi(obs) and "H" in env.render()
    for _ in range(20):  # straight on: the wall within 9 steps
        obs, reward, terminated, truncated, _ = env.step(0)
        if terminated:
            break
    assert terminated and env.render() == render_ansi(obs)
    pendulum = gym.make("kerasrl/OpsPendulum-v1", render_mode="rgb_array")
    pendulum.reset(seed=0)
    without_arrow = pendulum.render()
    pendulum.step(np.full(1, 2.0, np.float32))
    assert (pendulum.render() != without_arrow).any()  # the torque's arrow
    pendulum.reset(seed=0)
    np.testing.assert_array_equal(pendulum.render(), without_arrow)  # none after a reset


def test_vector_env_draws_every_game_and_bad_modes_are_named():
    from kerasrl.envs.ops.gym import OpsVectorEnv
    from kerasrl.envs.snake import render_rgb

    vec = gym.make_vec("kerasrl/OpsSnake-v0", num_envs=3, vectorization_mode="vector_entry_point",
                       render_mode="rgb_array")
    obs, _ = vec.reset(seed=0)
    obs, *_ = vec.step(np.array([0, 1, 2]))
    frames = vec.render()
    assert len(frames) == 3
    for frame, game in zip(frames, obs):
        np.testing.assert_array_equal(frame, render_rgb(game))
    assert vec.metadata["render_fps"] == 10
    cartpoles = OpsVectorEnv("CartPole", 2, render_mode="rgb_array")
    assert cartpoles.render() is None  # before reset, as Gymnasium's CartPole
    cartpoles.reset(seed=0)
    assert [frame.shape for frame in cartpoles.render()] == [(400, 600, 3)] * 2
    cartpoles.close()
    with pytest.raises(ValueError, match=r"CartPole: render_mode must be None or one of \['human', "
                                         r"'rgb_array'\], got 'ansi'"):
        gym.make("kerasrl/OpsCartPole-v1", render_mode="ansi")
    with pytest.raises(ValueError, match=r"OpsVectorEnv\(CartPole\): render_mode must be None or one of "
                                         r"\['rgb_array'\], got 'human'"):
        OpsVectorEnv("CartPole", 2, render_mode="human")
    acrobot = gym.make("kerasrl/OpsAcrobot-v1")
    acrobot.reset(seed=0)
    assert acrobot.unwrapped.render() is None  # no render mode: nothing drawn


def test_human_mode_draws_in_the_references_window(monkeypatch):
    import pygame

    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # a window without a display
    env = gym.make("kerasrl/OpsMountainCar-v0", render_mode="human")
    env.reset(seed=0)
    env.step(2)
    assert env.render() is None  # drawn in the window at each reset and step, as the reference
    assert pygame.display.get_surface().get_size() == (600, 400)
    env.close()


def test_terminal_image_is_the_frame_averaged_into_half_blocks():
    import re

    from kerasrl.watch.terminal import UPPER_HALF, shrink, terminal_image

    frame = gym.make("kerasrl/OpsCartPole-v1", render_mode="rgb_array")
    frame.reset(seed=0)
    frame = frame.render()  # (400, 600, 3)
    text = terminal_image(frame, columns=60, rows=30)
    lines = text.split("\n")
    # 10 frame pixels a shown pixel: 60 characters by 20 lines (40 pixel rows, two a line).
    assert len(lines) == 20 and all(line.count(UPPER_HALF) == 60 for line in lines)
    shown = np.zeros((40, 60, 3), np.uint8)
    for row, line in enumerate(lines):
        column = 0
        for upper, lower, blocks in re.findall(r"\x1b\[38;2;(\d+;\d+;\d+)m\x1b\[48;2;(\d+;\d+;\d+)m(\u2580+)", line):
            for _ in blocks:
                shown[2 * row, column] = [int(v) for v in upper.split(";")]
                shown[2 * row + 1, column] = [int(v) for v in lower.split(";")]
                column += 1
        assert column == 60
    np.testing.assert_array_equal(shown, shrink(frame, 40, 60))
    left_edge = shown[:, 0, 0]  # white but for the 1-pixel track line, kept as one grey pixel
    assert (left_edge < 255).sum() == 1 and 200 < left_edge.min() < 255
    small = terminal_image(np.zeros((3, 4, 3), np.uint8), 80, 24)  # never enlarged; odd height
    assert small.count("\n") == 1 and small.count(UPPER_HALF) == 8 and "\x1b[49m" in small
    with pytest.raises(ValueError, match="RGB"):
        terminal_image(np.zeros((4, 4), np.uint8))
