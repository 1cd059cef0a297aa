"""The state of a vector env and every env in it, captured for a checkpoint and put back on load.

`Agent.state_dict` leaves the envs out; kerasrl.checkpoint saves them with this module. A vector env
with its own `state_dict()` / `load_state_dict()` (kerasrl's keras.ops envs) is saved through them.
Any other is captured generically, attribute by attribute, for every layer of every sub-env (each
wrapper and the unwrapped env) and the vector env itself: numbers, strings, None, arrays, numpy
Generators (their bit-generator state), and lists, tuples, deques and dicts of those.
Configuration objects (spaces, specs, enums, the wrapped env, callables) are skipped: they are
rebuilt from the env id. An env with any other attribute (or one running in worker processes)
cannot be restored exactly; the checkpoint then says why, and the envs are reset on load.

The state is JSON (`{"$array": key}` where an array sits) plus a dict of numpy arrays whose keys
start with "env/".
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np

from kerasrl.files import CheckpointError

_SKIPPED_NAMES = frozenset({"env", "envs", "env_fns", "spec", "metadata", "_saved_kwargs",
                            "_cached_spec", "_metadata", "_action_space", "_observation_space",
                            "render_mode"})


class _Uncapturable(Exception):
    pass


def _is_static(value) -> bool:
    """Configuration rebuilt from the env id, not state."""
    from gymnasium.envs.registration import EnvSpec

    return (isinstance(value, (gym.Space, gym.Env, gym.vector.VectorEnv, EnvSpec, enum.Enum, type))
            or callable(value) and not isinstance(value, np.random.Generator))


def _encode(value, key: str, arrays: dict[str, np.ndarray]):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise _Uncapturable(key)
        arrays[key] = value.copy()
        return {"$array": key}
    if isinstance(value, np.generic):
        arrays[key] = np.asarray(value)
        return {"$scalar": key}
    if isinstance(value, np.random.Generator):
        return {"$generator": value.bit_generator.state}
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v, f"{key}/{i}", arrays) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{key}/{i}", arrays) for i, v in enumerate(value)]
    if isinstance(value, deque):
        return {"$deque": [_encode(v, f"{key}/{i}", arrays) for i, v in enumerate(value)],
                "maxlen": value.maxlen}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"$dict": {k: _encode(v, f"{key}/{k}", arrays) for k, v in value.items()}}
    raise _Uncapturable(key)


def _decode(value, arrays: dict[str, np.ndarray], current=None):
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    if "$array" in value:
        array = arrays[value["$array"]]
        if (isinstance(current, np.ndarray) and current.shape == array.shape
                and current.dtype == array.dtype and current.flags.writeable):
            current[...] = array  # in place: views of it (an env's flat aliases) stay views
            return current
        return array.copy()
    if "$scalar" in value:
        return arrays[value["$scalar"]][()]
    if "$generator" in value:
        state = value["$generator"]
        if isinstance(current, np.random.Generator) and \
                type(current.bit_generator).__name__ == state["bit_generator"]:
            current.bit_generator.state = state
            return current
        bit_generator = getattr(np.random, state["bit_generator"], None)
        if not (isinstance(bit_generator, type) and issubclass(bit_generator, np.random.BitGenerator)):
            raise CheckpointError(f"Unknown numpy bit generator {state['bit_generator']!r}.")
        generator = np.random.Generator(bit_generator())
        generator.bit_generator.state = state
        return generator
    if "$tuple" in value:
        return tuple(_decode(v, arrays) for v in value["$tuple"])
    if "$deque" in value:
        return deque((_decode(v, arrays) for v in value["$deque"]), maxlen=value["maxlen"])
    if "$dict" in value:
        return {k: _decode(v, arrays) for k, v in value["$dict"].items()}
    raise CheckpointError(f"Unknown encoded value {sorted(value)!r} in the saved env state.")


def _capture_object(obj, key: str, arrays) -> dict[str, Any]:
    state = {}
    for name, value in vars(obj).items():
        if name in _SKIPPED_NAMES or _is_static(value):
            continue
        state[name] = _encode(value, f"{key}/{name}", arrays)
    return state


def _layers(env: gym.Env) -> list:
    """An env and every env it wraps, outermost first."""
    layers = [env]
    while isinstance(layers[-1], gym.Wrapper):
        layers.append(layers[-1].env)
    return layers


def capture_env_state(vec_env) -> tuple[dict[str, Any] | None, dict[str, np.ndarray], str | None]:
    """(JSON state, arrays, None) of a vector env, or (None, {}, reason) if it cannot be captured."""
    if callable(getattr(vec_env, "state_dict", None)):
        arrays = {f"env/{k}": np.array(v) for k, v in vec_env.state_dict().items()}
        return {"kind": "state_dict"}, arrays, None
    arrays: dict[str, np.ndarray] = {}
    try:
        state: dict[str, Any] = {"kind": "attributes", "type": type(vec_env).__name__,
                                 "vector": _capture_object(vec_env, "env/vector", arrays)}
        sub_envs = getattr(vec_env, "envs", None)
        if isinstance(vec_env, gym.vector.AsyncVectorEnv):
            raise _Uncapturable("the envs run in worker processes (vectorization='subprocess')")
        if sub_envs is not None:
            state["envs"] = [[_capture_object(layer, f"env/{i}/{j}", arrays)
                              for j, layer in enumerate(_layers(sub))]
                             for i, sub in enumerate(sub_envs)]
    except _Uncapturable as error:
        return None, {}, f"its attribute {error.args[0]!r} is not plain data"
    return state, arrays, None


def restore_env_state(vec_env, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Put back what `capture_env_state` took (into envs made from the same id and config)."""
    if state["kind"] == "state_dict":
        vec_env.load_state_dict({k[len("env/"):]: v for k, v in arrays.items() if k.startswith("env/")})
        return
    if type(vec_env).__name__ != state["type"]:
        raise CheckpointError(f"The saved env state is of a {state['type']}, the env now is a "
                              f"{type(vec_env).__name__}.")
    _restore_object(vec_env, state["vector"], arrays)
    if "envs" in state:
        sub_envs = vec_env.envs
        if len(sub_envs) != len(state["envs"]):
            raise CheckpointError(f"The checkpoint holds {len(state['envs'])} envs, the agent has "
                                  f"{len(sub_envs)}: n_envs differs.")
        for sub, layer_states in zip(sub_envs, state["envs"]):
            layers = _layers(sub)
            if len(layers) != len(layer_states):
                raise CheckpointError("The saved env has a different stack of wrappers.")
            for layer, layer_state in zip(layers, layer_states):
                _restore_object(layer, layer_state, arrays)


def _restore_object(obj, state: dict[str, Any], arrays) -> None:
    attributes = vars(obj)
    for name, value in state.items():
        setattr(obj, name, _decode(value, arrays, attributes.get(name)))

