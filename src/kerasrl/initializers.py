"""Initial weights drawn from the seed with numpy, so that one seed gives one network on every backend.

Keras initializers draw from the backend's own generator (jax.random, tf.random, torch), so the same
`seed=` starts JAX, TensorFlow and PyTorch from different weights, and a run that learns on one
backend may not on another for no reason but the draw. Here every variable of a model is drawn
again, after the model is built, from a numpy generator keyed by (seed, model stream, variable
index), with the distribution of the initializer its layer declares. The standard Keras
initializers are reproduced exactly in distribution (Glorot, He and LeCun uniform and normal,
variance scaling, random uniform and normal, truncated normal, orthogonal); deterministic ones
(zeros, ones, constant, identity) are already the same everywhere and are kept. A variable whose
initializer cannot be reproduced (a custom initializer, a layer that names it differently) keeps the
backend's draw, with one warning naming the layer.
"""

from __future__ import annotations

import math
import warnings
import zlib

import keras
import numpy as np

_DETERMINISTIC = tuple(getattr(keras.initializers, name) for name in
                       ("Zeros", "Ones", "Constant", "Identity", "IdentityInitializer", "STFT")
                       if hasattr(keras.initializers, name))

# Where a layer keeps the initializer of each of its variables, when it is not `<name>_initializer`.
_INITIALIZER_ATTRIBUTE = {"recurrent_kernel": "recurrent_initializer",
                          "depthwise_kernel": "depthwise_initializer",
                          "pointwise_kernel": "pointwise_initializer"}


class InitializationWarning(UserWarning):
    """Some initial weights could not be drawn from the seed and differ between backends."""


def seed_initial_weights(model: keras.Model, seed: int, stream: str = "model") -> None:
    """Draw every float variable of `model` again from numpy, keyed by `seed` and `stream`.

    `stream` tells apart the models of one agent (a policy and a critic, twin critics), so that they
    do not start from the same numbers. Variables are numbered in `model.weights` order, which is
    the same on every backend for the same model code.
    """
    owners = _variable_owners(model)
    stream_key = zlib.crc32(stream.encode())
    kept: list[str] = []
    for index, variable in enumerate(model.weights):
        if not _is_float(variable):
            continue  # seed-generator states and integer counters: not weights
        layer = owners.get(id(variable))
        initializer = _initializer_of(layer, variable) if layer is not None else None
        if initializer is None or isinstance(initializer, _DETERMINISTIC):
            if initializer is None:
                kept.append(_describe(layer, variable))
            continue
        rng = np.random.default_rng(np.random.SeedSequence([int(seed) % 2**63, stream_key, index]))
        value = draw(initializer, tuple(variable.shape), rng)
        if value is None:
            kept.append(_describe(layer, variable))
            continue
        if _unit_forget_bias(layer, variable):
            units = value.shape[0] // 4
            value[units:2 * units] = 1.0  # LSTM: the forget gate's bias starts at one
        variable.assign(value.astype(keras.backend.standardize_dtype(variable.dtype)))
    if kept:
        warnings.warn(
            f"{len(kept)} variable(s) of {type(model).__name__} keep the backend's own random draw, "
            f"so they start from different numbers on JAX, TensorFlow and PyTorch: "
            f"{', '.join(kept[:6])}{', ...' if len(kept) > 6 else ''}. Use a standard Keras "
            f"initializer (keras.initializers.GlorotUniform, HeNormal, Orthogonal, ...) for them to "
            f"be drawn from the seed, or pass initial_weights='keep' to keep your own.",
            InitializationWarning, stacklevel=3)


def draw(initializer, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray | None:
    """A numpy draw with the distribution of a standard Keras initializer; None for another one."""
    cls = type(initializer)
    if _overrides_call(cls, keras.initializers.VarianceScaling):
        return None
    if isinstance(initializer, keras.initializers.VarianceScaling):
        fan_in, fan_out = _fans(shape, getattr(initializer, "input_axes", None),
                                getattr(initializer, "output_axes", None))
        scale = float(initializer.scale)  # Glorot, He, LeCun: attributes, not in get_config()
        scale /= max(1.0, {"fan_in": fan_in, "fan_out": fan_out}.get(initializer.mode,
                                                                      (fan_in + fan_out) / 2.0))
        distribution = initializer.distribution
        if distribution == "truncated_normal":
            return _truncated_normal(rng, shape, 0.0, math.sqrt(scale) / 0.87962566103423978)
        if distribution == "untruncated_normal":
            return rng.normal(0.0, math.sqrt(scale), shape)
        limit = math.sqrt(3.0 * scale)
        return rng.uniform(-limit, limit, shape)
    if _is(initializer, keras.initializers.RandomUniform):
        return rng.uniform(initializer.minval, initializer.maxval, shape)
    if _is(initializer, keras.initializers.RandomNormal):
        return rng.normal(initializer.mean, initializer.stddev, shape)
    if _is(initializer, keras.initializers.TruncatedNormal):
        return _truncated_normal(rng, shape, initializer.mean, initializer.stddev)
    if _is(initializer, keras.initializers.Orthogonal) and len(shape) >= 2:
        return _orthogonal(rng, shape, initializer.gain)
    return None


def _is(initializer, cls) -> bool:
    """`initializer` is `cls` or a subclass that draws the same way (does not override __call__)."""
    return isinstance(initializer, cls) and not _overrides_call(type(initializer), cls)


def _overrides_call(subclass, cls) -> bool:
    return issubclass(subclass, cls) and subclass.__call__ is not cls.__call__


def _fans(shape, input_axes=None, output_axes=None) -> tuple[float, float]:
    """Keras's compute_fans: (fan_in, fan_out) of a weight shape (conv kernels: (..., in, out))."""
    if input_axes is not None and output_axes is not None:
        return (float(np.prod([shape[a] for a in input_axes])),
                float(np.prod([shape[a] for a in output_axes])))
    if len(shape) == 0:
        return 1.0, 1.0
    if len(shape) == 1:
        return float(shape[0]), float(shape[0])
    receptive_field = float(np.prod(shape[:-2])) if len(shape) > 2 else 1.0
    return shape[-2] * receptive_field, shape[-1] * receptive_field


def _truncated_normal(rng, shape, mean: float, stddev: float) -> np.ndarray:
    """Normal draws redrawn until within two standard deviations (as tf/jax truncated_normal)."""
    values = rng.standard_normal(shape)
    outside = np.abs(values) > 2.0
    while outside.any():
        values[outside] = rng.standard_normal(int(outside.sum()))
        outside = np.abs(values) > 2.0
    return mean + stddev * values


def _orthogonal(rng, shape, gain: float) -> np.ndarray:
    rows, cols = int(np.prod(shape[:-1])), int(shape[-1])
    q, r = np.linalg.qr(rng.standard_normal((max(rows, cols), min(rows, cols))))
    q = q * np.sign(np.diag(r))  # the sign fix makes Q uniform over orthogonal matrices
    if rows < cols:
        q = q.T
    return gain * q.reshape(shape)


def _variable_owners(model: keras.Model) -> dict[int, keras.layers.Layer]:
    """id(variable) -> the innermost layer that created it."""
    owners: dict[int, keras.layers.Layer] = {}
    for layer in _all_layers(model):
        for variable in _own_variables(layer):
            owners[id(variable)] = layer  # inner layers come later and overwrite their parents
    return owners


def _all_layers(layer):
    yield layer
    for child in layer._flatten_layers(include_self=False, recursive=False):
        yield from _all_layers(child)


def _own_variables(layer) -> list:
    """The variables a layer made itself (not those of its sublayers)."""
    nested = {id(v) for child in layer._flatten_layers(include_self=False) for v in child.weights}
    return [v for v in layer.weights if id(v) not in nested]


def _initializer_of(layer, variable):
    name = variable.name.split("/")[-1].split(":")[0]
    attribute = _INITIALIZER_ATTRIBUTE.get(name, f"{name}_initializer")
    initializer = getattr(layer, attribute, None)
    if initializer is None or not isinstance(initializer, keras.initializers.Initializer):
        return None
    return initializer


def _unit_forget_bias(layer, variable) -> bool:
    return (getattr(layer, "unit_forget_bias", False) and variable.name.endswith("bias")
            and len(variable.shape) == 1 and variable.shape[0] % 4 == 0)


def _is_float(variable) -> bool:
    return "float" in keras.backend.standardize_dtype(variable.dtype)


def _describe(layer, variable) -> str:
    where = f"layer {layer.name!r} ({type(layer).__name__})" if layer is not None else "a layer"
    return f"{variable.name} of {where}"
