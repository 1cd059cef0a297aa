"""The one layer walk (kerasrl.backend.layers): Keras's private walk and the public fallback find
the same layers, parents before children, on every kind of model kerasrl is given."""

from __future__ import annotations

import keras
import pytest

from kerasrl.backend.layers import public_walk, walk_layers


@keras.saving.register_keras_serializable(package="kerasrl_tests")
class Block(keras.layers.Layer):
    """A layer holding layers: one alone, two in a list, one in a dict."""

    def __init__(self, units=4, **kwargs):
        super().__init__(**kwargs)
        self.first = keras.layers.Dense(units)
        self.stack = [keras.layers.Dense(units), keras.layers.Dense(units)]
        self.heads = {"out": keras.layers.Dense(2)}

    def call(self, inputs):
        x = self.first(inputs)
        for layer in self.stack:
            x = layer(x)
        return self.heads["out"](x)


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.torso = keras.Sequential([keras.layers.Dense(8), keras.layers.Conv1D(2, 1)])

    def call(self, inputs):
        return self.block(self.torso(inputs[:, :, None])[:, :, 0])


def functional():
    inputs = keras.Input((3,))
    inner = keras.Sequential([keras.layers.Dense(5), keras.layers.Dense(5)])
    return keras.Model(inputs, keras.layers.Dense(2)(inner(inputs)))


MODELS = {"subclassed": lambda: Subclassed(), "functional": functional,
          "sequential": lambda: keras.Sequential([keras.Input((3,)), Block(), keras.layers.Dense(1)])}


@pytest.mark.parametrize("name", MODELS)
def test_the_public_walk_finds_what_keras_tracks(name):
    model = MODELS[name]()
    model(keras.ops.ones((2, 3)))
    private = walk_layers(model)
    public = public_walk(model)
    real = lambda layers: {id(layer) for layer in layers if not isinstance(layer, keras.layers.InputLayer)}  # noqa: E731
    assert real(public) == real(private) and len(real(private)) >= 4
    # Every weight belongs to a layer the walk found (with the model's own).
    owners = {id(v) for layer in [model, *public] for v in layer.weights}
    assert {id(v) for v in model.weights} <= owners
    # Parents before their children.
    for walk in (public, private):
        position = {id(layer): i for i, layer in enumerate(walk)}
        for layer in walk:
            for child in public_walk(layer):
                if id(child) in position:
                    assert position[id(child)] > position[id(layer)], (layer.name, child.name)
    assert walk_layers(model, include_self=True)[0] is model
    assert public_walk(model, include_self=True)[0] is model
