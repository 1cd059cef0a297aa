"""TensorFlow's fast paths: the private APIs `kerasrl.backend.tensorflow` calls through, guarded.

This is the one module of kerasrl that uses private TensorFlow APIs. Each is checked at first use;
when one is missing, raises or returns something else (a TensorFlow upgrade), the public path runs
instead, with one RuntimeWarning naming what failed, and the same results:

- `ConcreteFunction._call_flat(tensors, captured_inputs)` calls a traced function on a flat list
  of tensors without the argument checks of `concrete(*tensors)` (about 20 us a call, as much as
  a small network's step); the fallback is that public call.
- `EagerTensor._shape_tuple()` gives a tensor's shape as a tuple for the signature a call is
  matched by, without building a `TensorShape` for each of the ~30 tensors of a learner state;
  the fallback is `tuple(tensor.shape)`.

(A packed state's buffer is read as numpy through `np.asarray`, which is public and shares the
tensor's memory as `EagerTensor._numpy()` does: no fast path is needed there.)

`KERASRL_FAST_PATHS=0` (read when this module is imported, and at each new trace) takes the public
paths without trying the private ones.
"""

from __future__ import annotations

import tensorflow as tf

from kerasrl.backend import fall_back, fast_paths

_EagerTensor = type(tf.constant(0.0))

# Whether `ConcreteFunction._call_flat` may be tried for new traces; False once it failed.
CALL_FLAT = True


def first_call(concrete, inputs):
    """`(call, outputs)`: how to call the traced function `concrete` on a flat list of tensors
    from now on, and its outputs (a flat list) on `inputs`, its first call.

    The fast call is tried on this first call; if it raises, the public call runs, and only if
    that succeeds is the fast call blamed (an error of the function itself is raised as usual).
    """
    global CALL_FLAT

    def public(tensors):
        return concrete(*tensors)

    if CALL_FLAT and fast_paths():
        try:
            call_flat, captured = concrete._call_flat, concrete.captured_inputs
            outputs = call_flat(inputs, captured)
            if not isinstance(outputs, (list, tuple)):
                raise TypeError(f"it returned a {type(outputs).__name__}, not a list of tensors")
        except Exception as error:  # noqa: BLE001
            outputs = public(inputs)  # the function's own error, if it has one, comes from here
            CALL_FLAT = False
            fall_back("ConcreteFunction._call_flat", error,
                      "traced functions are called through their public call (about 20 us slower)")
            return public, outputs
        return (lambda tensors: call_flat(tensors, captured)), outputs
    return public, public(inputs)


def _public_shape_tuple(tensor) -> tuple:
    return tuple(tensor.shape)


def choose_shape_tuple():
    """`shape_tuple(tensor)`: `EagerTensor._shape_tuple`, checked on a probe tensor, or the public
    `tuple(tensor.shape)` when the fast paths are off or it fails (one warning)."""
    if not fast_paths():
        return _public_shape_tuple
    try:
        method = _EagerTensor._shape_tuple
        shape = method(tf.zeros((2, 3)))
        if type(shape) is not tuple or shape != (2, 3):
            raise TypeError(f"it returned {shape!r} for a tensor of shape (2, 3)")
    except Exception as error:  # noqa: BLE001
        fall_back("EagerTensor._shape_tuple", error, "shapes are read through tensor.shape")
        return _public_shape_tuple
    return method


# A tensor's shape as a tuple of ints (for eager tensors: always fully known).
shape_tuple = choose_shape_tuple()
