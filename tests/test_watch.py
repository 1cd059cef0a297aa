"""`kerasrl watch`: the stepping loop, the live curve, the server (its files only, disconnecting and
concurrent viewers) and the page itself in headless Chromium.

The browser tests drive Debian's chromium (/usr/bin/chromium; `python3 run.py install` installs it
with apt-get) through Playwright, which downloads no browser. Without it they fail, saying so.
None of these tests depends on the Keras backend: they run in the JAX pass only.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import gymnasium as gym
import keras
import numpy as np
import pytest

import kerasrl  # noqa: F401  (registers kerasrl/Snake-v0)
from kerasrl.logger import RunLogger
from kerasrl.policies import ActorCriticPolicy, QPolicy, softmax_log_probs
from kerasrl.watch import (BOARD_COLOURS, MetricsTail, Watch, board_cells, find_run_dir,
                           make_watch_env, play_steps, png_bytes, policy_outputs)

CHROMIUM = Path("/usr/bin/chromium")
SNAKE_KWARGS = {"max_steps_without_fruit": 30}


# -- policies and envs made here (no training: a few milliseconds each) --------------------------

def q_policy(env: gym.Env, seed: int = 0) -> QPolicy:
    """A QPolicy whose small random network still picks different actions in different states."""
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input(env.observation_space.shape), keras.layers.Flatten(),
                              keras.layers.Dense(16, activation="tanh"),
                              keras.layers.Dense(int(env.action_space.n))])
    return QPolicy(model, env.observation_space, env.action_space)


def actor_critic_policy(env: gym.Env, seed: int = 0) -> ActorCriticPolicy:
    keras.utils.set_random_seed(seed)
    n = int(env.action_space.n) if isinstance(env.action_space, gym.spaces.Discrete) else \
        env.action_space.shape[0]
    model = keras.Sequential([keras.Input(env.observation_space.shape), keras.layers.Flatten(),
                              keras.layers.Dense(n)])
    log_std = None if n == int(getattr(env.action_space, "n", -1)) else np.zeros(n, np.float32)
    return ActorCriticPolicy(model, env.observation_space, env.action_space, log_std=log_std)


SQUARE_COLOUR = (255, 0, 200)


class Square(gym.Env):
    """A magenta square walking on a dark image: an env that renders rgb_array with numpy alone."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.position = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = int(self.np_random.integers(0, 8))
        return self._obs(), {}

    def step(self, action):
        self.position = (self.position + (1 if action == 1 else 7)) % 8
        return self._obs(), 1.0, False, False, {}

    def _obs(self):
        return np.array([self.position / 7, 1.0], np.float32)

    def render(self):
        image = np.full((64, 128, 3), 20, np.uint8)  # (height, width, 3)
        image[16:48, 16 * self.position:16 * self.position + 16] = SQUARE_COLOUR
        return image


class TextOnly(Square):
    metadata = {"render_modes": ["ansi"]}


gym.register("kerasrl_test/Square-v0", entry_point=Square)
gym.register("kerasrl_test/TextOnly-v0", entry_point=TextOnly)


# -- frames, the stepping loop and the curve ------------------------------------------------------

def test_png_bytes_decode_to_the_same_image():
    from PIL import Image

    rng = np.random.default_rng(0)
    for channels in (3, 4):
        image = rng.integers(0, 256, (7, 11, channels), dtype=np.uint8)
        decoded = np.asarray(Image.open(io.BytesIO(png_bytes(image))))
        np.testing.assert_array_equal(decoded, image)
    with pytest.raises(ValueError, match="uint8 image"):
        png_bytes(np.zeros((4, 4, 3), np.float32))


def test_board_cells_mark_head_body_and_fruit():
    env = gym.make("kerasrl/Snake-v0")
    obs, _ = env.reset(seed=3)
    cells = board_cells(obs)
    assert cells.shape == obs.shape[:2]
    np.testing.assert_array_equal(cells == 2, obs[..., 0] == 2)
    np.testing.assert_array_equal(cells == 1, obs[..., 0] == 1)
    np.testing.assert_array_equal(cells == 3, obs[..., 1] == 1)
    assert (cells == 2).sum() == 1 and (cells == 1).sum() == 1 and (cells == 3).sum() == 1
    with pytest.raises(ValueError, match="Snake observation"):
        board_cells(np.zeros((4, 4)))


def test_play_steps_replays_the_game_step_for_step():
    """Each record agrees with an independent replay of the same seeds and actions, the
    outputs are the policy's Q-values and the action their argmax."""
    env = gym.make("kerasrl/Snake-v0", **SNAKE_KWARGS)
    policy = q_policy(env)
    records = list(play_steps(policy, env, episodes=3, max_steps=25, seed=7))
    reference = gym.make("kerasrl/Snake-v0", **SNAKE_KWARGS)
    episodes = [[r for r in records if r.episode == k] for k in range(3)]
    assert all(episode for episode in episodes) and len(records) == sum(map(len, episodes))
    for k, episode in enumerate(episodes):
        obs, info = reference.reset(seed=7 + k)
        first = episode[0]
        assert (first.step, first.action, first.outputs, first.episode_return) == (0, None, None, 0.0)
        np.testing.assert_array_equal(first.observation, obs)
        total = 0.0
        for n, record in enumerate(episode[1:], start=1):
            np.testing.assert_allclose(record.outputs, policy.q_values(obs), rtol=1e-6)
            assert record.action == int(np.argmax(record.outputs))
            obs, reward, terminated, truncated, info = reference.step(record.action)
            total += reward
            assert (record.step, record.reward, record.fruits) == (n, reward,
                                                                  info["fruits_eaten"])
            assert record.episode_return == pytest.approx(total)
            np.testing.assert_array_equal(record.observation, obs)
            expected_end = ("terminated" if terminated else "truncated" if truncated
                            else "step limit" if n == 25 else None)
            assert record.ended == expected_end
        assert episode[-1].ended is not None
    with pytest.raises(ValueError, match="max_steps"):
        next(play_steps(policy, env, max_steps=0))


def test_policy_outputs_are_probabilities_or_means_for_actor_critic():
    env = gym.make("CartPole-v1")
    policy = actor_critic_policy(env)
    obs = env.observation_space.sample()
    probabilities = policy_outputs(policy, obs)
    np.testing.assert_allclose(probabilities,
                               np.exp(softmax_log_probs(policy.distribution(obs[None])))[0])
    assert probabilities.sum() == pytest.approx(1.0)
    continuous = gym.make("Pendulum-v1")
    gaussian = actor_critic_policy(continuous)
    obs = continuous.observation_space.sample()
    np.testing.assert_allclose(policy_outputs(gaussian, obs), gaussian.distribution(obs), rtol=1e-6)


def test_metrics_tail_reads_whole_new_rows_and_restarts_on_a_new_file(tmp_path):
    path = tmp_path / "metrics.csv"
    tail = MetricsTail(path)
    assert tail.read() == []  # no file yet: a run writes its first row after one log interval
    logger = RunLogger(1000, out_dir=tmp_path, progress=False, log_interval=100)
    for step in range(1, 351):
        if step % 50 == 0:
            logger.episode(step, episode_return=step / 10, length=50)
        logger.advance(step, 1)
    rows = tail.read()
    assert [r["step"] for r in rows] == [100, 200, 300]
    assert [r["episodes"] for r in rows] == [2, 4, 6]
    assert [r["mean_return_100"] for r in rows] == [pytest.approx(v) for v in (7.5, 12.5, 17.5)]
    assert tail.read() == []
    with open(path, "a") as file:  # a row being written: kept until its line ends
        file.write("400,8,30.0")
    assert tail.read() == []
    with open(path, "a") as file:
        file.write(",1.0\n")
    assert [r["step"] for r in tail.read()] == [400]
    path.write_text("step,episodes,mean_return_100\n5,1,-3\n")  # a new run in the same folder
    assert [(r["step"], r["mean_return_100"]) for r in tail.read()] == [(5, -3)]
    assert tail.restarted
    logger.close(350)


def test_an_extra_first_reported_late_widens_the_logs_and_resumes(tmp_path):
    """Atari reports `game_score` only with the episodes that end a game. Its column appears
    when it first does (earlier rows blank, nothing lost), the live curve restarts once and
    reads on, and a logger resumed on that history keeps the running mean (it raised KeyError
    when the last episode had the extra and earlier ones did not)."""
    import csv

    tail = MetricsTail(tmp_path / "metrics.csv")
    logger = RunLogger(1000, out_dir=tmp_path, progress=False, log_interval=100)
    for step in range(1, 501):
        if step % 50 == 0:
            extras = {"game_score": step / 10} if step % 200 == 0 else {}
            logger.episode(step, episode_return=1.0, length=50, **extras)
        logger.advance(step, 1)
        if step == 150:
            assert [r["step"] for r in tail.read()] == [100] and not tail.restarted
    assert [r["step"] for r in tail.read()] == [100, 200, 300, 400, 500] and tail.restarted
    logger.close(500)
    with open(tmp_path / "episodes.csv", newline="") as file:
        episodes = list(csv.DictReader(file))
    assert [e["step"] for e in episodes] == [str(s) for s in range(50, 501, 50)]
    assert [e["game_score"] for e in episodes] == ["", "", "", "20.0", "", "", "", "40.0", "", ""]
    with open(tmp_path / "metrics.csv", newline="") as file:
        metrics = {row["step"]: row for row in csv.DictReader(file)}
    assert metrics["100"]["mean_game_score_100"] == "" and metrics["100"]["episodes"] == "2"
    assert float(metrics["300"]["mean_game_score_100"]) == 20.0
    assert float(metrics["500"]["mean_game_score_100"]) == 30.0

    resumed = RunLogger(1000, progress=False, history=logger.history, start_step=500)
    assert list(resumed.recent_extras["game_score"]) == [20.0, 40.0]
    assert resumed.summary()["mean_game_score_100"] == 30.0
    resumed.close(500)


def test_find_run_dir_from_a_checkpoint_or_best(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints" / "ckpt-100").mkdir(parents=True)
    (run / "best").mkdir()
    (run / "config.json").write_text("{}")
    assert find_run_dir(run) == run
    assert find_run_dir(run / "best") == run
    assert find_run_dir(run / "checkpoints" / "ckpt-100") == run
    (tmp_path / "policy").mkdir()
    assert find_run_dir(tmp_path / "policy") is None


def test_make_watch_env_names_what_is_missing():
    assert make_watch_env("kerasrl_test/Square-v0").render_mode == "rgb_array"
    assert make_watch_env("kerasrl/Snake-v0").render_mode is None  # drawn from its observation
    with pytest.raises(ValueError, match="render modes: ansi.*'rgb_array'"):
        make_watch_env("kerasrl_test/TextOnly-v0")
    with pytest.raises(ValueError, match="Cannot make 'NoSuchEnv-v9'.*--env"):
        make_watch_env("NoSuchEnv-v9")
    env = gym.make("kerasrl_test/Square-v0")  # no render mode: nothing to show
    with pytest.raises(ValueError, match="not 'rgb_array'"):
        Watch(q_policy(env), env)
    with pytest.raises(ValueError, match="fps"):
        Watch(q_policy(env), make_watch_env("kerasrl_test/Square-v0"), fps=-1)
    with pytest.raises(ValueError, match="max_steps and episodes must be at least 1"):
        Watch(q_policy(env), make_watch_env("kerasrl_test/Square-v0"), episodes=0)


# -- the server ----------------------------------------------------------------------------------

@pytest.fixture
def serving():
    """Start Watch servers; every one is stopped at the end of the test."""
    started = []

    def start(policy=None, env=None, **kwargs):
        env = env if env is not None else make_watch_env("kerasrl/Snake-v0", SNAKE_KWARGS)
        watch = Watch(policy if policy is not None else q_policy(env), env, **kwargs)
        started.append(watch)
        return watch, watch.start()

    yield start
    for watch in started:
        watch.stop()


def get(url: str, path: str) -> tuple[int, http.client.HTTPMessage, bytes]:
    """GET `path` exactly as given (no normalisation: traversal attempts reach the server)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.putrequest("GET", path, skip_accept_encoding=True)
    conn.endheaders()
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, response.headers, body


def state(url: str) -> dict:
    return json.loads(get(url, "/state")[2])


class Stream:
    """One viewer of /events, read as a browser's EventSource reads it."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=20)
        self.conn.request("GET", "/events")
        self.response = self.conn.getresponse()
        assert self.response.status == 200
        assert self.response.getheader("Content-Type").startswith("text/event-stream")

    def next_event(self) -> tuple[str, dict]:
        event, data = None, []
        while True:
            line = self.response.readline()
            if not line:
                raise EOFError("the stream ended")
            line = line.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif not line and event:
                return event, json.loads("\n".join(data))

    def steps(self, n: int) -> list[dict]:
        found = []
        while len(found) < n:
            event, data = self.next_event()
            if event == "step":
                found.append(data)
        return found

    def close(self):
        # As a browser tab closing: the socket goes away mid-stream.
        self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.conn.close()


def wait_for(condition, timeout: float = 10.0, what: str = "the condition"):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.05)


def test_serves_only_its_own_files(serving):
    _, url = serving(fps=5)
    package = Path(kerasrl.__file__).parent
    status, headers, body = get(url, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert body == (package / "watch" / "static" / "index.html").read_bytes()
    assert b"http://" not in body and b"https://" not in body  # every asset from this server
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    for name, media in (("watch.js", "text/javascript"), ("watch.css", "text/css")):
        status, headers, body = get(url, f"/static/{name}")
        assert status == 200 and headers["Content-Type"].startswith(media)
        assert body == (package / "watch" / "static" / name).read_bytes()
        assert b"http://" not in body and b"https://" not in body and b"//cdn" not in body
    secret = (package / "watch" / "server.py").read_bytes()[:200]
    for path in ("/static/../server.py", "/static/..%2fserver.py", "/static/%2e%2e%2fserver.py",
                 "/static/..%2f..%2fregistry.py", "/static/%2e%2e/%2e%2e/registry.py", "/../../pyproject.toml",
                 "/static//etc/passwd", "/static/%2fetc%2fpasswd", "/static/..\\server.py",
                 "/static/static", "/static/", "/server.py", "/static/index.html%00.js",
                 "/static/.%2e/.%2e/.%2e/pyproject.toml", "/static/__init__.py"):
        status, _, body = get(url, path)
        assert status == 404, path
        assert secret not in body and b"root:" not in body and b"[project]" not in body, path


def test_a_viewer_that_disconnects_mid_stream_is_dropped(serving):
    watch, url = serving(fps=40)
    leaving, staying = Stream(url), Stream(url)
    assert leaving.next_event()[0] == "hello"
    leaving.steps(3)
    assert state(url)["viewers"] == 2
    leaving.close()
    wait_for(lambda: state(url)["viewers"] == 1, what="dropping the viewer that left")
    frames = state(url)["frames"]
    seen = staying.steps(20)  # the game goes on for the one that stayed
    assert state(url)["frames"] > frames
    assert all((b["episode"], b["step"]) > (a["episode"], a["step"]) for a, b in zip(seen, seen[1:]))
    late = Stream(url)  # and a new viewer is served
    assert late.next_event()[0] == "hello" and late.steps(2)
    staying.close()
    late.close()
    wait_for(lambda: state(url)["viewers"] == 0, what="dropping the last viewers")


def test_twenty_concurrent_viewers_see_the_same_game(serving):
    watch, url = serving(fps=30)
    n, barrier = 20, threading.Barrier(21, timeout=30)
    seen: list[list | BaseException] = [None] * n

    def view(i):
        try:
            stream = Stream(url)
            stream.steps(1)
            barrier.wait()  # all 20 connected at once
            barrier.wait()
            seen[i] = [(s["number"], s["episode"], s["step"], s["return"])
                       for s in stream.steps(15)]
            stream.close()
        except BaseException as error:  # reported by the main thread
            seen[i] = error
            barrier.abort()

    threads = [threading.Thread(target=view, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    barrier.wait()
    assert state(url)["viewers"] == n
    released_at = state(url)["frames"]
    barrier.wait()
    for thread in threads:
        thread.join(60)
    errors = [s for s in seen if isinstance(s, BaseException)]
    assert not errors, errors[0]
    played = {}
    for frames in seen:
        assert len(frames) == 15
        assert all(b[:3] > a[:3] for a, b in zip(frames, frames[1:])), frames
        assert frames[-1][0] > released_at  # each one kept up with the game
        for frame, *content in frames:
            played.setdefault(frame, set()).add(tuple(content))
    # One game for all: whoever saw frame k saw the same episode, step and return.
    assert all(len(contents) == 1 for contents in played.values())
    viewers_of = {k: sum(any(x[0] == k for x in frames) for frames in seen) for k in played}
    assert max(viewers_of.values()) >= n // 2, viewers_of
    wait_for(lambda: state(url)["viewers"] == 0, what="dropping the 20 viewers")


def test_episodes_end_with_an_end_event_and_errors_are_shown(serving):
    env = make_watch_env("kerasrl/Snake-v0", SNAKE_KWARGS)
    _, url = serving(env=env, episodes=1, max_steps=4, fps=0)
    stream = Stream(url)
    events = []
    while not events or events[-1][0] != "end":
        events.append(stream.next_event())
    assert events[0][0] == "hello" and events[-1] == ("end", {"episodes": 1})
    assert [d["step"] for e, d in events if e == "step"][-1] == 4
    stream.close()

    class Broken(QPolicy):
        def predict(self, observations, deterministic=True):
            raise RuntimeError("the network is broken")

    env = make_watch_env("kerasrl/Snake-v0")
    working = q_policy(env)
    _, url = serving(Broken(working.model, env.observation_space, env.action_space), env, fps=0)
    stream = Stream(url)
    events = []
    while not events or events[-1][0] != "failed":
        events.append(stream.next_event())
    assert "RuntimeError: the network is broken" in events[-1][1]["message"]
    assert state(url)["finished"]  # the server stays up, saying what stopped the game
    stream.close()


def constant_q_policy(env: gym.Env, q_values) -> QPolicy:
    """A QPolicy whose Q-values are `q_values` in every state (which policy played is then plain)."""
    model = keras.Sequential([keras.Input(env.observation_space.shape), keras.layers.Flatten(),
                              keras.layers.Dense(len(q_values), kernel_initializer="zeros",
                                                 bias_initializer=keras.initializers.Constant(
                                                     np.asarray(q_values, np.float32)))])
    return QPolicy(model, env.observation_space, env.action_space)


def test_a_followed_run_plays_its_newest_policy(serving, tmp_path):
    from kerasrl.watch import RunFollower

    env = make_watch_env("kerasrl/Snake-v0", SNAKE_KWARGS)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    follower = RunFollower(run)
    assert follower.source() is None and follower.newer() is None  # no checkpoint yet
    first = constant_q_policy(env, [5.0, 0.0, 0.0])
    first.save(run / "best")
    policy, where = follower.newer()
    assert where == run / "best" and np.allclose(policy.q_values(env.reset()[0]), [5, 0, 0])
    assert follower.newer() is None  # unchanged
    constant_q_policy(env, [1.0, 2.0, 3.0]).save(run / "best")  # the run improved
    # The game starts with the server, not with the first viewer: a viewer that connects late
    # sees the game from where it is (CI once joined at the second frame with fps=0). At 20 frames
    # a second it usually sees all eight; the order is what is asserted, and the "end" event
    # counts both episodes.
    _, url = serving(first, env, run_dir=run, follow=follower, episodes=2, max_steps=3, fps=20,
                     title="first")
    stream = Stream(url)
    steps = [d for e, d in iter(stream.next_event, ("end", {"episodes": 2})) if e == "step"]
    played = [(k, n) for k in (0, 1) for n in range(4)]
    seen = [(s["episode"], s["step"]) for s in steps]
    assert seen and seen == played[len(played) - len(seen):], seen
    assert all(s["title"] == str(run / "best") for s in steps)
    assert all(s["outputs"] == [1.0, 2.0, 3.0] and s["action"] == 2
               for s in steps if s["step"] > 0)
    stream.close()


# -- the page in headless Chromium ---------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: the watch page is tested in Debian's chromium. "
                    f"Install it with `apt-get install -y chromium` (python3 run.py install does "
                    f"so where apt-get is available).", pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=["--no-sandbox"])
        yield chromium
        chromium.close()


def until(page, expression: str, timeout: float = 10.0) -> None:
    """Poll a JavaScript expression in the page until it is true (the page's Content-Security-Policy
    forbids the eval that Playwright's wait_for_function uses)."""
    wait_for(lambda: page.evaluate(expression), timeout, expression)


def text(page, selector: str) -> str:
    return page.locator(selector).inner_text()


def pixels(screenshot: bytes, box: dict) -> np.ndarray:
    """The RGB pixels (h, w, 3) of `box` (CSS pixels, device scale 1) in a PNG screenshot."""
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(screenshot)).convert("RGB"))
    x, y = int(box["x"]), int(box["y"])
    return image[y:y + int(box["height"]), x:x + int(box["width"])]


def count_colour(region: np.ndarray, rgb, tolerance: int = 6) -> int:
    return int((np.abs(region.astype(int) - np.array(rgb)).max(axis=-1) <= tolerance).sum())


def test_page_plays_snake_with_counters_outputs_and_live_curve(serving, browser, tmp_path):
    """A run in progress: its policy plays Snake on the board, the counters advance, and the
    rows the run's logger appends to metrics.csv extend the curve while the page is open."""
    run = tmp_path / "run"
    logger = RunLogger(10_000, out_dir=run, progress=False, log_interval=100)
    for step in range(1, 201):
        if step % 40 == 0:
            logger.episode(step, episode_return=-10 + step / 20, length=40)
        logger.advance(step, 1)
    env = make_watch_env("kerasrl/Snake-v0", SNAKE_KWARGS)
    watch, url = serving(env=env, run_dir=run, fps=15, title="test run")
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    until(page, "document.getElementById('step').textContent !== '-'")
    assert text(page, "#env") == "kerasrl/Snake-v0" and text(page, "#title") == "test run"
    assert page.locator("#board").is_visible() and not page.locator("#frame").is_visible()
    # Frames advance: the board's picture and the counters change.
    first = (page.evaluate("document.getElementById('board').toDataURL()"),
             text(page, "#episode"), text(page, "#step"))
    until(page, f"document.getElementById('step').textContent !== '{first[2]}'")
    until(page, f"document.getElementById('board').toDataURL() !== {json.dumps(first[0])}")
    until(page, "Number(document.getElementById('episode').textContent) >= 2",
                           timeout=20)  # an episode ended (30 steps without a fruit at most)
    # A viewer that falls behind (a loaded machine) loses its oldest frames, an episode's last one
    # among them: the list then gets the next episode's end, within 30 steps (2 s at 15 fps).
    until(page, "document.querySelectorAll('#episodes li').length >= 1", timeout=20)
    assert text(page, "#episodes li:first-child").startswith("Episode ")
    assert "return" in text(page, "#episodes li:first-child")
    assert page.locator("#fruits").is_visible() and text(page, "#fruits").isdigit()
    # The counters come from one event: Snake's return is +10 a fruit, -0.2 any other step
    # (-10 for the last step of a game lost).
    episode, step, fruits, episode_return = page.evaluate(
        "['episode', 'step', 'fruits', 'return'].map((id) => "
        "Number(document.getElementById(id).textContent))")
    assert episode >= 2 and step >= 0
    assert episode_return in (pytest.approx(10 * fruits - 0.2 * (step - fruits)),
                              pytest.approx(10 * fruits - 0.2 * (step - 1 - fruits) - 10))
    assert text(page, "#outputs-title") == "Q-values"
    assert page.locator(".output").count() == 3
    assert text(page, ".output:first-child .name") == "straight"
    # The greedy action is highlighted, and the bars keep the order of the Q-values.
    until(page, "document.getElementById('action').textContent !== '-'")
    rows = page.evaluate("[...document.querySelectorAll('.output')].map((row) => ["
                         "Number(row.querySelector('.value').textContent),"
                         "row.querySelector('.fill').getBoundingClientRect().width,"
                         "row.classList.contains('chosen')])")
    values = [v for v, _, _ in rows]
    (chosen,) = [v for v, _, is_chosen in rows if is_chosen]
    assert chosen == max(values)
    for value, width, _ in rows:  # (values are shown to 3 decimals)
        assert all(width < other_width for other, other_width, _ in rows if value < other - 0.002)
    assert max(width for _, width, _ in rows) > 0
    # The curve: 2 rows now, a third once the run writes it.
    until(page, "document.getElementById('curve').dataset.points === '2'")
    for step in range(201, 301):
        if step % 40 == 0:
            logger.episode(step, episode_return=step / 20, length=40)
        logger.advance(step, 1)
    until(page, "document.getElementById('curve').dataset.points === '3'")
    assert page.locator("#curve-note").is_hidden()
    shot = tmp_path / "watch-snake.png"
    screenshot = page.screenshot(path=str(shot))
    assert shot.stat().st_size > 1000
    board = pixels(screenshot, page.locator("#board").bounding_box())
    cells = board.shape[0] * board.shape[1] / 81
    assert count_colour(board, BOARD_COLOURS["empty"]) > 50 * cells
    for kind in ("head", "fruit"):  # one square each, drawn a pixel in from each side
        assert 0.5 * cells < count_colour(board, BOARD_COLOURS[kind]) < 1.05 * cells, kind
    assert count_colour(board, BOARD_COLOURS["body"]) > 0.5 * cells
    curve = pixels(screenshot, page.locator("#curve").bounding_box())
    assert count_colour(curve, (0x6F, 0xCF, 0x6F), tolerance=40) > 50  # the curve's line
    assert errors == []
    page.close()
    logger.close(300)


def test_page_shows_rendered_frames_and_action_probabilities(serving, browser, tmp_path):
    env = make_watch_env("kerasrl_test/Square-v0")
    _, url = serving(actor_critic_policy(env), env, fps=15, max_steps=20)
    page = browser.new_page(viewport={"width": 1000, "height": 700})
    page.goto(url)
    until(page, "document.getElementById('frame').naturalWidth === 128")
    assert page.locator("#board").is_hidden() and page.locator("#curve-panel").is_hidden()
    assert text(page, "#outputs-title") == "Action probabilities"
    assert page.locator(".fruits").first.is_hidden()  # no fruits outside Snake
    source = page.evaluate("document.getElementById('frame').src")
    until(page, f"document.getElementById('frame').src !== {json.dumps(source)}")
    until(page, "Number(document.getElementById('return').textContent) >= 3")
    shown = page.evaluate("[...document.querySelectorAll('.output')].map((row) => ["
                          "Number(row.querySelector('.value').textContent),"
                          "row.querySelector('.fill').getBoundingClientRect().width /"
                          " row.querySelector('.track').getBoundingClientRect().width])")
    assert len(shown) == 2 and sum(v for v, _ in shown) == pytest.approx(1.0, abs=2e-3)
    for probability, bar in shown:  # each bar as long as its probability
        assert bar == pytest.approx(probability, abs=0.01)
    screenshot = page.screenshot(path=str(tmp_path / "watch-square.png"))
    frame = pixels(screenshot, page.locator("#frame").bounding_box())
    square = count_colour(frame, SQUARE_COLOUR, tolerance=10) / frame.size * 3
    assert square == pytest.approx(32 * 16 / (64 * 128), rel=0.15)  # the square, nothing else
    page.close()


# -- the command ---------------------------------------------------------------------------------

def test_watch_command_serves_a_run(tmp_path, capsys):
    """`kerasrl watch RUN`: the env and its evaluation settings from the run's config.json (as
    `kerasrl train` writes it), the best/ policy, the curve, then Ctrl-C."""
    env = gym.make("kerasrl/Snake-v0")
    run = tmp_path / "run"
    constant_q_policy(env, [0.0, 1.0, 0.0]).save(run / "best")  # always left: round in circles
    (run / "config.json").write_text(json.dumps(
        {"algorithm": "dqn", "env": "kerasrl/Snake-v0",
         "eval_env_kwargs": {"max_steps_without_fruit": 7}}))
    command = [sys.executable, "-m", "kerasrl.cli", "watch", str(run), "--port", "0", "--fps",
               "50", "--max-steps", "50"]
    environ = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=environ)
    try:
        line = process.stdout.readline()
        assert line.startswith("Watching at http://127.0.0.1:"), (line, process.stderr.read()
                                                                  if process.poll() else "")
        url = line.split()[2]
        wait_for(lambda: state(url)["frames"] >= 5, timeout=60, what="5 frames")
        now = state(url)
        assert now["env"] == "kerasrl/Snake-v0" and now["curve"] and now["outputs"] == "Q-values"
        assert now["last"]["title"] == str(run / "best")
        # The run's evaluation settings: a game going round in circles is cut after 7 steps
        # without a fruit (else it would last the 50 of --max-steps).
        stream = Stream(url)
        ends = [d for e, d in (stream.next_event() for _ in range(200)) if e == "step" and d["ended"]]
        stream.close()
        # A game starting on the top row runs off it at once; the others circle till cut.
        assert {(d["ended"], d["step"]) for d in ends if d["fruits"] == 0} <= {
            ("terminated", 1), ("truncated", 7)}
        assert ("truncated", 7) in {(d["ended"], d["step"]) for d in ends}
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C
        code = process.wait(30)
    assert code == 0, process.stderr.read()
    # Without --env a bare policy folder has no env: said at once, with the fix.
    from kerasrl.cli import main

    capsys.readouterr()
    shutil.rmtree(run / "best")  # a run that has just started
    assert main(["watch", str(run)]) == 2
    assert "no checkpoint yet" in capsys.readouterr().err
    constant_q_policy(env, [0.0, 1.0, 0.0]).save(tmp_path / "policy")
    assert main(["watch", str(tmp_path / "policy")]) == 2
    assert "pass --env" in capsys.readouterr().err
    assert main(["watch", str(run), "--port", "70000"]) == 2
    assert "--port must be" in capsys.readouterr().err
