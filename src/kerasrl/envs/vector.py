"""Making the vector environments that agents train on.

Every agent steps `n_envs` environments together through one Gymnasium vector env in SAME_STEP
auto-reset mode: when an episode ends, `step` returns the first observation of the next one and the
true final observation in `info["final_obs"]`, which is what the replay buffer must store.
"""

from __future__ import annotations

import copy
import importlib
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from kerasrl.envs.wrappers import ActionMasksInfo, ApiCheck, NumpyBoundary, has_action_masks_method
from kerasrl.spaces import FlattenActions, FlattenLeaves, actions_flattened_at_boundary, flattened_at_boundary

EnvSpec = str | gym.Env | Callable[[], gym.Env]


def describe(env: EnvSpec) -> str:
    """A short name for an environment spec, for logs and messages."""
    if isinstance(env, str):
        return env
    if isinstance(env, gym.Env):
        return env.spec.id if env.spec is not None else type(env.unwrapped).__name__
    return getattr(env, "__name__", repr(env))


def check_env_id(env_id: str) -> None:
    """Refuse an id Gymnasium does not know, where it is passed, naming it and what to pass
    instead. ALE's own ids (ALE/Pong-v5) are registered here on first use where ale-py is
    installed: Gymnasium 1.x registers them only once `ale_py` is imported. `module:Env-v0`
    (Gymnasium's form for an env that a module registers when imported) imports the module first,
    as `gymnasium.make` does."""
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise ValueError(f"Environment {env_id!r}: the module {module!r}, which should register {name!r}, could "
                             f"not be imported ({error}). Run from the folder that holds it, or put that folder "
                             f"on PYTHONPATH.") from None
        env_id = name
    try:
        gym.spec(env_id)
        return
    except gym.error.Error as error:
        reason = error
    if env_id.startswith("ALE/"):
        try:
            import ale_py
        except ImportError:
            raise ValueError(f"{env_id!r} is an Atari game, and ale-py is not installed: pip install 'kerasrl[atari]' "
                             f"(it bundles the ROMs). kerasrl/<Game>-v5 (kerasrl/Pong-v5, ...) is the game with "
                             f"the standard preprocessing (docs/atari.md).") from None
        gym.register_envs(ale_py)
        try:
            gym.spec(env_id)
            return
        except gym.error.Error as error:
            reason = error
    raise ValueError(f"Unknown environment {env_id!r}: {reason} Pass a registered Gymnasium id "
                     f"(gymnasium.pprint_registry() lists them; kerasrl's own start with kerasrl/, e.g. "
                     f"kerasrl/OpsCartPole-v1, kerasrl/Pong-v5), a gymnasium.Env, or a function that returns one.") from None


# The kerasrl extra that brings what Gymnasium's own env families need (Gymnasium's message names
# its own extras, whose box2d one swaps the video extra's pygame for pygame-ce).
_FAMILY_EXTRAS = {"gymnasium.envs.box2d": ("Box2D", "box2d"),
                  "gymnasium.envs.mujoco": ("MuJoCo", "mujoco")}


def make_registered(env_id: str, **kwargs) -> gym.Env:
    """`gymnasium.make(env_id, **kwargs)`, where a Box2D or MuJoCo env whose engine is not
    installed names the kerasrl extra that installs it."""
    try:
        return gym.make(env_id, **kwargs)
    except gym.error.DependencyNotInstalled as error:
        entry_point = str(gym.spec(env_id.rpartition(":")[2]).entry_point)
        engine, extra = next((found for family, found in _FAMILY_EXTRAS.items()
                              if entry_point.startswith(family)), (None, None))
        if extra is None:
            raise
        raise gym.error.DependencyNotInstalled(
            f"{env_id} needs {engine}, which is not installed: pip install 'kerasrl[{extra}]'") from error


def env_with_kwargs(env_id: str, kwargs: dict):
    """`env_id` as `gymnasium.make(env_id, **kwargs)` makes it: the id itself without keywords,
    else a function that makes it, named for messages ("FrozenLake-v1(is_slippery=False)")."""
    if not kwargs:
        return env_id

    def make():
        check_env_id(env_id)
        return make_registered(env_id, **kwargs)

    make.__name__ = f"{env_id}({', '.join(f'{k}={v}' for k, v in kwargs.items())})"
    make.env_id, make.env_kwargs = env_id, dict(kwargs)  # what a checkpoint keeps to make it again
    return make


def id_and_kwargs(env: EnvSpec) -> tuple[str | None, dict]:
    """The Gymnasium id and keywords `env` is made from: an id's with none, an `env_with_kwargs`
    function's, else (None, {}) (an env object, another function: nothing to make again)."""
    if isinstance(env, str):
        return env, {}
    env_id, kwargs = getattr(env, "env_id", None), getattr(env, "env_kwargs", None)
    if isinstance(env_id, str) and isinstance(kwargs, dict):
        return env_id, dict(kwargs)
    return None, {}


def check_env_kwargs(env_id: str, kwargs: dict) -> None:
    """Refuse keywords that `env_id` does not take, where they are given (gymnasium.make raises a
    TypeError naming the keyword; one env is made and closed to find out)."""
    check_env_id(env_id)
    if not kwargs:
        return
    try:
        make_registered(env_id, **kwargs).close()
    except TypeError as error:
        said = " ".join(f"{k}={v!r}" for k, v in kwargs.items())
        raise ValueError(f"{env_id} does not take the keyword(s) {said} ({error}).") from None


def evaluation_env(env_id: str | None, kwargs: dict):
    """`env_id`'s evaluation form as `evaluate` and `fit(eval_env=...)` take it: None (the training
    env itself) without keywords, else a function making `gymnasium.make(env_id, **kwargs)`, named
    for messages (Atari's `training=False`: whole games, raw scores)."""
    if not kwargs or env_id is None:
        return None
    return env_with_kwargs(env_id, kwargs)


EVALUATION_STEP_CAP = 100_000
"""The longest episode an evaluation runs (`Agent.evaluate`, `kerasrl evaluate`), in env steps,
where none is given: above every time limit of the envs shipped with Gymnasium, ALE (27,000 agent
steps) and kerasrl, so that it only ends episodes that would not end."""


def env_factory(env: EnvSpec) -> Callable[[], gym.Env]:
    """A function that returns a new environment each call, wrapped for the numpy boundary (and a
    Dict, Tuple or Discrete observation flattened there, see kerasrl.spaces)."""
    if isinstance(env, str):
        check_env_id(env)

        def make():  # registers ALE's ids in a worker process too (vectorization="subprocess")
            check_env_id(env)
            return make_registered(env)
    elif isinstance(env, gym.Env):
        instances = [env]

        def make():
            # The first call hands back the user's instance; later ones (evaluation, more envs)
            # need copies of it.
            return instances.pop() if instances else copy.deepcopy(env)
    elif isinstance(env, gym.vector.VectorEnv):
        spec = getattr(env, "spec", None)
        example = repr(spec.id) if spec is not None else "lambda: YourEnv()"
        raise TypeError(
            f"env is a vector env ({type(env).__name__}, {env.num_envs} envs); kerasrl makes the "
            f"vector env itself from one env: pass {example} with n_envs={env.num_envs} "
            f"(vectorization='subprocess' for one process per env).")
    elif callable(env):
        make = env
    else:
        raise TypeError(
            f"env must be a Gymnasium id (str), a gymnasium.Env, or a callable returning one; "
            f"got {type(env).__name__}."
        )

    def make_checked():
        made = make()
        if not isinstance(made, gym.Env):
            if hasattr(made, "step") and hasattr(made, "reset"):
                made = _LooseEnv(made)
            else:
                raise TypeError(f"The env factory returned {type(made).__name__}, not a gymnasium.Env.")
        checked = ApiCheck(made)
        if has_action_masks_method(made):
            checked = ActionMasksInfo(checked)
        if actions_flattened_at_boundary(made.action_space):
            checked = FlattenActions(checked)
        if flattened_at_boundary(made.observation_space):
            return FlattenLeaves(NumpyBoundary(checked))
        return NumpyBoundary(checked)

    return make_checked


class _LooseEnv(gym.Env):
    """Lets an object with gym-like methods but not derived from gymnasium.Env be checked."""

    def __init__(self, env):
        self._env = env
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self.metadata = getattr(env, "metadata", {})

    def reset(self, *, seed=None, options=None):
        try:
            return self._env.reset(seed=seed, options=options)
        except TypeError:
            return self._env.reset()

    def step(self, action):
        return self._env.step(action)

    def __str__(self):
        return type(self._env).__name__


def has_vector_entry_point(env: EnvSpec) -> bool:
    """True for a kerasrl id with a native vector implementation (e.g. kerasrl/Snake-v0).

    Only kerasrl's own vector envs are known to support SAME_STEP auto-reset; others (Gymnasium's
    CartPole has one too) go through SyncVectorEnv.
    """
    if not isinstance(env, str) or not env.startswith("kerasrl/"):
        return False
    try:
        spec = gym.spec(env)
    except gym.error.Error:
        return False
    return spec.vector_entry_point is not None


def make_vec_env(env: EnvSpec, n_envs: int, *, vectorization: str = "sync",
                 factory: Callable[[], gym.Env] | None = None) -> gym.vector.VectorEnv:
    """`n_envs` copies of `env` stepped together, auto-resetting in SAME_STEP mode.

    A registered id with a native vector implementation uses it (no Python loop over envs).
    `vectorization="subprocess"` runs the envs in worker processes (spawned, never forked from a
    process that holds a live backend). `factory` (from `env_factory(env)`) is reused when given,
    so that a user's env instance is handed out once.
    """
    if n_envs < 1:
        raise ValueError(f"n_envs must be at least 1, got {n_envs}.")
    if vectorization not in ("sync", "subprocess"):
        raise ValueError(f"vectorization must be 'sync' or 'subprocess', got {vectorization!r}.")
    env_id, kwargs = id_and_kwargs(env)  # kerasrl/Snake-v0 with keywords is still its vector env
    if has_vector_entry_point(env_id) and vectorization == "sync":
        return gym.make_vec(
            env_id, num_envs=n_envs, vectorization_mode="vector_entry_point",
            autoreset_mode=AutoresetMode.SAME_STEP, **kwargs,
        )
    factory = factory if factory is not None else env_factory(env)
    thunks = [factory for _ in range(n_envs)]
    if vectorization == "subprocess":
        return SubprocessVectorEnv(
            thunks, name=describe(env), context="spawn", autoreset_mode=AutoresetMode.SAME_STEP,
            shared_memory=True,
        )
    return gym.vector.SyncVectorEnv(thunks, autoreset_mode=AutoresetMode.SAME_STEP)


class EnvWorkerError(RuntimeError):
    """An environment running in a subprocess worker raised, or its worker process died."""


class SubprocessVectorEnv(gym.vector.AsyncVectorEnv):
    """Gymnasium's AsyncVectorEnv with failures that say what failed, and no stuck workers.

    Gymnasium re-raises a worker's exception without naming the env, and a worker that died
    surfaces as a bare EOFError (then again from `close`). Here either becomes one
    `EnvWorkerError` naming the env, the call, the exception or the dead worker's exit code; the
    other workers are terminated at once, so nothing is left running.
    """

    def __init__(self, env_fns, *, name: str, **kwargs):
        self.env_name = name
        super().__init__(env_fns, **kwargs)

    def reset(self, **kwargs):
        try:
            return super().reset(**kwargs)
        except KeyboardInterrupt:
            self._terminate()
            raise
        except Exception as error:
            self._fail("reset", error)

    def step(self, actions):
        try:
            return super().step(actions)
        except KeyboardInterrupt:  # Ctrl-C: the workers got it too; end them without a wait
            self._terminate()
            raise
        except Exception as error:
            self._fail("step", error)

    def _terminate(self) -> None:
        self._state = type(self._state).DEFAULT
        try:
            self.close_extras(terminate=True)
        except Exception:  # noqa: BLE001  (best effort: workers may be gone already)
            pass
        self.closed = True

    def _fail(self, call: str, error: Exception):
        # A closed pipe can be seen before the dead worker is reaped: give it a moment.
        deadline = time.monotonic() + 1.0
        while all(p.is_alive() for p in self.processes) and time.monotonic() < deadline:
            time.sleep(0.01)
        dead = [f"worker {i} (pid {p.pid}) exited with code {p.exitcode}"
                for i, p in enumerate(self.processes) if not p.is_alive()]
        if isinstance(error, (EOFError, BrokenPipeError, ConnectionError)):
            cause = "; ".join(dead) or f"a worker stopped answering ({type(error).__name__})"
        else:
            cause = f"{type(error).__name__}: {error}"
        self._terminate()
        raise EnvWorkerError(
            f"Environment {self.env_name} failed in a subprocess worker during {call}(): "
            f"{cause}. The other workers were stopped. Run with vectorization='sync' to debug it "
            f"in this process."
        ) from error


def final_observations(next_obs: np.ndarray, done: np.ndarray, info: dict) -> np.ndarray:
    """The observations that end each step: the true final one where an episode ended."""
    if not done.any() or "final_obs" not in info:
        return next_obs
    real = next_obs.copy()
    final = info["final_obs"]
    for i in np.flatnonzero(info.get("_final_obs", done)):
        real[i] = final[i]
    return real


def env_action(action, action_space: gym.Space):
    """One env's action from a policy's output: an int for Discrete, an array for Box."""
    if isinstance(action_space, gym.spaces.Discrete):
        return int(np.asarray(action).item())
    return np.asarray(action, dtype=action_space.dtype).reshape(action_space.shape)


def episode_extras(info: dict, i: int) -> dict[str, Any]:
    """Numeric per-episode figures that env `i` of a vector env reported as its episode ended
    (e.g. fruits_eaten; a flag such as a goal env's is_success as 0 or 1): the Python loops log
    them, `evaluate` averages them (the mean of is_success is the success rate).

    In SAME_STEP auto-reset mode they sit in `info["final_info"]`.
    """
    final = info.get("final_info")
    if not isinstance(final, dict):
        return {}
    return numeric_figures({key: values[i] for key, values in final.items()
                            if isinstance(values, np.ndarray) and values.ndim >= 1
                            and (final.get(f"_{key}") is None or final[f"_{key}"][i])})


def numeric_figures(info: dict) -> dict[str, float]:
    """The numbers and flags of one env's `info` (as floats), as `episode_extras` reads them."""
    figures = {}
    for key, value in info.items():
        if key.startswith("_") or key == "episode":
            continue
        kind = np.asarray(value).dtype.kind
        if kind in ("b", "i", "u", "f") and np.ndim(value) == 0:
            figures[key] = float(value)
    return figures
