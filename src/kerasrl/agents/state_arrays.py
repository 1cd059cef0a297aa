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
