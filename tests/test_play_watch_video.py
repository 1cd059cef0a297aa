"""`kerasrl play`, `kerasrl watch` and `kerasrl evaluate --video` on every preset's env, and the
three commands on a run of `snake-dqn-compiled` (the keras.ops Snake) and of the ops CartPole."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from kerasrl import cli
from kerasrl.presets import PRESETS
from kerasrl.video import read_video

# What each command makes of a preset's env, in a fresh process without a display (MuJoCo's
# OpenGL context is chosen once a process; the commands pick EGL there).
PRESET_ENVS = r"""
import json, sys
from kerasrl.presets import PRESETS
from kerasrl.video import recording_env
from kerasrl.watch.stepping import Step, frame_of, make_render_env, make_watch_env
from kerasrl.watch.terminal import terminal_image

seen = {}
for preset in PRESETS.values():
    if preset.env in seen:
        continue
    play = make_render_env(preset.env, preset.eval_env_kwargs, ("ansi", "rgb_array"), "play")
    frame = play.render()
    text = frame if play.render_mode == "ansi" else terminal_image(frame, 80, 24)
    watch = make_watch_env(preset.env, preset.eval_env_kwargs)
    obs, info = watch.reset(seed=0)
    shown = frame_of(watch, Step(0, 0, obs, 0.0, 0.0, None, None, info, None))
    video = recording_env(preset.env, preset.eval_env_kwargs, sys.argv[1] + "/v.gif")
    video.reset(seed=0)
    seen[preset.env] = {"play": play.render_mode, "text_lines": text.count("\n") + 1,
                        "watch": shown["kind"], "video": list(video.render().shape)}
print(json.dumps(seen))
"""


def test_every_presets_env_plays_watches_and_films(tmp_path):
    environ = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL")}
    result = subprocess.run([sys.executable, "-c", PRESET_ENVS, str(tmp_path)], capture_output=True,
                            text=True, env=environ, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.splitlines()[-1])
    assert set(seen) == {preset.env for preset in PRESETS.values()}
    for env_id, made in seen.items():
        snake = env_id.startswith("kerasrl/") and "Snake" in env_id
        writes_text = snake or env_id == "kerasrl/BitFlipping-v0"  # as text in the terminal
        assert made["play"] == ("ansi" if writes_text else "rgb_array"), (env_id, made)
        assert made["watch"] == ("board" if snake else "image"), (env_id, made)
        assert 1 < made["text_lines"] <= 24 and len(made["video"]) == 3, (env_id, made)
    assert seen["kerasrl/OpsSnakeTimeLimit-v0"]["video"] == seen["kerasrl/Snake-v0"]["video"] == [90, 90, 3]
    assert seen["CartPole-v1"]["video"] == [400, 600, 3]
    assert seen["HalfCheetah-v5"]["video"] == [480, 480, 3]


def run_main(capsys, *args):
    capsys.readouterr()
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def watched_events(monkeypatch, capsys, run, frames: int) -> tuple[dict, list[dict]]:
    """`kerasrl watch RUN` as the command makes it (env, policy, run), its first page events taken
    where it would start serving."""
    import kerasrl.watch as watch
    from kerasrl.watch.stepping import step_event

    seen = {}

    def serve(self, host, port):
        seen["hello"] = self.hello
        seen["events"] = [step_event(self.env, step) for step in itertools.islice(self._steps, frames)]

    monkeypatch.setattr(watch.Watch, "serve", serve)
    code, _, err = run_main(capsys, "watch", run, "--max-steps", frames)
    assert code == 0, err
    return seen["hello"], seen["events"]


# The runs' folders are the same either way; compiling the whole loop (about a minute here on 2
# busy cores) is left to the slow tier, the fast one takes two steps of the Python loop, untrained.
@pytest.mark.slow  # two CLI trainings and three commands each (about a minute): the fast tier runs
# every preset's env through the three commands above
@pytest.mark.parametrize("engine", ["local", "auto"])
def test_play_watch_and_video_on_a_compiled_snake_run_and_an_ops_cartpole_run(engine, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    learn = ["--steps", 64, "--set", "learning_starts=32"] if engine == "auto" else ["--steps", 64]
    code, _, err = run_main(capsys, "train", "--preset", "snake-dqn-compiled", *learn, "--set",
                            "target_update_interval=32", "--engine", engine, "--out", "snake",
                            "--no-progress", "--eval-episodes", 1)
    assert code == 0, err
    assert json.loads((tmp_path / "snake" / "config.json").read_text())["env"] == "kerasrl/OpsSnakeTimeLimit-v0"
    learn = ["--steps", 32, "--set", "learning_starts=16"] if engine == "auto" else ["--steps", 4]
    code, _, err = run_main(capsys, "train", "dqn", "--env", "kerasrl/OpsCartPole-v1", *learn, "--set",
                            "target_update_interval=16", "--n-envs", 2, "--engine", engine, "--out", "cart",
                            "--no-progress", "--eval-episodes", 1)
    assert code == 0, err

    # play: the Snake board as text, CartPole's frames drawn in the terminal.
    code, out, err = run_main(capsys, "play", "snake", "--episodes", 2, "--max-steps", 4)
    assert code == 0, err
    boards = [block for block in out.split("episode ")[1:]]
    assert len(boards) >= 4 and all(block.count("H") == 1 for block in boards)  # one head a frame
    assert "Episode 2: return" in out
    code, out, err = run_main(capsys, "play", "cart", "--max-steps", 3)
    assert code == 0, err
    frames = out.split("episode 1/1")[1:]
    assert len(frames) == 4 and all("\x1b[38;2;" in frame and "\u2580" in frame for frame in frames)
    assert "Episode 1: return" in out

    # watch: the run's env and policy, drawn as the page draws them.
    hello, events = watched_events(monkeypatch, capsys, "snake", 5)
    assert hello["frame_kind"] == "board" and hello["actions"] == ["straight", "left", "right"]
    assert hello["env"] == "kerasrl/OpsSnakeTimeLimit-v0" and hello["outputs"] == "Q-values"
    assert all(event["frame"]["kind"] == "board" and event["frame"]["rows"] == 9 for event in events)
    assert all(len(event["outputs"]) == 3 for event in events[1:])
    hello, events = watched_events(monkeypatch, capsys, "cart", 3)
    assert hello["frame_kind"] == "image" and hello["env"] == "kerasrl/OpsCartPole-v1"
    assert all(event["frame"]["kind"] == "image" and event["frame"]["png"] for event in events)

    # evaluate --video: every frame of every episode, the reference's size.
    for run, video, size in (("snake", "snake.gif", (90, 90, 3)), ("cart", "cart.mp4", (400, 600, 3))):
        code, out, err = run_main(capsys, "evaluate", run, "--episodes", 2, "--video", video)
        assert code == 0, err
        result = json.loads(out)
        recorded = int(err.split("Recorded 2 episodes, ")[1].split()[0])
        assert recorded == round(result["mean_length"] * 2) + 2  # the reset frames and one a step
        frames = read_video(tmp_path / video)
        assert frames.shape[1:] == size and 0 < len(frames) <= recorded  # a GIF merges equal frames
        assert np.ptp(frames) > 0


def test_an_env_that_draws_nothing_is_refused_with_what_works(tmp_path, capsys):
    import gymnasium as gym
    import keras

    from kerasrl.envs.testing import IdentityEnv
    from kerasrl.policies import QPolicy

    gym.register("kerasrl_test/DrawsNothing-v0", entry_point=IdentityEnv)
    try:
        env = gym.make("kerasrl_test/DrawsNothing-v0")
        model = keras.Sequential([keras.Input(env.observation_space.shape), keras.layers.Dense(int(env.action_space.n))])
        QPolicy(model, env.observation_space, env.action_space).save(tmp_path / "policy")
        for command in (["play"], ["evaluate", "--video", str(tmp_path / "v.gif")]):
            code, _, err = run_main(capsys, command[0], tmp_path / "policy", *command[1:], "--env",
                                    "kerasrl_test/DrawsNothing-v0")
            assert code == 2 and "Traceback" not in err
            assert "DrawsNothing-v0 cannot draw itself as" in err and "render modes: none" in err
            assert "`kerasrl evaluate RUN` reports the returns" in err
    finally:
        gym.registry.pop("kerasrl_test/DrawsNothing-v0")
