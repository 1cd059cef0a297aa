"""Dict and Tuple observations (nested too), and Discrete ones, carried as one flat float32 vector,
and split back into named leaves inside the networks.

kerasrl's loop, buffers, vector envs (sync and subprocess), checkpoints and Ray actors all move
numpy arrays of one shape. A structured observation is flattened once, at the env boundary
(`FlattenLeaves`, as Gymnasium's `flatten`: Box leaves raveled, Discrete and MultiDiscrete one-hot,
in the space's order), so that every one of those carries it unchanged; the networks undo it with
`SplitLeaves` (in kerasrl.networks: this module does not import Keras), a Keras layer that hands
each leaf, in its own shape, to its encoder or to a user's model by name. Leaf names are the keys'
path joined by "." ("image", "pos.x"; a Tuple's items are "item_0", "item_1", ...): Keras refuses
"/" in input names, PyTorch's ONNX exporter a name that is a number, and ONNX inputs take these
names.

A Discrete observation (FrozenLake's or CliffWalking's cell, an integer) travels the same way, as
one leaf named "observation", one-hot: an index fed to a Dense layer as a number would make
neighbouring cells look alike to the network, and Stable-Baselines3 one-hot encodes it too. So
does a scalar Box observation (shape ()), as a vector of one: Dense layers read vectors.

The price: an image leaf is stored as float32 (4 bytes a pixel where the env gives uint8).
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np

LEAF_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete,
               gym.spaces.MultiBinary)


@dataclass(frozen=True)
class Leaf:
    """One leaf of a structured space: its name, its space, the shape the networks see it in
    (Discrete (n,) one-hot, MultiDiscrete (sum nvec,) one-hot, a scalar Box (1,)), and where it
    sits in the flat vector."""

    name: str
    space: gym.Space
    shape: tuple[int, ...]
    start: int
    size: int


def categorical_sizes(space: gym.Space) -> tuple[int, ...] | None:
    """The sizes of the categorical distributions a policy draws an action of `space` from: one
    for a Discrete space, one per component of a one-dimensional MultiDiscrete space (whose logits,
    and action masks, are the components' side by side), two per component of a one-dimensional
    MultiBinary space (a categorical over {0, 1} is a Bernoulli); None for any other space."""
    if isinstance(space, gym.spaces.Discrete):
        return (int(space.n),)
    if isinstance(space, gym.spaces.MultiDiscrete) and len(space.shape) == 1:
        return tuple(int(n) for n in space.nvec)
    if isinstance(space, gym.spaces.MultiBinary) and len(space.shape) == 1:
        return (2,) * int(space.shape[0])
    return None


def action_sizes(space: gym.Space, agent: str, env_name: str) -> tuple[int, ...] | None:
    """`categorical_sizes` of an agent's action space, refusing actions that do not start at 0
    (Discrete(3, start=1)): a policy's actions are the indices of its outputs, and an env would be
    sent 0 for its first action, which it may not check."""
    sizes = categorical_sizes(space)
    start = np.asarray(getattr(space, "start", 0))
    if sizes is not None and np.any(start != 0):
        shift = (f"gymnasium.wrappers.TransformAction(env, lambda a: a + {int(start)}, "
                 f"gymnasium.spaces.Discrete({int(space.n)}))"
                 if isinstance(space, gym.spaces.Discrete) else
                 "a gymnasium.ActionWrapper that adds start")
        raise ValueError(
            f"{agent} takes discrete actions that start at 0; {env_name} has {space} "
            f"(start={start.tolist()}). Shift the actions with {shift}, and give the agent the "
            f"wrapped env.")
    return sizes


def split_segments(values: np.ndarray, sizes: tuple[int, ...]) -> list[np.ndarray]:
    """(B, sum(sizes)) logits or masks as one (B, size) array per component (numpy)."""
    return np.split(np.asarray(values), np.cumsum(sizes)[:-1], axis=-1)


GOAL_KEYS = ("achieved_goal", "desired_goal")
"""The observation keys of a goal-conditioned env (Gymnasium's GoalEnv form)."""


def is_goal_space(space: gym.Space) -> bool:
    """A Dict observation space (or one carried flat) with an achieved and a desired goal."""
    space = structure_of(space)
    return isinstance(space, gym.spaces.Dict) and all(key in space.spaces for key in GOAL_KEYS)


def is_structured(space: gym.Space) -> bool:
    """A Dict or Tuple space."""
    return isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple))


def flattened_at_boundary(space: gym.Space) -> bool:
    """An observation space kerasrl carries as a flat float32 vector (`FlattenLeaves`): a Dict or
    Tuple, a Discrete one (carried one-hot), or a scalar Box (carried as a vector of one)."""
    return (is_structured(space) or isinstance(space, gym.spaces.Discrete)
            or (isinstance(space, gym.spaces.Box) and space.shape == ()))


def has_named_leaves(space: gym.Space) -> bool:
    """A Dict or Tuple observation carried flat, whose leaves a user's model receives by name (a
    Discrete or scalar one is carried flat too, and its model takes that vector)."""
    return isinstance(space, FlatObservations) and is_structured(space.structure)


def _leaf_spaces(space: gym.Space, prefix: str = ""):
    if isinstance(space, gym.spaces.Dict):
        items = space.spaces.items()
    elif isinstance(space, gym.spaces.Tuple):
        items = ((f"item_{i}", s) for i, s in enumerate(space.spaces))
    else:
        yield prefix or "observation", space  # a Discrete or scalar observation: one leaf
        return
    for key, child in items:
        key = str(key)
        if "/" in key or "." in key:
            raise ValueError(f"Observation key {key!r} contains '/' or '.'; kerasrl names leaves "
                             f"by their keys joined with '.': rename the key.")
        yield from _leaf_spaces(child, f"{prefix}.{key}" if prefix else key)


def leaves(space: gym.Space) -> list[Leaf]:
    """The leaves of a Dict or Tuple space, in the order of its flat vector."""
    found, start = [], 0
    for name, leaf in _leaf_spaces(space):
        if not isinstance(leaf, LEAF_SPACES):
            raise ValueError(
                f"Observation leaf {name!r} is a {type(leaf).__name__} space; kerasrl carries "
                f"Box, Discrete, MultiDiscrete and MultiBinary leaves (arrays of a fixed size). "
                f"Turn it into one of those with a gymnasium.ObservationWrapper.")
        if isinstance(leaf, gym.spaces.Discrete):
            shape = (int(leaf.n),)
        elif isinstance(leaf, gym.spaces.MultiDiscrete):
            shape = (int(np.sum(leaf.nvec)),)
        else:
            shape = tuple(int(d) for d in leaf.shape) or (1,)
        size = int(np.prod(shape))
        found.append(Leaf(name, leaf, shape, start, size))
        start += size
    return found


def _flat_bounds(leaf: Leaf) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(leaf.space, gym.spaces.Box):
        return (np.asarray(leaf.space.low, np.float32).ravel(),
                np.asarray(leaf.space.high, np.float32).ravel())
    return np.zeros(leaf.size, np.float32), np.ones(leaf.size, np.float32)


class FlatObservations(gym.spaces.Box):
    """The flat float32 Box in which a Dict or Tuple observation travels; `structure` is the
    env's own space and `leaves` its leaves (see `leaves`)."""

    def __init__(self, structure: gym.Space):
        self.structure = structure
        self.leaves = leaves(structure)
        bounds = [_flat_bounds(leaf) for leaf in self.leaves]
        super().__init__(np.concatenate([low for low, _ in bounds]),
                         np.concatenate([high for _, high in bounds]), dtype=np.float32)

    def __repr__(self) -> str:
        return f"FlatObservations({self.structure})"


def structure_of(space: gym.Space) -> gym.Space:
    """The env's own observation space: the Dict or Tuple behind a `FlatObservations`, else `space`."""
    return space.structure if isinstance(space, FlatObservations) else space


def _leaf_values(structure: gym.Space, obs, prefix: str = ""):
    if isinstance(structure, gym.spaces.Dict):
        if not isinstance(obs, dict):
            raise ValueError(f"Expected a dict of observations for {structure}, got "
                             f"{type(obs).__name__}.")
        for key, child in structure.spaces.items():
            if key not in obs:
                raise ValueError(f"The observation has no key {key!r} "
                                 f"(leaf {prefix + '.' if prefix else ''}{key}).")
            yield from _leaf_values(child, obs[key], f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(structure, gym.spaces.Tuple):
        if len(obs) != len(structure.spaces):
            raise ValueError(f"Expected a tuple of {len(structure.spaces)} observations, got "
                             f"{len(obs)}.")
        for i, child in enumerate(structure.spaces):
            yield from _leaf_values(child, obs[i],
                                    f"{prefix}.item_{i}" if prefix else f"item_{i}")
    else:
        yield obs


def _flat_leaf(leaf: Leaf, value: np.ndarray, batch: int | None) -> np.ndarray:
    """One leaf's values as (batch, size) float32 (or (size,) for batch None)."""
    space = leaf.space
    value = np.asarray(value)
    lead = () if batch is None else (batch,)
    if isinstance(space, gym.spaces.Discrete):
        index = _indices(leaf, value, int(space.start), int(space.n)).reshape(lead)
        return np.eye(leaf.size, dtype=np.float32)[index]
    if isinstance(space, gym.spaces.MultiDiscrete):
        index = _indices(leaf, value.reshape(*lead, -1), np.asarray(space.start).ravel(),
                         space.nvec.ravel())
        parts = [np.eye(int(n), dtype=np.float32)[index[..., j]]
                 for j, n in enumerate(space.nvec.ravel())]
        return np.concatenate(parts, axis=-1)
    return value.astype(np.float32, copy=False).reshape(*lead, leaf.size)


def _indices(leaf: Leaf, value: np.ndarray, start, n) -> np.ndarray:
    """Categorical observations as 0-based int64 indices, refused when not whole numbers in
    [start, start + n): numpy's indexing would wrap -1 to the last row without a word."""
    index = value.astype(np.int64)
    outside = (index != value) | (index < start) | (index >= np.add(start, n))
    if outside.any():
        bad = value[outside].ravel()[0]
        raise ValueError(f"Observation leaf {leaf.name!r} holds {bad!r}, outside {leaf.space}: "
                         f"a categorical observation is a whole number from start to "
                         f"start + n - 1. Check the env's observation_space.")
    return index - start


def _already_flat(space: FlatObservations, obs) -> bool:
    """Whether `obs` is the flat vector (or a batch of them) rather than the env's observation: any
    array for a Dict or Tuple space; for a Discrete space (or a scalar Box) a float array whose last
    axis is n (or 1): an observation of it is a number, a batch of them a vector of numbers."""
    if not isinstance(obs, np.ndarray):
        return False
    if is_structured(space.structure):
        return True
    return obs.dtype.kind == "f" and obs.ndim >= 1 and obs.shape[-1] == space.shape[0]


def flatten(space: FlatObservations, obs) -> np.ndarray:
    """A structured observation (dict / tuple of arrays), or a batch of them (each leaf with a
    leading batch axis), as (D,) or (B, D) float32; likewise a Discrete observation (an integer)
    or a scalar Box's (a number), or a batch of them. An array that is already flat (see
    `_already_flat`) is returned as is."""
    if _already_flat(space, obs):
        return obs.astype(np.float32, copy=False)
    if is_structured(space.structure):
        values = list(_leaf_values(space.structure, obs))
    else:
        values = [obs]  # a Discrete or scalar observation (or a batch of them): the one leaf
    first, leaf = np.asarray(values[0]), space.leaves[0]
    batch = None if first.ndim == len(leaf.space.shape) else len(first)  # Discrete: shape ()
    for value, leaf in zip(values, space.leaves):
        want = (*(() if batch is None else (batch,)), *leaf.space.shape)
        if np.shape(value) != want:
            raise ValueError(f"Observation leaf {leaf.name!r} has shape {np.shape(value)}, "
                             f"expected {want} for {leaf.space}.")
    return np.concatenate([_flat_leaf(leaf, value, batch)
                           for leaf, value in zip(space.leaves, values)], axis=-1)


def split(space: FlatObservations, flat: np.ndarray) -> dict[str, np.ndarray]:
    """Flat observations (B, D) as {leaf name: (B, *leaf.shape)} float32 (the networks' view)."""
    flat = np.asarray(flat, np.float32)
    return {leaf.name: flat[:, leaf.start:leaf.start + leaf.size].reshape(-1, *leaf.shape)
            for leaf in space.leaves}


class FlattenLeaves(gym.ObservationWrapper):
    """Dict, Tuple, Discrete and scalar observations as one float32 vector (see the module
    docstring)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.observation_space = FlatObservations(env.observation_space)

    def observation(self, observation):
        return flatten(self.observation_space, observation)


class FlatActionSpace:
    """What the flat action spaces share (a base of `FlatActions`, `FlatMultiDiscrete` and
    `FlatMultiBinary`): `structure`, the env's own space."""

    structure: gym.Space

    def __repr__(self) -> str:
        return f"FlatActions({self.structure})"


class FlatActions(FlatActionSpace, gym.spaces.Box):
    """A Box action space of another shape than one dimension (a (2, 3) Box, or a scalar one of
    shape ()), as the agents act in it: a vector of its size, its bounds raveled (as
    Stable-Baselines3 flattens one). `structure` is the env's own Box: `FlattenActions` gives the
    env each action in its shape, and policies return their actions in it."""

    def __init__(self, structure: gym.spaces.Box):
        self.structure = structure
        super().__init__(np.asarray(structure.low).ravel(), np.asarray(structure.high).ravel(),
                         dtype=structure.dtype)


class FlatMultiDiscrete(FlatActionSpace, gym.spaces.MultiDiscrete):
    """A MultiDiscrete action space of several dimensions (nvec [[3, 3], [2, 2]]) as the agents act
    in it: one categorical per component, in the raveled order (an env's action masks too)."""

    def __init__(self, structure: gym.spaces.MultiDiscrete):
        self.structure = structure
        super().__init__(structure.nvec.ravel(), dtype=structure.dtype, start=structure.start.ravel())


class FlatMultiBinary(FlatActionSpace, gym.spaces.MultiBinary):
    """A MultiBinary action space of several dimensions ((2, 3)) as the agents act in it: its bits
    in the raveled order."""

    def __init__(self, structure: gym.spaces.MultiBinary):
        self.structure = structure
        super().__init__(int(np.prod(structure.shape)))


def flat_actions(space: gym.Space) -> FlatActionSpace:
    """The flat form the agents act in of an action space `actions_flattened_at_boundary`."""
    if isinstance(space, gym.spaces.Box):
        return FlatActions(space)
    return (FlatMultiDiscrete if isinstance(space, gym.spaces.MultiDiscrete) else FlatMultiBinary)(space)


def actions_flattened_at_boundary(space: gym.Space) -> bool:
    """An action space the agents act in flat (`flat_actions`): a Box that is not one-dimensional,
    a MultiDiscrete or MultiBinary of several dimensions."""
    if isinstance(space, FlatActionSpace):
        return False
    if isinstance(space, gym.spaces.Box):
        return len(space.shape) != 1
    return isinstance(space, (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)) and len(space.shape) > 1


def env_action_shape(space: gym.Space) -> tuple[int, ...]:
    """The shape of one of the env's actions: a flat form's structure's, else the space's."""
    return tuple((space.structure if isinstance(space, FlatActionSpace) else space).shape)


def env_shaped_actions(actions, space: gym.Space, ops=np):
    """A batch of actions (B, D) of a flat action space in the env's shape (B, *shape), with
    numpy or `ops` (keras.ops in an exported graph); the actions of any other space as they are."""
    if not isinstance(space, FlatActionSpace):
        return actions
    return ops.reshape(actions, (-1, *space.structure.shape))


class FlattenActions(gym.ActionWrapper):
    """The agents' flat actions (`flat_actions`) reshaped for an env whose actions have another
    shape."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.action_space = flat_actions(env.action_space)

    def action(self, action):
        return np.asarray(action, self.action_space.dtype).reshape(self.action_space.structure.shape)
