"""Training state as numpy arrays, for checkpoints: copies of Keras variables' values, and nests
of arrays (a learner's or a compiled loop's state) as flat `.npz` names and back, checked against
the shapes the agent expects.
"""

from __future__ import annotations

import numpy as np

from kerasrl import backend


def variable_values(variables) -> list[np.ndarray]:
    """Copies of Keras variables' values as numpy (never views of the backend's buffers). Through
    kerasrl's backend layer: Keras's own conversion on PyTorch passes torch tensors to np.array,
    which warns (DeprecationWarning: no `copy` keyword) on every agent a user makes."""
    return [np.array(backend.to_numpy(v.value)) for v in variables]


def flatten_arrays(prefix: str, tree) -> dict[str, np.ndarray]:
    """A nest of dicts and lists of arrays as flat `prefix/key/0` names (for .npz files)."""
    flat = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            flat.update(flatten_arrays(f"{prefix}/{key}", value))
    elif isinstance(tree, (list, tuple)):
        for i, value in enumerate(tree):
            flat.update(flatten_arrays(f"{prefix}/{i}", value))
    else:
        flat[prefix] = np.array(tree)
    return flat


def unflatten_arrays(prefix: str, flat: dict[str, np.ndarray], like):
    """The inverse of `flatten_arrays`, shaped like `like`; shapes and dtypes are checked."""
    if isinstance(like, dict):
        return {key: unflatten_arrays(f"{prefix}/{key}", flat, value) for key, value in like.items()}
    if isinstance(like, (list, tuple)):
        return [unflatten_arrays(f"{prefix}/{i}", flat, value) for i, value in enumerate(like)]
    if prefix not in flat:
        raise KeyError(f"The saved state has no array {prefix!r}.")
    value, expected = flat[prefix], np.asarray(like)
    if value.shape != expected.shape:
        raise ValueError(f"Saved array {prefix!r} has shape {value.shape}, the agent expects "
                         f"{expected.shape}: the model or config differs from the saved one.")
    return value.astype(expected.dtype, copy=False)


LEARNER_SECTIONS = ("params", "non_trainable", "target_params", "target_non_trainable", "opt")


def with_model_level(arrays: dict[str, np.ndarray], name: str) -> dict[str, np.ndarray]:
    """`learner/params/0` -> `learner/params/<name>/0`: a checkpoint of kerasrl 0.1's one-model
    learner layout (no model level, no step counter: it starts at zero) in today's layout."""
    if any(k.split("/")[2:3] == [name] for k in arrays if k.startswith("learner/params/")):
        return arrays
    upgraded = {}
    for key, value in arrays.items():
        parts = key.split("/")
        if parts[0] == "learner" and len(parts) > 2 and parts[1] in LEARNER_SECTIONS:
            key = "/".join([*parts[:2], name, *parts[2:]])
        upgraded[key] = value
    upgraded.setdefault("learner/step", np.zeros((), np.int32))
    return upgraded


def replay_learning_arrays(learner, buffer) -> dict[str, np.ndarray]:
    """An off-policy agent's learning state as checkpoint arrays: its learner's and its replay
    buffer's (under "buffer/")."""
    arrays = learner.arrays()
    arrays.update({f"buffer/{k}": np.array(v) for k, v in buffer.state_dict().items()})
    return arrays


def load_replay_learning_arrays(learner, buffer, arrays: dict[str, np.ndarray]) -> None:
    """Restore what `replay_learning_arrays` wrote."""
    learner.load_arrays(arrays)
    buffer.load_state_dict({k[len("buffer/"):]: v for k, v in arrays.items()
                            if k.startswith("buffer/")})
