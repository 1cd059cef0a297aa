"""The base of the keras.ops environments: explicit random state, time limits and auto-reset.

An ops environment is a pair of pure functions over a batch of games, written once in
`keras.ops`, so that it runs eagerly and traces into a compiled loop on JAX, TensorFlow and
PyTorch alike (the layout follows gymnax's `environment.py`; the code is our own):

- `reset(rng, params) -> (obs, state)`
- `step(state, action, params) -> (obs, state, reward, terminated, truncated, info)`

`state` is a flat dict of tensors whose first axis is the game (`num_envs`); it holds the games'
random state (`state["rng"]`) and step counters (`state["time"]`), so nothing is drawn from a
backend's global generator. `step` auto-resets every game that ended: it returns the first
observation of the next episode, and the true last one in `info["final_obs"]` (Gymnasium's
SAME_STEP mode). A time limit (`params.max_steps`) truncates, as Gymnasium's `TimeLimit` does.

Randomness: each game owns a 32-bit xorshift generator kept as an int32 (`xorshift32`), so the
same seed gives bit-identical games on every backend (Keras's own random ops differ between
backends). `make_rng(seed, num_envs)` scrambles the seed with numpy's `SeedSequence` so that
neighbouring games are not correlated.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import numpy as np

UNIFORM_BITS = 24
"""Bits of one uniform draw: a float32 holds every value k / 2**24 exactly."""


def make_rng(seed: int | None, num_envs: int) -> np.ndarray:
    """int32 (num_envs,): one xorshift32 state per game, scrambled from `seed` (None: fresh entropy)."""
    try:
        num_envs = operator.index(num_envs)
    except TypeError:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}.") from None
    if num_envs < 1:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs}.")
    states = np.random.SeedSequence(seed).generate_state(num_envs, dtype=np.uint32)
    states[states == 0] = 1  # xorshift never leaves 0
    return states.view(np.int32)


def xorshift32(x):
    """The next xorshift32 state (Marsaglia 2003, shifts 13, 17, 5) of an int32 tensor.

    Shifts of a signed int are arithmetic to the right on every backend, so the right shift is
    masked to make it logical; left shifts wrap on all three.
    """
    from keras import ops

    x = ops.bitwise_xor(x, ops.left_shift(x, 13))
    x = ops.bitwise_xor(x, ops.bitwise_and(ops.right_shift(x, 17), 0x7FFF))
    return ops.bitwise_xor(x, ops.left_shift(x, 5))


def random_bits(rng, bits: int = UNIFORM_BITS):
    """`(new_rng, k)`: k int32 in [0, 2**bits), the top `bits` of the next 32-bit output."""
    from keras import ops

    rng = xorshift32(rng)
    return rng, ops.bitwise_and(ops.right_shift(rng, 32 - bits), (1 << bits) - 1)


def uniform(rng, low, high, shape=()):
    """`(new_rng, u)`: float32 uniform in [low, high) of shape (num_envs, *shape), one draw per
    value, drawn in row-major order (draw j of a game fills its j-th value)."""
    from keras import ops

    size = int(np.prod(shape))
    draws = []
    for _ in range(size):
        rng, k = random_bits(rng)
        draws.append(ops.cast(k, "float32") * (1.0 / (1 << UNIFORM_BITS)))
    u = ops.stack(draws, axis=-1) if draws else ops.zeros((ops.shape(rng)[0], 0), "float32")
    u = ops.reshape(u, (-1, *shape))
    return rng, low + (high - low) * u


def random_index(rng, n, bits: int):
    """`(new_rng, i)`: i = floor(k * n / 2**bits) in [0, n) for int32 `n` < 2**(31 - bits).

    Exactly `int(u * n)` for the double u = k / 2**bits: the rule of the numpy Snake."""
    from keras import ops

    rng, k = random_bits(rng, bits)
    return rng, ops.right_shift(k * n, bits)


def numpy_bits(state: int, count: int, bits: int = UNIFORM_BITS) -> tuple[int, list[int]]:
    """The numpy reference of `random_bits`, for tests: `count` draws from one game's int32 state."""
    x = int(np.int32(state).view(np.uint32))
    out = []
    for _ in range(count):
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        out.append(x >> (32 - bits))
    return int(np.uint32(x).view(np.int32)), out


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvParams:
    """Parameters every ops environment has."""

    max_steps: int | None = None
    """Steps after which an episode is truncated (Gymnasium's TimeLimit); None for no limit."""


def where_done(done, if_done, otherwise):
    """`if_done` where `done` (num_envs,), broadcast over the trailing axes of the two tensors."""
    from keras import ops

    extra = len(ops.shape(if_done)) - 1
    mask = ops.reshape(done, (-1,) + (1,) * extra) if extra else done
    return ops.where(mask, if_done, otherwise)


class OpsEnv:
    """A batch of games as pure `keras.ops` functions; subclasses write `reset_env` and `step_env`.

    - `reset_env(rng, params) -> (obs, state, rng)`: fresh games (state without rng and time).
    - `step_env(state, action, params) -> (obs, state, reward, terminated, truncated)`: one step
      of every game, without auto-reset or time limit; `state["rng"]` may be advanced.

    Class attributes `observation_space` and `action_space` (Gymnasium spaces of one game) and
    `name` describe the env; `default_params` is a frozen dataclass deriving from `EnvParams`.
    """

    name = "OpsEnv"
    default_params: EnvParams = EnvParams()
    observation_space: Any = None
    action_space: Any = None
    reference: str | None = None
    """The env this one follows, "module:Class" (Gymnasium's `CartPoleEnv`, the numpy Snake): its
    render modes and frame rate are this env's, and it draws this env's frames (`renderer`)."""

    # Subclass API ---------------------------------------------------------------------------
    def reset_env(self, rng, params):
        raise NotImplementedError

    def step_env(self, state, action, params):
        raise NotImplementedError

    def info(self, state) -> dict:
        """Per-game values reported in `info` besides `final_obs` (of the state before reset)."""
        return {}

    def render_attributes(self, observation: np.ndarray, action, params) -> dict:
        """What the reference env's `render` reads to draw one game (e.g. CartPole's `state`), from
        the game's observation (numpy) and the action that led to it (None after a reset)."""
        raise NotImplementedError(f"{self.name} does not say how its reference env draws it: write "
                                  f"render_attributes, or override renderer.")

    def settings(self) -> tuple | None:
        """What, besides its class and params, makes this env play as it does (a board's size),
        hashable, or None where that is unknown: envs of one class with equal settings and params
        share their compiled reset and step (`kerasrl.envs.ops.gym.compiled_games`).

        The default: the instance's attributes, when they are all hashable values, its spaces
        aside (they describe the games the settings make). A subclass holding arrays or other
        unhashable attributes returns its constructor's arguments (Snake)."""
        values = sorted((key, value) for key, value in vars(self).items()
                        if key not in ("observation_space", "action_space"))
        try:
            hash(tuple(values))
        except TypeError:
            return None
        return tuple(values)

    # Public API -----------------------------------------------------------------------------
    @property
    def metadata(self) -> dict:
        """`render_modes` and `render_fps`: the reference env's (no render mode without one)."""
        if self.reference is None:
            return {"render_modes": [], "render_fps": None}
        from kerasrl.envs.ops.render import reference_class

        metadata = reference_class(self.reference).metadata
        return {"render_modes": list(metadata.get("render_modes", [])), "render_fps": metadata.get("render_fps")}

    def renderer(self, render_mode: str, params: EnvParams | None = None):
        """A drawer of one game in `render_mode` (one of `metadata["render_modes"]`): called with
        `(observation, action)` (numpy) it returns the frame, as the reference env's `render` does;
        `close()` when done. The default hands `render_attributes` to the reference env's renderer."""
        from kerasrl.envs.ops.render import ReferenceRenderer, check_render_mode

        check_render_mode(self.name, render_mode, self.metadata["render_modes"])
        params = self.default_params if params is None else params
        return ReferenceRenderer(self.reference, render_mode,
                                 lambda observation, action: self.render_attributes(observation, action, params))

    def params(self, **changes) -> EnvParams:
        """The default parameters with `changes` applied (unknown names raise)."""
        names = {field.name for field in dataclasses.fields(self.default_params)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ValueError(f"{self.name}: unknown parameter(s) {unknown}; the parameters are {sorted(names)}.")
        return dataclasses.replace(self.default_params, **changes)

    def reset(self, rng, params: EnvParams | None = None, *, num_envs: int | None = None):
        """`(obs, state)` of fresh games. `rng`: an int32 (num_envs,) array from `make_rng`, or an
        int seed (then `num_envs`, default 1, says how many games)."""
        from keras import ops

        params = self.default_params if params is None else params
        if rng is None or isinstance(rng, (int, np.integer)):
            rng = make_rng(None if rng is None else int(rng), 1 if num_envs is None else num_envs)
        rng = ops.convert_to_tensor(rng, "int32")
        if len(ops.shape(rng)) != 1:
            raise ValueError(
                f"{self.name}.reset: rng must be one int32 state per game, shape (num_envs,), got shape "
                f"{tuple(ops.shape(rng))}; make it with kerasrl.envs.ops.make_rng(seed, num_envs).")
        obs, state, rng = self.reset_env(rng, params)
        state = dict(state, rng=rng, time=ops.zeros_like(rng))
        return obs, state

    def step(self, state, action, params: EnvParams | None = None):
        """One step of every game, auto-resetting those that end (see the module docstring).

        Returns `(obs, state, reward, terminated, truncated, info)`; `info["final_obs"]` is the
        observation the step produced before any reset (equal to `obs` for games that go on).
        """
        from keras import ops

        params = self.default_params if params is None else params
        final_obs, stepped, reward, terminated, truncated = self.step_env(state, action, params)
        time = state["time"] + 1
        if params.max_steps is not None:
            # As Gymnasium's TimeLimit: a step that ends at the limit is truncated even when it also
            # terminates (learners bootstrap on `terminated` alone, so that is still a death).
            truncated = ops.logical_or(truncated, time >= params.max_steps)
        done = ops.logical_or(terminated, truncated)
        info = {"final_obs": final_obs, **self.info(stepped)}
        reset_obs, fresh, rng = self.reset_env(stepped["rng"], params)
        fresh = dict(fresh, rng=rng, time=ops.zeros_like(time))
        stepped = dict(stepped, time=time)
        state = {key: where_done(done, fresh[key], value) for key, value in stepped.items()}
        obs = where_done(done, reset_obs, final_obs)
        return obs, state, ops.cast(reward, "float32"), terminated, truncated, info
