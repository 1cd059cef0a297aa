"""`kerasrl watch`: a local web page showing a policy play, and a run's live learning curve.

    from kerasrl.watch import Watch, make_watch_env
    watch = Watch(policy, make_watch_env("kerasrl/Snake-v0"), run_dir="runs/snake")
    url = watch.start()        # in a background thread; or watch.serve() to block
    ...
    watch.stop()

The page shows each frame (Snake as a board, any other env from render_mode="rgb_array"), the
episode, step, return and fruits, the action and the policy's Q-values or action probabilities,
and for a run folder its learning curve from metrics.csv, followed as the run writes it. One game
is played for all viewers; the server sends server-sent events and the page's own files only.

Serving needs Starlette and uvicorn (pip install 'kerasrl[watch]'); the stepping loop
(`play_steps`) and the curve reader (`MetricsTail`) need neither.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

from kerasrl.watch.curve import METRICS_FILE, MetricsTail, find_run_dir
from kerasrl.watch.stepping import (BOARD_COLOURS, Step, board_cells, env_action, is_snake,
                                    make_watch_env, output_kind, play_steps, png_bytes,
                                    policy_outputs)

__all__ = ["BOARD_COLOURS", "MetricsTail", "RunFollower", "Step", "Watch", "board_cells",
           "env_action",
           "find_run_dir", "make_watch_env", "play_steps", "png_bytes", "policy_outputs",
           "require_server"]

OUTPUT_TITLES = {"q_values": "Q-values", "probabilities": "Action probabilities",
                 "means": "Action means"}
SNAKE_ACTIONS = ("straight", "left", "right")


def require_server() -> None:
    """Raise ImportError naming the extra to install when Starlette or uvicorn is missing."""
    missing = []
    for name in ("starlette", "uvicorn"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ImportError(f"`kerasrl watch` needs {' and '.join(missing)}, not installed: "
                          f"pip install 'kerasrl[watch]'")


class RunFollower:
    """The newest policy of a run that is still training: its best/ policy (--save-best) when it
    has one, else its newest checkpoint, loaded again each time the run writes a newer one.

    Args:
        run_dir: the run folder.
        model_factory: as for `kerasrl.load_policy`, for a model saved as weights only.
        loaded: the run's newest policy is loaded already (the first `newer()` then waits for
            the next one).
    """

    def __init__(self, run_dir, model_factory=None, loaded: bool = False):
        self.run_dir = Path(run_dir)
        self.model_factory = model_factory
        where = self.source() if loaded else None
        self.version = None if where is None else self._version(where)

    def source(self) -> Path | None:
        """Where the newest policy is now (None before the run's first checkpoint)."""
        from kerasrl.files import CheckpointError, find_checkpoint
        from kerasrl.runfiles import MANIFEST

        if (self.run_dir / "best" / MANIFEST).is_file():
            return self.run_dir / "best"
        try:
            return find_checkpoint(self.run_dir)
        except CheckpointError:
            return None

    def _version(self, where: Path) -> tuple[str, bytes]:
        from kerasrl.runfiles import MANIFEST

        # best/ keeps its name as it improves; its manifest holds the checksums of its files.
        return str(where), (where / MANIFEST).read_bytes()

    def newer(self):
        """(policy, where it came from) when the run has written a policy since the last call
        (the first call loads the current one); None otherwise."""
        from kerasrl.policy_io import load_policy

        where = self.source()
        if where is None:
            return None
        version = self._version(where)
        if version == self.version:
            return None
        policy = load_policy(where, model_factory=self.model_factory)
        self.version = version
        return policy, where


class Watch:
    """A policy playing `env` on a local web page, with the run's learning curve when there is one.

    Args:
        policy: a kerasrl Policy (anything with `predict(observation)`; Q-values or action
            probabilities are shown for QPolicy and ActorCriticPolicy).
        env: the env to play, made by `make_watch_env` (Snake, or render_mode="rgb_array").
        run_dir: a run folder whose metrics.csv is plotted live (None: no curve).
        fps: frames per second (0: as fast as the policy runs).
        max_steps: steps per episode at most.
        episodes: episodes to play (None: on and on).
        seed: seed of the first episode (episode k is reset with seed + k).
        title: what the page says is playing.
        follow: a `RunFollower` of a run still training: before each episode, the newest policy
            the run has written replaces the one playing (`policy` is played until there is one).

    A Watch serves once (`serve()` or `start()`/`stop()`); make a new one to serve again.
    """

    def __init__(self, policy, env, *, run_dir=None, fps: float = 10.0, max_steps: int = 500,
                 episodes: int | None = None, seed: int = 0, title: str | None = None,
                 follow: RunFollower | None = None):
        require_server()
        if not fps >= 0:
            raise ValueError(f"fps must be 0 (as fast as possible) or more, got {fps}.")
        if max_steps < 1 or (episodes is not None and episodes < 1):
            raise ValueError(f"max_steps and episodes must be at least 1 (episodes=None: on and "
                             f"on), got max_steps={max_steps}, episodes={episodes}.")
        self.policy, self.env = policy, env
        self.run_dir = None if run_dir is None else Path(run_dir)
        snake = is_snake(env)
        if not snake and env.render_mode != "rgb_array":
            raise ValueError(f"{env} renders {env.render_mode!r}, not 'rgb_array': make it with "
                             f"kerasrl.watch.make_watch_env or render_mode='rgb_array'.")
        kind = output_kind(policy)
        n_actions = getattr(env.action_space, "n", None)
        self.hello = {
            "title": title or type(policy).__name__,
            "env": env.spec.id if env.spec is not None else type(env.unwrapped).__name__,
            "frame_kind": "board" if snake else "image",
            "colours": {name: "rgb({}, {}, {})".format(*rgb) for name, rgb in BOARD_COLOURS.items()},
            "outputs": OUTPUT_TITLES.get(kind),
            "actions": (list(SNAKE_ACTIONS) if snake else
                        [str(a) for a in range(int(n_actions))] if n_actions is not None else None),
            "curve": self.run_dir is not None,
            "fps": fps,
        }
        self.follow, self.title = follow, self.hello["title"]
        self._steps = self._play(episodes, max_steps, seed, outputs=kind is not None)
        self.fps = fps
        self.hub = self.app = None
        self._server = self._thread = None
        self.url: str | None = None

    def _play(self, episodes, max_steps, seed, outputs):
        """play_steps, one episode at a time, with the newest policy of a followed run."""
        policy, episode = self.policy, 0
        while episodes is None or episode < episodes:
            if self.follow is not None:
                try:
                    newer = self.follow.newer()
                except Exception as error:  # e.g. a checkpoint pruned as it was read: next time
                    print(f"kerasrl watch: kept the policy playing; loading the run's newest "
                          f"failed: {error}", file=sys.stderr, flush=True)
                    newer = None
                if newer is not None:
                    policy, self.title = newer[0], str(newer[1])
            yield from play_steps(policy, self.env, episodes=1, max_steps=max_steps, seed=seed,
                                  outputs=outputs, first_episode=episode)
            episode += 1

    def _make_server(self, host: str, port: int):
        from kerasrl.watch.server import Hub, make_app, make_server

        if self.hub is not None:
            raise RuntimeError("This Watch has served already (its game and env are used up): "
                               "make a new Watch to serve again.")

        metrics = self.run_dir / METRICS_FILE if self.run_dir is not None else None
        self.hub = Hub(self._steps, self.env, fps=self.fps, hello=self.hello, metrics_path=metrics,
                       title=lambda: self.title)
        self.app = make_app(self.hub)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            sock = socket.create_server((host, port), family=family)
        except OSError as error:
            raise ValueError(f"Cannot listen on {host}:{port} ({error}): pass another --port "
                             f"(0 picks a free one) or --host.") from None
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if family == socket.AF_INET6 else host
        self.url = f"http://{shown}:{bound}/"
        # Open streams end when the hub stops; the grace period only bounds a stuck client.
        server = make_server(self.hub, self.app, {"log_level": "warning", "lifespan": "on",
                                                  "timeout_graceful_shutdown": 2})
        return server, sock

    def serve(self, host: str = "127.0.0.1", port: int = 8000) -> None:
        """Serve until interrupted (Ctrl-C)."""
        server, sock = self._make_server(host, port)
        print(f"Watching at {self.url} (Ctrl-C to stop)", flush=True)
        try:
            server.run(sockets=[sock])
        except KeyboardInterrupt:  # uvicorn has stopped; it passes Ctrl-C on once it has
            pass
        finally:
            sock.close()
            self.env.close()
        print("Stopped.", flush=True)

    def start(self, host: str = "127.0.0.1", port: int = 0, timeout: float = 30.0) -> str:
        """Serve in a background thread; the page's URL once it answers. `stop()` ends it."""
        if self._thread is not None:
            raise RuntimeError("This Watch is already serving; stop() it first.")
        self._server, sock = self._make_server(host, port)

        def run():
            try:
                self._server.run(sockets=[sock])
            finally:
                sock.close()

        self._thread = threading.Thread(target=run, name="kerasrl-watch-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"The watch server did not start on {self.url}.")
            time.sleep(0.02)
        return self.url

    def stop(self, timeout: float = 10.0) -> None:
        """Stop a server begun by `start()` and close the env."""
        if self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            print("kerasrl watch: the server thread did not stop in time", file=sys.stderr)
        self._thread = None
        self.env.close()
