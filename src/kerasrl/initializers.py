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

import contextlib
import math
import types
import warnings
import zlib

import keras
import numpy as np

from kerasrl import backend, seeding
from kerasrl.backend.layers import walk_layers

_DETERMINISTIC = tuple(getattr(keras.initializers, name) for name in
                       ("Zeros", "Ones", "Constant", "Identity", "IdentityInitializer", "STFT")
                       if hasattr(keras.initializers, name))

# Where a layer keeps the initializer of each of its variables, when it is not `<name>_initializer`.
_INITIALIZER_ATTRIBUTE = {"recurrent_kernel": "recurrent_initializer",
                          "depthwise_kernel": "depthwise_initializer",
                          "pointwise_kernel": "pointwise_initializer"}


@contextlib.contextmanager
def backend_draws_skipped():
    """Within: Keras's random initializers give zeros instead of drawing.

    For kerasrl's own networks, whose every weight `seed_initial_weights` draws again from the
    seed with numpy right after they are built, and for a saved model being loaded, whose every
    weight the file then gives, the backend's draw is thrown away; on JAX it also compiles one
    random program per weight shape, which made building a Nature CNN take 12 s on one core and
    `load_policy` of a two-layer MLP 4 to 6 s. Only where every variable is then written: a
    variable left as drawn would stay zero. Keras's module layout is private: where it is not
    found, the backend draws as before (slower, same result).
    """
    try:
        from keras.src.initializers import random_initializers as module
    except ImportError:
        module = None
    if module is None or not hasattr(module, "random") or not hasattr(module, "Orthogonal"):
        yield
        return
    from keras import ops

    def zeros(shape, *args, dtype=None, **kwargs):
        if (dtype or "float32") == "float32":  # numpy: JAX would compile a program per shape
            return np.zeros(shape, np.float32)
        return ops.zeros(shape, dtype=dtype)

    original_random, original_orthogonal = module.random, module.Orthogonal.__call__
    module.random = _ZeroDraws(original_random, zeros)
    module.Orthogonal.__call__ = lambda self, shape, dtype=None: zeros(shape, dtype=dtype)
    try:
        yield
    finally:
        module.random, module.Orthogonal.__call__ = original_random, original_orthogonal


def seeded_build(build, seed: int | None):
    """`build()` (kerasrl's own network, or a user's builder), with Keras's own draws skipped
    where `seed` will draw every weight again (`backend_draws_skipped`). Should the network hold
    a variable whose initializer is not reproduced (a custom one), `build` is called again as
    Keras builds: that variable keeps the backend's draw, never a zero."""
    if seed is None:
        return build()
    with backend_draws_skipped():
        model = build()
    return build() if isinstance(model, keras.Model) and WeightDraws(model).kept else model


class _ZeroDraws(types.ModuleType):
    """The backend's random module, with uniform, normal and truncated_normal giving zeros."""

    def __init__(self, module, zeros):
        super().__init__(module.__name__)
        self._module = module
        self.uniform = self.normal = self.truncated_normal = zeros

    def __getattr__(self, name):
        return getattr(self._module, name)


class InitializationWarning(UserWarning):
    """Some initial weights could not be drawn from the seed and differ between backends."""


def seed_initial_weights(model: keras.Model, seed: int, stream: str = "model") -> None:
    """Draw every float variable of `model` again from numpy, keyed by `seed` and `stream`.

    `stream` tells apart the models of one agent (a policy and a critic, twin critics), so that they
    do not start from the same numbers. Variables are numbered in `model.weights` order, which is
    the same on every backend for the same model code.
    """
    plan = WeightDraws(model)
    plan.warn_kept(stacklevel=3)
    for variable, value in zip(plan.drawn, plan.values(seed, stream)):
        variable.assign(value.astype(keras.backend.standardize_dtype(variable.dtype)))


class WeightDraws:
    """Which variables of `model` are drawn from the seed, and how: worked out once, then drawn
    for any number of seeds with numpy alone (`values`), without touching the model. Many seeds'
    initial weights are made this way in one pass (kerasrl.compiled), one seed's by
    `seed_initial_weights`."""

    def __init__(self, model: keras.Model):
        owners = _variable_owners(model)
        self.model_name = type(model).__name__
        self.drawn: list = []  # the variables drawn from the seed, in `model.weights` order
        self._how: list[tuple] = []  # (index in model.weights, initializer, shape, forget-bias)
        self.kept: list[str] = []
        for index, variable in enumerate(model.weights):
            if not _is_float(variable):
                continue  # seed-generator states and integer counters: not weights
            layer = owners.get(id(variable))
            initializer = _initializer_of(layer, variable) if layer is not None else None
            if initializer is None or isinstance(initializer, _DETERMINISTIC):
                if initializer is None:
                    self.kept.append(_describe(layer, variable))
                continue
            sampler = _sampler(initializer, tuple(variable.shape))
            if sampler is None:
                self.kept.append(_describe(layer, variable))
                continue
            self.drawn.append(variable)
            self._how.append((index, sampler, _unit_forget_bias(layer, variable)))

    def values(self, seed: int, stream: str = "model") -> list[np.ndarray]:
        """The drawn variables' initial values for `seed` (float64 numpy, in `drawn` order)."""
        return [batch[0] for batch in self.values_many([seed], stream)]

    def values_many(self, seeds: list[int], stream: str = "model") -> list[np.ndarray]:
        """`values` of every seed, stacked: one (seeds, *shape) array per drawn variable. The draws
        are made seed by seed (each from its own generator); what follows a draw (the QR of an
        orthogonal initializer) runs once over all seeds."""
        stream_key = zlib.crc32(stream.encode())
        out = []
        for index, (raw, finish), forget_bias in self._how:
            batch = finish(np.stack([raw(rng) for rng in seeding.seeded_generators(
                [[int(seed) % 2**63, stream_key, index] for seed in seeds])]))
            if forget_bias:
                units = batch.shape[1] // 4
                batch[:, units:2 * units] = 1.0  # LSTM: the forget gate's bias starts at one
            out.append(batch)
        return out

    def seeded(self, variables, seed: int, stream: str = "model") -> list[np.ndarray]:
        """Numpy values of `variables` (some of the model's) as `seed_initial_weights(model, seed,
        stream)` would leave them: drawn where drawn, the variable's current value elsewhere."""
        return [batch[0] for batch in self.seeded_many(variables, [seed], stream)]

    def seeded_many(self, variables, seeds: list[int], stream: str = "model") -> list[np.ndarray]:
        """`seeded` of every seed, stacked: one (seeds, *shape) array per variable."""
        drawn = {id(v): batch for v, batch in zip(self.drawn, self.values_many(seeds, stream))}
        out = []
        for v in variables:
            dtype = keras.backend.standardize_dtype(v.dtype)
            if id(v) in drawn:
                out.append(drawn[id(v)].astype(dtype))
            else:  # a deterministic or kept initial value: the same for every seed
                current = np.asarray(backend.to_numpy(v.value), dtype)
                out.append(np.repeat(current[None], len(seeds), axis=0))
        return out

    def warn_kept(self, stacklevel: int = 2) -> None:
        if self.kept:
            kept = self.kept
            warnings.warn(
                f"{len(kept)} variable(s) of {self.model_name} keep the backend's own random draw, "
                f"so they start from different numbers on JAX, TensorFlow and PyTorch: "
                f"{', '.join(kept[:6])}{', ...' if len(kept) > 6 else ''}. Use a standard Keras "
                f"initializer (keras.initializers.GlorotUniform, HeNormal, Orthogonal, ...) for them to "
                f"be drawn from the seed, or pass initial_weights='keep' to keep your own.",
                InitializationWarning, stacklevel=stacklevel + 1)


def draw(initializer, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray | None:
    """A numpy draw with the distribution of a standard Keras initializer; None for another one."""
    sampler = _sampler(initializer, shape)
    if sampler is None:
        return None
    raw, finish = sampler
    return finish(raw(rng)[None])[0]


def _sampler(initializer, shape: tuple[int, ...]):
    """How to draw `shape` with the distribution of a standard Keras initializer, as `(raw, finish)`:
    `raw(rng)` draws one value's random numbers and `finish(stacked raws)` turns a stack of them
    into values (the identity, but for an orthogonal initializer's QR); None for another one."""
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
            stddev = math.sqrt(scale) / 0.87962566103423978
            return (lambda rng: _truncated_normal(rng, shape, 0.0, stddev)), _same
        if distribution == "untruncated_normal":
            return (lambda rng: rng.normal(0.0, math.sqrt(scale), shape)), _same
        limit = math.sqrt(3.0 * scale)
        return (lambda rng: rng.uniform(-limit, limit, shape)), _same
    if _is(initializer, keras.initializers.RandomUniform):
        return (lambda rng: rng.uniform(initializer.minval, initializer.maxval, shape)), _same
    if _is(initializer, keras.initializers.RandomNormal):
        return (lambda rng: rng.normal(initializer.mean, initializer.stddev, shape)), _same
    if _is(initializer, keras.initializers.TruncatedNormal):
        return (lambda rng: _truncated_normal(rng, shape, initializer.mean, initializer.stddev)), _same
    if _is(initializer, keras.initializers.Orthogonal) and len(shape) >= 2:
        rows, cols = int(np.prod(shape[:-1])), int(shape[-1])
        return (lambda rng: rng.standard_normal((max(rows, cols), min(rows, cols))),
                lambda raws: _orthogonal(raws, shape, initializer.gain))
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


def _same(raws: np.ndarray) -> np.ndarray:
    return raws


def _orthogonal(normals: np.ndarray, shape, gain: float) -> np.ndarray:
    """Orthogonal values of `shape` from stacked standard normals (seeds, max(r, c), min(r, c)),
    where r, c are `shape` flattened to a matrix."""
    rows, cols = int(np.prod(shape[:-1])), int(shape[-1])
    # numpy's batched QR gives the numbers of one QR per seed; it ran 2x slower than a loop of them
    # on 64x64 matrices, but 3-10x faster on small or thin ones (64x2, 64x4, 32x32: 4,096 seeds).
    if min(rows, cols) <= 8 or rows * cols <= 1024:
        q, r = np.linalg.qr(normals)
        diagonals = np.diagonal(r, axis1=-2, axis2=-1)
    else:  # (R's diagonal alone is kept: stacking every R took a tenth of the time)
        parts = [np.linalg.qr(normal) for normal in normals]
        q, diagonals = np.stack([p[0] for p in parts]), np.stack([np.diagonal(p[1]) for p in parts])
    # The sign fix makes Q uniform over orthogonal matrices.
    q = q * np.sign(diagonals)[:, None, :]
    if rows < cols:
        q = np.swapaxes(q, -1, -2)
    return gain * q.reshape(len(normals), *shape)


def _variable_owners(model: keras.Model) -> dict[int, keras.layers.Layer]:
    """id(variable) -> the innermost layer that created it."""
    owners: dict[int, keras.layers.Layer] = {}
    for layer in _all_layers(model):
        for variable in _own_variables(layer):
            owners[id(variable)] = layer  # inner layers come later and overwrite their parents
    return owners


def _all_layers(layer):
    return walk_layers(layer, include_self=True)


def _own_variables(layer) -> list:
    """The variables a layer made itself (not those of its sublayers)."""
    nested = {id(v) for child in walk_layers(layer) for v in child.weights}
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
