"""Convolutional models applied to large batches in pieces (kerasrl.models.batch_piece): JAX on a
CPU only, only models that map each sample on its own, and the same outputs and gradients."""

from __future__ import annotations

import keras
import numpy as np
from kerasrl import backend
from kerasrl.models import batch_piece, stateless_apply
from kerasrl.networks import mlp, nature_cnn

JAX_ON_CPU = backend.NAME == "jax" and backend.on_cpu()


def small_cnn(*extra):
    inputs = keras.Input((36, 36, 2))
    x = keras.layers.Conv2D(4, 8, strides=4, activation="relu")(inputs)
    for layer in extra:
        x = layer(x)
    x = keras.layers.Flatten()(x)
    return keras.Model(inputs, keras.layers.Dense(3)(x))


def test_which_models_run_in_pieces():
    expected = 64 if JAX_ON_CPU else None
    assert batch_piece(nature_cnn((84, 84, 4), 4, scale=1 / 255)) == expected
    assert batch_piece(small_cnn(keras.layers.LayerNormalization())) == expected
    assert batch_piece(mlp((4,), 2)) is None  # no convolution: whole batches run fast
    # Batch statistics, noise, a subclass of a per-sample layer, a user-written call: whole.
    assert batch_piece(small_cnn(keras.layers.BatchNormalization())) is None
    assert batch_piece(small_cnn(keras.layers.Dropout(0.1))) is None

    class NoisyDense(keras.layers.Dense):
        pass

    inputs = keras.Input((36, 36, 2))
    x = keras.layers.Flatten()(keras.layers.Conv2D(4, 8, strides=4)(inputs))
    assert batch_piece(keras.Model(inputs, NoisyDense(3)(x))) is None

    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__()
            self.conv = keras.layers.Conv2D(4, 8, strides=4)
            self.head = keras.layers.Dense(3)

        def call(self, x):
            return self.head(keras.ops.reshape(self.conv(x), (x.shape[0], -1)))

    assert batch_piece(Subclassed()) is None


def test_pieces_give_the_whole_batch_outputs_and_gradients():
    model = small_cnn()
    assert batch_piece(model) == (64 if JAX_ON_CPU else None)
    x = np.random.default_rng(0).normal(size=(200, 36, 36, 2)).astype(np.float32)  # 3 pieces + 8
    params = [v.value for v in model.trainable_variables]
    outputs, _ = stateless_apply(model, params, [], x, True)
    np.testing.assert_allclose(backend.to_numpy(outputs), backend.to_numpy(model(x)),
                               rtol=1e-5, atol=1e-6)
    if backend.NAME != "jax":
        return  # whole batches there (test above): the outputs are the model's own
    import jax
    import jax.numpy as jnp

    def loss(params, pieces):
        if pieces:
            outputs, _ = stateless_apply(model, params, [], x, True)
        else:
            outputs, _ = model.stateless_call(params, [], x, training=True)
        return jnp.mean(outputs ** 2)

    grads = jax.jit(jax.grad(loss), static_argnums=1)(params, True)
    grads_whole = jax.grad(loss)(params, False)
    for g, g_whole in zip(grads, grads_whole):
        np.testing.assert_allclose(g, g_whole, rtol=1e-4, atol=1e-6)
