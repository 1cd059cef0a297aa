"""Gymnasium spaces as JSON, and back: how policy.json (kerasrl.policy_io) records what a policy
reads and does, so that a saved policy loads without its env.

Box, Discrete, MultiDiscrete and MultiBinary spaces, Dict and Tuple spaces of those (nested too),
and `FlatObservations` and `FlatActions`, the flat forms kerasrl carries them in (kerasrl.spaces).
A Dict is a list of [key, space] pairs: the key order is the order of the leaves in the flat
vector.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from kerasrl.files import CheckpointError
from kerasrl.spaces import FlatActionSpace, FlatObservations, flat_actions

def space_to_json(space: gym.Space) -> dict[str, Any]:
    """A Gymnasium space as JSON (Box, Discrete, MultiDiscrete, MultiBinary; Dict and Tuple of
    those, nested too, and the flat form kerasrl carries them in)."""
    if isinstance(space, FlatObservations):
        return {"type": "FlatObservations", "structure": space_to_json(space.structure)}
    if isinstance(space, FlatActionSpace):  # an action space the agents act in flat
        return {"type": "FlatActions", "structure": space_to_json(space.structure)}
    if isinstance(space, gym.spaces.Dict):  # a list of pairs: the key order is the leaves' order
        return {"type": "Dict", "spaces": [[str(k), space_to_json(v)]
                                           for k, v in space.spaces.items()]}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_json(v) for v in space.spaces]}
    if isinstance(space, gym.spaces.Box):
        return {"type": "Box", "shape": list(space.shape), "dtype": space.dtype.name,
                "low": space.low.tolist(), "high": space.high.tolist()}
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist()}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    raise CheckpointError(f"Cannot save a policy for a {type(space).__name__} space; kerasrl "
                          f"saves Box, Discrete, MultiDiscrete and MultiBinary spaces, and Dict "
                          f"and Tuple spaces of those.")


def space_from_json(value: dict[str, Any]) -> gym.Space:
    """The space that `space_to_json` wrote (CheckpointError for an unknown or non-numeric one)."""
    kind = value.get("type")
    if kind == "FlatObservations":
        return FlatObservations(space_from_json(value["structure"]))
    if kind == "FlatActions":
        return flat_actions(space_from_json(value["structure"]))
    if kind == "Dict":
        return gym.spaces.Dict([(key, space_from_json(v)) for key, v in value["spaces"]])
    if kind == "Tuple":
        return gym.spaces.Tuple([space_from_json(v) for v in value["spaces"]])
    if kind == "Box":
        dtype = np.dtype(value["dtype"])
        if dtype.kind not in "fiub":
            raise CheckpointError(f"Box dtype {dtype} is not numeric.")
        shape = tuple(value["shape"])
        low = np.asarray(value["low"], dtype=np.float64).reshape(shape)
        high = np.asarray(value["high"], dtype=np.float64).reshape(shape)
        return gym.spaces.Box(low.astype(dtype), high.astype(dtype), shape, dtype)
    if kind == "Discrete":
        return gym.spaces.Discrete(int(value["n"]), start=int(value.get("start", 0)))
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(value["nvec"])
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(value["n"])
    raise CheckpointError(f"Unknown space type {kind!r} in policy.json.")
