"""TensorFlow: `tf.function` compiled with XLA, gradients from `tf.GradientTape`."""

from __future__ import annotations

import contextlib

import numpy as np
import keras
import tensorflow as tf


def compile(fn, donate_state: bool = False):  # noqa: A001
    """XLA-compile `fn`. Hyperparameters must be closed over or passed as tensors (no retracing)."""
    del donate_state  # TensorFlow manages its own buffers.
    return tf.function(fn, jit_compile=True, reduce_retracing=True)


def value_and_grad(fn):
    """`fn(params, *args) -> (loss, aux)` to `f(params, *args) -> ((loss, aux), grads)`."""

    def wrapped(params, *args):
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(params)
            loss, aux = fn(params, *args)
        grads = tape.gradient(loss, params, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return (loss, aux), grads

    return wrapped


def inference():
    """Eager TensorFlow records no graph without a tape: nothing to switch off."""
    return contextlib.nullcontext()


def configure_threads() -> None:
    """One thread per op pool: small networks gain nothing from more on a 2-core machine."""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass  # TensorFlow has already started its pools; the user's setting stands.


def fori_loop(lower, upper, body, init, unroll=1):
    """`body(i, carry)` from lower to upper (a tf.while_loop; `unroll` is a hint XLA ignores)."""
    del unroll
    return keras.ops.fori_loop(lower, upper, body, init)


def to_tensors(tree):
    """Numpy arrays (any nesting) to tensors (for state kept between compiled calls)."""
    return tf.nest.map_structure(tf.convert_to_tensor, tree)


def feed(tree):
    """Inputs for one compiled call, as tensors (a tf.function traces numpy by value)."""
    return tf.nest.map_structure(tf.convert_to_tensor, tree)


def to_numpy(tree):
    """Tensors (any nesting of lists, tuples and dicts) to numpy."""
    return tf.nest.map_structure(lambda x: np.asarray(x), tree)
