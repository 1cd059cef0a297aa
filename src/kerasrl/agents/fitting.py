"""`fit`: what runs around an agent's training loop.

`Fitting` is the part of `kerasrl.agents.base.Agent` that trains, kept in its own module: it checks
`fit`'s arguments, holds the run's folders, picks the engine (the compiled loop, the agent's own
Python loop, or Ray), runs it in chunks that end where checkpoints are due, writes and prunes those
checkpoints, and moves the weights out of the learner (`sync_model`) when fit ends and before each
callback. It reads the agent's config, loop state, history, placement and diagnostics.
"""

from __future__ import annotations

import copy
import difflib
import inspect
import logging
import warnings
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym

from kerasrl import devices, porting, registry
from kerasrl.checkpoint import save_checkpoint
from kerasrl.config.common import env_steps, positive_count
from kerasrl.envs import describe, env_factory, make_vec_env
from kerasrl.files import checkpoint_path, prune_checkpoints
from kerasrl.logger import History, RunLogger
from kerasrl.runfiles import WriteError, hold_run_folders


class Fitting:
    """`fit` and what it calls first (`start_fit`, `compiled_engine`), a part of `Agent` kept in
    its own module."""

    def fit(self, total_steps: int | None = None, *, stop_at: int | None = None, progress: bool = True,
            log_dir=None, log_interval: int | None = None,
            callback: Callable[[Fitting, History], bool | None] | None = None,
            checkpoint_every: int | None = None, keep_last: int | None = None,
            checkpoint_dir=None, eval_every: int | None = None, eval_episodes: int = 10,
            eval_env=None, engine="auto", workers: int = 2,
            address: str | None = None, **other_libraries) -> History:
        """Train until `total_steps` env steps have been taken in all (over all `n_envs`).

        `total_steps` is the length of the whole run: schedules (epsilon, learning rate) span it,
        and a loaded agent continues up to it. `stop_at` pauses earlier (e.g. to save), with the
        schedules unchanged. `callback(agent, history)` runs after each step in which an episode
        ended (and after each evaluation, with `eval_every`); returning False stops training.
        Returns the History of all episodes, updates and evaluations.
        The Keras models hold the learner's weights whenever a callback runs and when fit returns
        (it calls `sync_model()` then; see that method).

        `checkpoint_every=N` saves a checkpoint `ckpt-<step>` each time the step count passes a
        multiple of N (and at the end), in `checkpoint_dir` (default `log_dir/checkpoints`),
        keeping the newest `keep_last` (all if None). See docs/checkpoints.md.

        `eval_every=N` evaluates the policy each time the step count passes a multiple of N, and
        at the run's end: `evaluate(eval_episodes, env=eval_env)` (greedy, on fresh envs; default
        the training env's id or factory), as Stable-Baselines3's EvalCallback does. Each result
        goes to `history.evaluations`, the run's `evaluations.csv` and TensorBoard (`eval/...`),
        and the callback then runs once more, so that `SaveBest(..., on="evaluations")` saves the
        weights just evaluated. The training run is the same as without it (evaluation acts on
        its own envs and random stream).

        `log_dir` and `checkpoint_dir` are held by this process while it trains: a second training
        into them (another process) is refused with `kerasrl.RunLockedError`, naming the holder.
        A checkpoint or log that cannot be written (no space left, no permission) stops training
        with `kerasrl.WriteError` (an OSError), naming the file, the cause and the last complete
        checkpoint to resume from.

        `engine`: "auto" (the default) runs the whole loop compiled (`engine="compiled"`, see
        docs/ops_envs.md) when the env is a keras.ops env (`kerasrl/OpsCartPole-v1`, ...) and the
        algorithm and config have a compiled loop, else this process's Python loop (`"local"`),
        saying why once (an INFO line of the "kerasrl" logger). `engine="ray"` collects experience
        with `workers` Ray rollout actors (on the Ray cluster at `address`, else a local Ray) while
        this process learns; `engine` may also be a `kerasrl.distributed.RayEngine` with every
        option. See docs/scaling.md.
        """
        _refuse_foreign_arguments(total_steps, other_libraries)
        total_steps = env_steps("total_steps", total_steps)
        stop_at = total_steps if stop_at is None else min(env_steps("stop_at", stop_at), total_steps)
        if log_interval is not None:
            log_interval = env_steps("log_interval", log_interval)
        if keep_last is not None:
            keep_last = positive_count("keep_last", keep_last, "checkpoints (None keeps all)", 5)
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be a function callback(agent, history) that returns False to stop, "
                            f"got {callback!r} ({type(callback).__name__}).")
        eval_every, eval_episodes, eval_env = self._evaluation_settings(eval_every, eval_episodes, eval_env,
                                                                        callback)
        if checkpoint_every is not None:
            checkpoint_every = env_steps("checkpoint_every", checkpoint_every)
            if checkpoint_dir is None:
                if log_dir is None:
                    raise ValueError("checkpoint_every needs checkpoint_dir= (or log_dir=, "
                                     "whose checkpoints/ folder is used).")
                checkpoint_dir = Path(log_dir) / "checkpoints"
        if self.num_timesteps >= stop_at:
            warnings.warn(
                f"This agent has already taken {self.num_timesteps} env steps, so fit("
                f"total_steps={total_steps}) has nothing to do: total_steps counts the whole run. "
                f"Pass a larger total_steps to train on.",
                stacklevel=2,
            )
            return self.history
        run_folders = hold_run_folders(log_dir, checkpoint_dir)  # refused at once if another trains there
        runner = logger = None
        failed = True
        try:
            learn = self._learn  # the engine is chosen before the bar appears: its INFO line goes first
            if engine in ("auto", "compiled"):
                runner = self.compiled_engine(required=engine == "compiled")
            elif engine != "local":
                runner = make_engine(engine, workers=workers, address=address)
            if runner is not None:
                learn = lambda *args: runner.learn(self, *args)  # noqa: E731
            learn = devices.on_device(self.placement, learn)
            logger = RunLogger(stop_at - self.num_timesteps, out_dir=log_dir, progress=progress,
                               log_interval=log_interval, start_step=self.num_timesteps,
                               history=self.history)
            self.start_fit(total_steps, logger)
            callback = with_current_weights(callback)
            if checkpoint_every is None and eval_every is None:
                learn(total_steps, stop_at, logger, callback)
            else:
                pause_point = getattr(runner, "pause_point", None) or (lambda agent, step: step)
                self._learn_in_chunks(learn, pause_point, total_steps, stop_at, logger, callback,
                                      checkpoints=(checkpoint_every, checkpoint_dir, keep_last),
                                      evaluations=(eval_every, eval_episodes, eval_env))
            failed = False
        except WriteError as error:  # say where to resume from
            if checkpoint_dir is None and log_dir is not None:
                checkpoint_dir = Path(log_dir) / "checkpoints"
            error.locate(checkpoint_dir, run=log_dir)
            raise
        finally:
            if logger is not None:
                self.sync_model()  # the weights leave the learner: fit's end is one of the points
                logger.close(self.num_timesteps, quiet=failed)  # after an error, that one is told
            if runner is not None and runner is not engine:  # an engine passed in is the caller's
                runner.close()
            run_folders.close()
        return self.history

    def _evaluation_settings(self, eval_every, eval_episodes, eval_env, callback) -> tuple:
        """fit's evaluation arguments, checked where they are given (an eval_env's spaces too)."""
        if eval_every is None:
            if _watches_evaluations(callback):
                raise ValueError(f"{_watches_evaluations(callback)} acts on the evaluations of fit(eval_every=N), "
                                 f"and this fit has none: pass eval_every (env steps between evaluations), "
                                 f"or on='episodes' to watch the training episodes' returns.")
            if eval_env is not None:
                raise ValueError("eval_env= is the env of fit's evaluations, and this fit has none: pass "
                                 "eval_every=N (env steps between evaluations), or call agent.evaluate(env=...).")
            return None, eval_episodes, None
        eval_every = env_steps("eval_every", eval_every)
        eval_episodes = positive_count("eval_episodes", eval_episodes, "episodes per evaluation", 10)
        eval_env = _evaluation_spec(eval_env)
        if eval_env is not None:
            probe = make_vec_env(eval_env, 1, factory=env_factory(eval_env))
            self._check_same_spaces(probe, f"fit(eval_env={describe(eval_env)!r})")
            probe.close()
        return eval_every, eval_episodes, eval_env

    def _learn_in_chunks(self, learn, pause_point, total_steps: int, stop_at: int, logger: RunLogger,
                         callback, checkpoints: tuple, evaluations: tuple) -> None:
        """`learn` in chunks that end on multiples of checkpoint_every and eval_every (or the
        engine's first `pause_point(agent, step)` after one: the end of a compiled PPO rollout):
        the loop keeps all its state on the agent, so chunks give the same run as one call. After
        a chunk that passed a multiple: the evaluation (then the callback), then the checkpoint
        (also at the end, so that the last one holds the last evaluation)."""
        checkpoint_every, checkpoint_dir, keep_last = checkpoints
        eval_every, eval_episodes, eval_env = evaluations
        every = [n for n in (checkpoint_every, eval_every) if n is not None]
        stopped = []

        def watch(agent, history):
            result = callback(agent, history) if callback is not None else None
            if result is False:
                stopped.append(True)
            return result

        while self.num_timesteps < stop_at and not stopped:
            before = self.num_timesteps
            boundary = pause_point(self, min((before // n + 1) * n for n in every))
            learn(total_steps, min(stop_at, boundary), logger, watch)
            after = self.num_timesteps
            if eval_every is not None and not stopped and (after // eval_every > before // eval_every
                                                           or after >= total_steps):
                summary = self.evaluate(eval_episodes, env=eval_env)
                logger.evaluation(after, summary)
                watch(self, self.history)
            if checkpoint_every is not None and (after // checkpoint_every > before // checkpoint_every
                                                 or after >= stop_at or stopped):
                save_checkpoint(self, checkpoint_path(checkpoint_dir, after))
                prune_checkpoints(checkpoint_dir, keep_last)

    def start_fit(self, total_steps: int, logger: RunLogger) -> None:
        """What every fit does before its first step: diagnostics on, envs reset if never reset,
        the schedules' span set."""
        self.diagnostics.start(self, total_steps, logger)
        if self.loop.observations is None:
            self.reset_envs(seed=self.config.seed)
        self.loop.total_steps = total_steps

    def compiled_engine(self, required: bool):
        """The compiled-loop engine of this agent (made once, so its compiled calls are reused by
        later fits), or None where it cannot run (`required`: raise then, saying why)."""
        engine_class = registry.engine_class("compiled")
        reason = engine_class.why_not(self) or (None if required else engine_class.slower_here(self))
        if reason is None:
            if getattr(self, "_compiled_runner", None) is None:
                self._compiled_runner = engine_class(self)
            return self._compiled_runner
        if required:
            engine_class(self)  # raises, saying why
        if not getattr(self, "_said_python_loop", False):
            self._said_python_loop = True
            logging.getLogger("kerasrl").info("%s.fit runs the Python loop: %s.", type(self).__name__, reason)
        return None


def _refuse_foreign_arguments(total_steps, keywords: dict) -> None:
    """keras-rl's `fit(env, nb_steps=N, visualize=...)`, SB3's `learn` keywords and a missing or
    non-numeric total_steps, refused with what to write instead (kerasrl.porting); an unknown
    keyword as Python would, with the nearest of fit's own."""
    if keywords:
        hints = [porting.hint(porting.FIT_KEYWORDS, name) for name in keywords]
        known = [name for name in inspect.signature(Fitting.fit).parameters if name not in ("self", "other_libraries")]
        unknown = [name for name, said in zip(keywords, hints) if said is None]
        close = [f" Did you mean {c[0]!r} for {name!r}?" for name in unknown
                 for c in [difflib.get_close_matches(name, known, n=1, cutoff=0.7)] if c]
        raise TypeError(f"fit() got unexpected keyword argument(s) {', '.join(map(repr, keywords))}."
                        + "".join(f" {said}." for said in hints if said is not None) + "".join(close)
                        + (f" fit takes {', '.join(known)}." if unknown and not close else ""))
    if total_steps is None:
        raise TypeError("fit() needs total_steps, the run's length in env steps: fit(total_steps=50_000).")
    if isinstance(total_steps, gym.Env) or callable(total_steps) or (isinstance(total_steps, str)
                                                                      and not _reads_as_number(total_steps)):
        raise TypeError(f"fit's first argument is total_steps, the run's length in env steps, got "
                        f"{total_steps!r}: the env is the agent's own (its first argument). keras-rl's "
                        f"agent.fit(env, nb_steps=N) is agent.fit(total_steps=N) here.")


def _reads_as_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _watches_evaluations(callback) -> str | None:
    """The callback (or one in a CallbackList) that watches evaluations, as its class names it."""
    for one in getattr(callback, "callbacks", [callback]):
        if getattr(one, "on", None) == "evaluations":
            return f"{type(one).__name__}(on='evaluations')"
    return None


def _evaluation_spec(env):
    """`fit`'s eval_env as `evaluate` takes it at every evaluation (None: the training env's):
    checked now, where it is given; an env instance copied for each evaluation, which closes the
    envs it made."""
    if env is None:
        return None
    env_factory(env)  # a TypeError or an unknown id, raised at fit's call
    if isinstance(env, gym.Env):
        template = env

        def copied():
            return copy.deepcopy(template)

        copied.__name__ = describe(template)
        return copied
    return env


def with_current_weights(callback):
    """The user's `callback(agent, history)`, run with the learner's weights in the agent's Keras
    models (`sync_model` first: before each callback is one of the points where weights move).
    A callback with `syncs_itself = True` (kerasrl's own: SaveBest syncs when it saves) is run as
    it is: a sync costs about a millisecond, and DQN on CartPole ends an episode every few steps."""
    if callback is None or getattr(callback, "syncs_itself", False):
        return callback

    def synced(agent, history):
        agent.sync_model()
        return callback(agent, history)

    return synced


def make_engine(engine, *, workers: int = 2, address: str | None = None):
    """The engine object for `fit(engine=...)`: a registered engine by name (its module, and Ray,
    imported now), or `engine` itself."""
    if isinstance(engine, str):
        if engine not in registry.ENGINES:
            raise ValueError(f"engine must be one of {('auto', 'local', *registry.ENGINES)} (or a "
                             f"RayEngine), got {engine!r}.")
        return registry.engine_class(engine)(workers=workers, address=address)
    if not hasattr(engine, "learn"):
        raise TypeError(f"engine must be 'auto', 'local', 'compiled', 'ray' or a RayEngine, got {type(engine).__name__}.")
    return engine
