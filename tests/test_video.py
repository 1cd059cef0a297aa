"""Videos: frames written by imageio and read back (count, size, pixels), and
`kerasrl evaluate --video` recording every frame of every episode it plays."""

import json

import gymnasium as gym
import numpy as np
import pytest
from PIL import Image

from kerasrl import cli
from kerasrl.video import read_video, recording_env, write_video


def frames(n, height, width):
    """n frames, each one grey level (frame i is 10 * i), so that every frame differs."""
    return [np.full((height, width, 3), 10 * i, dtype=np.uint8) for i in range(n)]


def test_mp4_round_trip_keeps_frame_count_size_and_content(tmp_path):
    path = write_video(frames(12, 48, 64), tmp_path / "v.mp4", fps=10)
    video = read_video(path)
    assert video.shape == (12, 48, 64, 3) and video.dtype == np.uint8
    # H.264 is lossy: a flat grey frame comes back within a few levels.
    np.testing.assert_allclose(video.mean(axis=(1, 2, 3)), 10.0 * np.arange(12), atol=3)


def test_mp4_odd_sides_get_one_edge_row_and_column(tmp_path):
    video = read_video(write_video(frames(3, 45, 61), tmp_path / "odd.mp4", fps=5))
    assert video.shape == (3, 46, 62, 3)


def test_gif_round_trip_and_frame_duration(tmp_path):
    path = write_video(frames(7, 30, 40), tmp_path / "v.gif", fps=20)
    video = read_video(path)
    assert video.shape == (7, 30, 40, 3)
    np.testing.assert_array_equal(video[:, 0, 0, 0], 10 * np.arange(7))  # GIF is lossless here
    with Image.open(path) as image:
        assert image.info["duration"] == 50  # 1000 ms / 20 fps


def test_bad_video_requests_raise_where_the_mistake_is(tmp_path):
    with pytest.raises(ValueError, match=r"name a \.mp4 or \.gif file"):
        write_video(frames(1, 8, 8), tmp_path / "v.avi")
    from kerasrl.envs.snake import Snake

    class TextOnly(Snake):  # an env whose only drawing is text
        metadata = {**Snake.metadata, "render_modes": ["ansi"]}

    gym.register("kerasrl_test/VideoTextOnly-v0", entry_point=TextOnly)
    try:
        with pytest.raises(ValueError, match=r"VideoTextOnly-v0 cannot draw itself as an image \(its "
                                             r"render modes: ansi\)"):
            recording_env("kerasrl_test/VideoTextOnly-v0", {}, tmp_path / "v.gif")
    finally:
        gym.registry.pop("kerasrl_test/VideoTextOnly-v0")


def test_recording_env_records_every_frame_of_every_episode(tmp_path):
    env = recording_env("kerasrl/Snake-v0", {"max_steps_without_fruit": 15}, tmp_path / "s.gif",
                        fps=10)
    rng = np.random.default_rng(0)
    lengths, shown = [], []
    for episode in range(2):
        obs, _ = env.reset(seed=episode)
        shown.append(env.unwrapped.render())
        steps, done = 0, False
        while not done:
            obs, _, terminated, truncated, _ = env.step(int(rng.integers(3)))
            steps, done = steps + 1, terminated or truncated
        lengths.append(steps)
    written = env.save()
    env.close()
    assert written == sum(lengths) + 2  # each episode: the reset frame and one per step
    video = read_video(tmp_path / "s.gif")
    height, width = shown[0].shape[:2]
    assert video.shape[1:] == (height, width, 3)
    # Consecutive equal frames may be merged by the GIF encoder, never frames lost: the first
    # frame of each episode is there as drawn.
    assert len(video) <= written
    np.testing.assert_array_equal(video[0], shown[0])


def test_evaluate_video_writes_the_played_episodes(tmp_path, capsys):
    import keras

    from kerasrl.policies import QPolicy

    env = gym.make("CartPole-v1")  # an untrained Q-network is policy enough to film
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    QPolicy(model, env.observation_space, env.action_space).save(tmp_path / "policy")
    code = cli.main(["evaluate", str(tmp_path / "policy"), "--episodes", "2", "--video",
                     str(tmp_path / "cartpole.mp4"), "--env", "CartPole-v1"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    video = read_video(tmp_path / "cartpole.mp4")
    assert len(video) == round(result["mean_length"] * 2) + 2
    assert video.shape[1:] == (400, 600, 3)  # CartPole's drawing
    assert f"Recorded 2 episodes, {len(video)} frames" in captured.err
    assert cli.main(["evaluate", str(tmp_path / "policy"), "--env", "CartPole-v1",
                     "--video", str(tmp_path / "x.webm")]) == 2
    assert "name a .mp4 or .gif file" in capsys.readouterr().err
