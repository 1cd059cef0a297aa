"""Wrappers applied at the environment boundary: numpy out, and the Gymnasium API checked once."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np

_FRAMEWORK_MODULES = ("torch", "tensorflow", "jax", "jaxlib", "keras")
_warned_framework = False


def _is_framework_tensor(x) -> bool:
    return type(x).__module__.split(".")[0] in _FRAMEWORK_MODULES


def as_numpy(x):
    """A framework tensor (TensorFlow, PyTorch, JAX) or nested tuple/dict of them, as numpy.

    Converted by duck typing, so that no framework is imported here.
    """
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, dict):
        return {k: as_numpy(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(as_numpy(v) for v in x)
    if hasattr(x, "detach"):  # a torch tensor, possibly requiring grad
        return x.detach().cpu().numpy()
    if hasattr(x, "numpy") and callable(x.numpy):  # a TensorFlow eager tensor
        return np.asarray(x.numpy())
    return np.asarray(x)


class NumpyBoundary(gym.Wrapper):
    """Observations, rewards and flags as numpy, whatever the environment returns.

    Environments that return framework tensors (a model's output fed back as the state, say) are
    the common cause of "Tensor must be from the same graph" and of stray gradients: they are
    converted once here, with one warning, so that tensors exist only inside compiled steps.
    """

    def _convert(self, obs):
        global _warned_framework
        if type(obs) is np.ndarray:
            return obs
        if not _warned_framework and _is_framework_tensor(obs):
            warnings.warn(
                f"Environment {self.env} returns observations as {type(obs).__module__}."
                f"{type(obs).__name__}; kerasrl converts them to numpy at the boundary. Return "
                f"numpy arrays from the environment to avoid the copy.",
                stacklevel=3,
            )
            _warned_framework = True
        return as_numpy(obs)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._convert(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if type(reward) is not float:
            reward = float(as_numpy(reward))
        return self._convert(obs), reward, bool(as_numpy(terminated)), bool(as_numpy(truncated)), info


class ActionMasksInfo(gym.Wrapper):
    """Puts an env's `action_masks()` (sb3-contrib's convention) into `info["action_mask"]`
    (Gymnasium's) after every reset and step, where the vector env carries it, final
    observations included. An env that fills the info key itself keeps its own."""

    def _with_mask(self, info):
        if "action_mask" not in info:
            info = {**info, "action_mask": np.asarray(
                self.env.get_wrapper_attr("action_masks")())}
        return info

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, self._with_mask(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._with_mask(info)


def has_action_masks_method(env: gym.Env) -> bool:
    """True when `env` (or the env it wraps) has an `action_masks()` method."""
    try:
        return callable(env.get_wrapper_attr("action_masks"))
    except AttributeError:
        return False


class ApiCheck(gym.Wrapper):
    """Checks the first reset and step for the Gymnasium API, with a message that says the fix.

    Old Gym environments return `obs` from reset and `(obs, reward, done, info)` from step; mixed
    into a vector env they fail far from the cause.
    """

    def __init__(self, env):
        super().__init__(env)
        self._checked_reset = False
        self._checked_step = False

    def reset(self, **kwargs):
        result = self.env.reset(**kwargs)
        if not self._checked_reset:
            if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
                raise TypeError(
                    f"{self.env}.reset() must return (observation, info) as in Gymnasium; it "
                    f"returned {type(result).__name__}. This looks like the old Gym API: port the "
                    f"environment to gymnasium, or wrap it with shimmy's GymV26CompatibilityV0."
                )
            self._checked_reset = True
        return result

    def step(self, action):
        result = self.env.step(action)
        if not self._checked_step:
            if not (isinstance(result, tuple) and len(result) == 5):
                n = len(result) if isinstance(result, tuple) else type(result).__name__
                raise TypeError(
                    f"{self.env}.step() must return (observation, reward, terminated, truncated, "
                    f"info) as in Gymnasium; it returned {n} values. The 4-tuple "
                    f"(obs, reward, done, info) is the old Gym API: port the environment to "
                    f"gymnasium (split done into terminated and truncated), or wrap it with "
                    f"shimmy's GymV26CompatibilityV0."
                )
            self._checked_step = True
        return result


class RandomStartSteps(gym.Wrapper):
    """keras-rl's `nb_max_start_steps` and `start_step_policy`: after each reset, a random number
    of steps in [0, max_steps) taken by `start_action` (an action, a callable from the observation
    to an action, or None: a uniform random action), so that episodes start from varied states.
    The count and the random actions come from the env's own `np_random`, so a seeded reset gives
    the same start. An episode that ends during the start steps is reset again (keras-rl warns
    and carries on from there too)."""

    def __init__(self, env: gym.Env, max_steps: int, start_action=None):
        super().__init__(env)
        if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
            raise ValueError(f"RandomStartSteps: max_steps must be an int of at least 1, got "
                             f"{max_steps!r}.")
        if start_action is not None and not callable(start_action) and not env.action_space.contains(start_action):
            raise ValueError(f"RandomStartSteps: start_action {start_action!r} is not in the env's "
                             f"action space {env.action_space}.")
        self.max_steps = int(max_steps)
        self.start_action = start_action

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        for _ in range(int(self.np_random.integers(self.max_steps))):
            action = self.start_action
            if action is None:
                action = _sample(self.action_space, self.np_random)
            elif callable(action):
                action = action(obs)
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


def _sample(space: gym.Space, rng: np.random.Generator):
    """A uniform action of `space` drawn from `rng` (the env's, so seeded resets repeat)."""
    if isinstance(space, gym.spaces.Discrete):
        return space.start + int(rng.integers(space.n))
    if isinstance(space, gym.spaces.Box) and space.is_bounded():
        return rng.uniform(space.low, space.high).astype(space.dtype)
    raise TypeError(f"RandomStartSteps: give start_action for a {type(space).__name__} action "
                    f"space (random start actions cover Discrete and bounded Box).")


class ActionRepeat(gym.Wrapper):
    """keras-rl's `action_repetition`: each action is applied `repeat` times, the rewards summed,
    stopping early when the episode ends; the agent sees the last observation."""

    def __init__(self, env: gym.Env, repeat: int):
        super().__init__(env)
        if isinstance(repeat, bool) or not isinstance(repeat, (int, np.integer)) or repeat < 1:
            raise ValueError(f"ActionRepeat: repeat must be an int of at least 1, got {repeat!r}.")
        self.repeat = int(repeat)

    def step(self, action):
        total = 0.0
        for _ in range(self.repeat):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info
