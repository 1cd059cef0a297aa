"""`kerasrl.check_env`: what in an environment will break training or quietly slow it, with the fix.

Modelled on Stable-Baselines3's `env_checker`, and beyond it: framework tensors in place of numpy
(the "Tensor must be from same graph" class of failures), a reset that ignores its seed, and
observations or rewards whose scale a network cannot learn from well.

An env with action masks (`info["action_mask"]` or an `action_masks()` method) has each mask
checked (shape, 0/1 values, an allowed action wherever the episode goes on) and is stepped with
allowed actions only. Problems that make training impossible raise `EnvCheckError`; the others
are returned (and warned about) as sentences, each naming the fix.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from collections.abc import Callable

import gymnasium as gym
import numpy as np

from kerasrl.envs.wrappers import _is_framework_tensor, has_action_masks_method
from kerasrl.masks import MASK_KEY, ActionMaskError, check_masks
from kerasrl.spaces import FlattenLeaves, categorical_sizes, is_goal_space, split_segments

HUGE = 1e4  # observation values beyond this (in absolute value) saturate a network's first layer
LARGE_REWARD = 1e3  # rewards beyond this make TD targets and value losses explode early


class EnvCheckError(ValueError, TypeError):
    """The environment cannot be trained on as it is; the message says why and how to fix it.

    Also a TypeError: an env of the old Gym API (or not an env) is the wrong kind of object.
    """


class MaskCheckError(EnvCheckError, ActionMaskError):
    """A broken action mask found by `check_env`: both an EnvCheckError and an ActionMaskError
    (the error the same mask raises when met during training)."""


class Problem(str):
    """A problem `check_env` found: its message, and its `kind` (e.g. "observation-dtype"), by
    which an agent reports each kind once."""

    kind: str

    def __new__(cls, kind: str, message: str):
        problem = super().__new__(cls, message)
        problem.kind = kind
        return problem


def check_env(env: gym.Env | str | Callable[[], gym.Env], *, steps: int = 200, seed: int = 0,
              warn: bool = True) -> list[str]:
    """Check `env` (an env, a Gymnasium id, or a function returning an env) against the API and
    the habits that training needs, taking `steps` random actions.

    Raises `EnvCheckError` for what makes training impossible (the old Gym API, a reset without a
    `seed` argument, observations outside their space's shape, NaN or inf). Returns the list of
    other problems found (each a `Problem`: a str with its fix, and its `kind`), warned about one by
    one when `warn`. The env's own action space is not sampled (a copy is), so its random stream is
    left as it was; the env itself is reset with `seed` and stepped.
    """
    env, made_here = _make(env)
    problems: list[str] = []
    try:
        name = _name(env)
        _check_spaces(env, name)
        _check_reset_signature(env, name)
        observation = _checked_reset(env, name, seed, problems)
        _check_seeding(env, name, seed, observation, problems)
        _check_steps(env, name, steps, seed, problems)
        if is_goal_space(env.observation_space) and _compute_reward(env) is not None:
            mismatch = goal_reward_mismatch(env, name, seed)
            if mismatch is not None:
                problems.append(Problem("goal-reward", mismatch))
    finally:
        if made_here:
            env.close()
    if warn:
        for problem in problems:
            warnings.warn(problem, stacklevel=2)
    return problems


def _make(env) -> tuple[gym.Env, bool]:
    if isinstance(env, str):
        return gym.make(env), True
    if isinstance(env, gym.Env):
        return env, False
    if callable(env):
        made = env()
        if not isinstance(made, gym.Env):
            raise EnvCheckError(f"The env function returned {type(made).__name__}, not a "
                                f"gymnasium.Env.")
        return made, True
    raise EnvCheckError(f"check_env takes a gymnasium.Env, a Gymnasium id or a function that "
                        f"returns an env; got {type(env).__name__}.")


def _name(env: gym.Env) -> str:
    spec = getattr(env, "spec", None)
    return spec.id if spec is not None else type(env.unwrapped).__name__


def _check_spaces(env: gym.Env, name: str) -> None:
    for what in ("observation_space", "action_space"):
        space = getattr(env, what, None)
        if not isinstance(space, gym.spaces.Space):
            raise EnvCheckError(
                f"{name}.{what} is {type(space).__name__}, not a gymnasium.spaces.Space: set "
                f"self.{what} in the env's __init__ (e.g. gymnasium.spaces.Box(low, high, shape, "
                f"np.float32)). A space from the old `gym` package must be rebuilt with "
                f"gymnasium.spaces.")


def _check_reset_signature(env: gym.Env, name: str) -> None:
    parameters = inspect.signature(env.unwrapped.reset).parameters
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    if "seed" not in parameters and not takes_kwargs:
        raise EnvCheckError(
            f"{name}.reset() takes no `seed` argument: Gymnasium's API is reset(self, *, "
            f"seed=None, options=None) -> (observation, info), starting with "
            f"super().reset(seed=seed) so that self.np_random follows the seed.")


def _checked_observation(env: gym.Env, name: str, observation, where: str,
                         problems: list[str]):
    """The observation as numpy (a Dict or Tuple one as it is), checked against the space: shape
    (error), dtype and bounds."""
    if _is_framework_tensor(observation):
        problems.append(Problem(
            "framework-tensor",
            f"{name}.{where} returns a {type(observation).__module__.split('.')[0]} tensor, not a "
            f"numpy array. kerasrl converts it at the boundary, but a framework tensor made in an "
            f"env belongs to that framework's graph and device (the cause of 'Tensor must be from "
            f"same graph' errors elsewhere): return np.asarray(...) from the env."))
        observation = np.asarray(observation)
    space = env.observation_space
    if not isinstance(space, gym.spaces.Box):
        if not space.contains(observation):
            problems.append(Problem("observation-space",
                                    f"{name}.{where} gave an observation outside {space}: make "
                                    f"the env's observations members of observation_space."))
        return observation if isinstance(observation, (dict, tuple)) else np.asarray(observation)
    array = np.asarray(observation)
    if array.shape != space.shape:
        raise EnvCheckError(
            f"{name}.{where} gave an observation of shape {array.shape}, but observation_space "
            f"has shape {space.shape}: make them agree (a common slip is a missing or extra "
            f"batch axis, or a list of arrays instead of one array).")
    if not np.issubdtype(array.dtype, np.number) and array.dtype != np.bool_:
        raise EnvCheckError(f"{name}.{where} gave an observation of dtype {array.dtype}; "
                            f"observations must be numeric arrays.")
    if not np.all(np.isfinite(array)):
        raise EnvCheckError(f"{name}.{where} gave an observation with NaN or inf values: "
                            f"training on it fails at the first update. Find where the env "
                            f"divides by zero or overflows, or clip the values.")
    if array.dtype != space.dtype:
        problems.append(Problem(
            "observation-dtype",
            f"{name}.{where} gave an observation of dtype {array.dtype}, but observation_space "
            f"has dtype {space.dtype}: cast it with np.asarray(obs, dtype={space.dtype.name!r})."))
    elif not space.contains(array):
        problems.append(Problem(
            "observation-bounds",
            f"{name}.{where} gave an observation outside observation_space's bounds (low "
            f"{_short(space.low)}, high {_short(space.high)}): widen the bounds or clip the "
            f"observation."))
    return array


def _short(values: np.ndarray) -> str:
    flat = np.asarray(values).ravel()
    return np.array2string(flat[:4], precision=3) + (" ..." if flat.size > 4 else "")


def _checked_reset(env: gym.Env, name: str, seed: int, problems: list[str]) -> np.ndarray:
    result = env.reset(seed=seed)
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
        raise EnvCheckError(
            f"{name}.reset() returned {type(result).__name__}, not (observation, info): this is "
            f"the old Gym API. Return `observation, {{}}` from reset (Gymnasium >= 0.26), or wrap "
            f"the env with shimmy's GymV26CompatibilityV0.")
    _checked_mask(env, name, result[1], "reset()", ended=False)
    return _checked_observation(env, name, result[0], "reset()", problems)


def _check_seeding(env: gym.Env, name: str, seed: int, first: np.ndarray,
                   problems: list[str]) -> None:
    """The same seed must give the same first observation, or runs cannot be repeated."""
    again = env.reset(seed=seed)[0]
    if not _same_observation(again, first):
        problems.append(Problem(
            "seed-ignored",
            f"{name}.reset(seed={seed}) gave two different first observations: the env ignores "
            f"its seed, so no run on it can be repeated. Call super().reset(seed=seed) first in "
            f"reset and draw every random number from self.np_random."))


def _same_observation(a, b) -> bool:
    """Equal observations, leaf by leaf for a Dict or Tuple one (a shape change is reported by
    the observation checks, not here)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_observation(a[k], b[k]) for k in a)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_observation(x, y) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    return a.shape != b.shape or np.array_equal(a, b)


def _check_steps(env: gym.Env, name: str, steps: int, seed: int, problems: list[str]) -> None:
    actions = copy.deepcopy(env.action_space)  # sampling the env's own space would shift its stream
    actions.seed(seed)
    _, info = env.reset(seed=seed)
    mask = _checked_mask(env, name, info, "reset()", ended=False)
    observations, rewards = [], []
    for step in range(steps):
        result = env.step(actions.sample(mask=mask) if mask is not None else actions.sample())
        if not (isinstance(result, tuple) and len(result) == 5):
            count = len(result) if isinstance(result, tuple) else type(result).__name__
            raise EnvCheckError(
                f"{name}.step() returned {count} values, not (observation, reward, terminated, "
                f"truncated, info): a 4-tuple is the old Gym API, whose `done` mixes a death "
                f"(no bootstrap) with a time limit (bootstrap). Return both flags, or wrap the "
                f"env with shimmy's GymV26CompatibilityV0.")
        observation, reward, terminated, truncated, info = result
        observations.append(_checked_observation(env, name, observation, "step()", problems))
        if _is_framework_tensor(reward):
            problems.append(Problem(
                "framework-tensor-reward",
                f"{name}.step() returns the reward as a "
                f"{type(reward).__module__.split('.')[0]} tensor: return float(reward), so that "
                f"no framework graph or device travels with it."))
            reward = np.asarray(reward)
        if not (np.ndim(reward) == 0 and np.issubdtype(np.asarray(reward).dtype, np.number)):
            raise EnvCheckError(f"{name}.step() returned a reward of type "
                                f"{type(reward).__name__} and shape {np.shape(reward)}: return "
                                f"one number (a float).")
        if not np.isfinite(reward):
            raise EnvCheckError(f"{name}.step() returned a reward of {float(reward)}: rewards "
                                f"must be finite.")
        rewards.append(float(reward))
        for flag_name, flag in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(flag, (bool, np.bool_)):
                problems.append(Problem(
                    "flag-type", f"{name}.step() returned {flag_name} as {type(flag).__name__}, "
                                 f"not bool: return bool({flag_name})."))
        if not isinstance(info, dict):
            raise EnvCheckError(f"{name}.step() returned info as {type(info).__name__}, not a "
                                f"dict.")
        mask = _checked_mask(env, name, info, f"step() {step + 1}", ended=bool(terminated or truncated))
        if terminated or truncated:
            _, info = env.reset()
            mask = _checked_mask(env, name, info, "reset()", ended=False)
    _check_scales(name, np.array(observations), np.array(rewards), problems)
    problems[:] = list(dict.fromkeys(problems))  # each problem once, however often it occurred


def _checked_mask(env: gym.Env, name: str, info: dict, where: str, ended: bool) -> np.ndarray | None:
    """The action mask the env gives with an observation, as int8 (for the action space's
    `sample(mask=)`), checked; None when the env has none. At an episode's end a mask may allow
    nothing (no action is taken there)."""
    if MASK_KEY in info:
        mask, source = info[MASK_KEY], f"info['{MASK_KEY}'] after {name}.{where}"
    elif has_action_masks_method(env):
        mask, source = env.get_wrapper_attr("action_masks")(), f"{name}.action_masks() after {where}"
    else:
        return None
    space = env.action_space
    sizes = categorical_sizes(space)
    if sizes is None:
        raise MaskCheckError(f"{source}: action masks need a Discrete or MultiDiscrete action "
                             f"space, and this env's is {space}. Remove the mask, or make the "
                             f"action space Discrete.")
    mask = np.asarray(mask)  # a framework tensor too
    if ended and mask.shape == (sum(sizes),) and not mask.any():
        return None
    try:
        rows = check_masks(mask[None] if mask.ndim == 1 else mask, 1, sum(sizes), source, sizes)
    except ActionMaskError as error:
        raise MaskCheckError(str(error)) from None
    row = rows[0].astype(np.int8)
    if len(sizes) == 1:
        return row
    # MultiDiscrete.sample(mask=) takes one mask per component
    return tuple(split_segments(row, sizes))


def _check_scales(name: str, observations: np.ndarray, rewards: np.ndarray,
                  problems: list[str]) -> None:
    if observations.size and np.issubdtype(observations.dtype, np.floating):
        largest = float(np.abs(observations).max())
        if largest > HUGE:
            problems.append(Problem(
                "observations-huge",
                f"{name}'s observations reach {largest:.3g} in absolute value: a network's first "
                f"layer saturates on values this large. Scale them (e.g. to about [-1, 1]) or "
                f"normalize them (PPO: normalize_observations=True)."))
        if len(observations) > 1 and np.all(observations == observations[0]):
            problems.append(Problem(
                "observations-constant",
                f"{name}'s observations never changed over {len(observations)} random steps: "
                f"the agent cannot tell states apart. Check that step() returns the new state."))
    if rewards.size and float(np.abs(rewards).max()) > LARGE_REWARD:
        problems.append(Problem(
            "reward-scale",
            f"{name}'s rewards reach {float(np.abs(rewards).max()):.3g} in absolute value, far "
            f"from a network's output scale: TD targets and value losses start huge. Scale the "
            f"rewards (e.g. divide by {10 ** int(np.log10(np.abs(rewards).max())):g}) or clip "
            f"them."))


# -- goal-conditioned envs (hindsight replay) ----------------------------------------------------
def _compute_reward(env: gym.Env):
    try:
        return env.get_wrapper_attr("compute_reward")
    except AttributeError:
        return None


def _own_observations(env: gym.Env) -> gym.Env:
    """The env inside kerasrl's flattening boundary: it steps the env's own Dict observations."""
    return env.env if isinstance(env, FlattenLeaves) else env


def goal_reward_mismatch(env: gym.Env, name: str, seed: int, steps: int = 32) -> str | None:
    """Where a goal env's `compute_reward(achieved_goal, desired_goal, info)` disagrees with the
    reward a step paid, over `steps` random steps (its own observations, a Dict), or None. Hindsight
    replay recomputes rewards with it, so a reward scaled or shaped in `step` only would teach
    wrong values in silence."""
    env = _own_observations(env)
    compute_reward = _compute_reward(env)
    actions = copy.deepcopy(env.action_space)  # as _check_steps: the env's own stream untouched
    actions.seed(seed)
    obs, _ = env.reset(seed=seed)
    for step in range(steps):
        obs, reward, terminated, truncated, info = env.step(actions.sample())
        recomputed = float(np.asarray(compute_reward(obs["achieved_goal"], obs["desired_goal"], info)))
        if not np.isclose(recomputed, float(reward), rtol=1e-5, atol=1e-6):
            return (f"{name}'s compute_reward(achieved_goal, desired_goal, info) gave {recomputed} "
                    f"at random step {step} where the step paid {float(reward)}: hindsight replay "
                    f"recomputes rewards with it, so the two must agree. Make compute_reward the "
                    f"reward step pays (for the step's achieved_goal and desired_goal).")
        if terminated or truncated:
            obs, _ = env.reset()
    return None


def goal_reward(env: gym.Env, name: str, seed: int):
    """A goal env's `compute_reward` as `(achieved (B, *g), desired (B, *g)) -> rewards (B,)`
    float32 for hindsight replay, checked first (`goal_reward_mismatch`, on `env`, a copy made for
    this: it is stepped), else a ValueError saying what is wrong. An env whose compute_reward takes
    one goal at a time is called once per row."""
    compute_reward = _compute_reward(env)
    if compute_reward is None:
        raise ValueError(
            f"Hindsight replay recomputes rewards for replayed goals with the env's "
            f"compute_reward(achieved_goal, desired_goal, info), and {name} has none. Add it "
            f"(vectorized over a batch of goals, as Gymnasium's GoalEnv documents), or set "
            f"hindsight_goals=0.")
    mismatch = goal_reward_mismatch(env, name, seed)
    if mismatch is not None:
        raise ValueError(mismatch)
    # Batched or one goal at a time: asked once, of two goals, not at every sampled batch.
    obs, _ = _own_observations(env).reset(seed=seed)
    pair = [np.stack([obs[key]] * 2) for key in ("achieved_goal", "desired_goal")]
    if np.shape(compute_reward(*pair, [{}] * 2)) == (2,):
        return lambda achieved, desired: np.asarray(
            compute_reward(achieved, desired, [{}] * len(achieved)), np.float32)
    return lambda achieved, desired: np.array(
        [compute_reward(a, d, {}) for a, d in zip(achieved, desired)], np.float32)
