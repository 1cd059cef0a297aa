"""One walk over the layers of a Keras model: every layer inside it, nested models and layers
included, each once, a parent before its children.

Keras keeps this walk private (`Layer._flatten_layers`); it is the one used when present, because
it is Keras's own record of which layers a layer tracks. Without it (a Keras release that renames
it, or `KERASRL_FAST_PATHS=0`), the walk goes through public attributes only: a model's `layers`,
and the layers any other layer holds as attributes, alone or in lists, tuples and dicts (how Keras
itself finds them when they are assigned). tests/test_layer_walk.py holds the two walks equal.
"""

from __future__ import annotations

import os

import keras


def walk_layers(root, *, include_self: bool = False) -> list:
    """Every layer inside `root` (a Keras layer or model), depth first, parents before children."""
    if _PRIVATE_WALK and hasattr(root, "_flatten_layers"):
        return list(root._flatten_layers(include_self=include_self, recursive=True))
    return public_walk(root, include_self=include_self)


def convolutions(model) -> list:
    """The convolution layers inside `model`: Keras's and kerasrl's (PatchConv2D), any layer whose
    class name says Conv (what the device placement weighs). Which of them run slowly inside XLA's
    CPU loops is a narrower question: `slow_in_loops`."""
    return [layer for layer in walk_layers(model) if "conv" in type(layer).__name__.lower()]


def _keras_convolutions() -> tuple[type, ...]:
    names = ("Conv1D", "Conv2D", "Conv3D", "SeparableConv1D", "SeparableConv2D", "DepthwiseConv1D",
             "DepthwiseConv2D", "Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose")
    return tuple(getattr(keras.layers, name) for name in names if hasattr(keras.layers, name))


# Keras's own convolutions (their subclasses included).
KERAS_CONVOLUTIONS = _keras_convolutions()


def slow_in_loops(models) -> list[str]:
    """The class names (sorted, each once) of the layers in `models` (Keras models) whose weight
    gradient XLA's CPU backend runs about 10x slower inside a compiled loop than outside one:
    Keras's convolutions. The snake_small Q-network's gradient step at batch 64 took 136 ms inside
    `lax.scan` against 5.8 ms jitted alone (TensorFlow's XLA loop: 52 ms). kerasrl's PatchConv2D
    computes a convolution as one matrix product, which stays fast in loops: not listed.

    The one test of "convolutions that want unrolled steps" that the learners' unrolled rounds
    (kerasrl.agents.learner.unrolled_steps) and the compiled engine's choice of loop share."""
    return sorted({type(layer).__name__ for model in models for layer in walk_layers(model)
                   if isinstance(layer, KERAS_CONVOLUTIONS)})


def _per_sample_layers() -> tuple[type, ...]:
    names = ("InputLayer", "Dense", "EinsumDense", "Flatten", "Reshape", "Permute", "RepeatVector",
             "Rescaling", "Activation", "ReLU", "LeakyReLU", "ELU", "Softmax", "LayerNormalization",
             "Concatenate", "Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum",
             "Identity", "ZeroPadding1D", "ZeroPadding2D", "Cropping1D", "Cropping2D",
             "MaxPooling1D", "MaxPooling2D", "AveragePooling1D", "AveragePooling2D",
             "GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalMaxPooling1D",
             "GlobalMaxPooling2D", "UpSampling2D", "Sequential")
    return tuple(getattr(keras.layers, name, None) or getattr(keras, name)
                 for name in names if hasattr(keras.layers, name) or hasattr(keras, name))


# Layers whose output for a sample depends on that sample alone, in training mode too (no batch
# statistics, no random draws); kerasrl's own layers say so with `per_sample = True`.
PER_SAMPLE_LAYERS = _per_sample_layers() + KERAS_CONVOLUTIONS


def per_sample(model) -> bool:
    """Whether `model` maps each sample of a batch on its own, so that applying it to the batch
    in pieces gives the same outputs: a functional or Sequential model (no user-written `call`)
    of layers of exactly the classes in PER_SAMPLE_LAYERS (a subclass may draw noise, as noisy
    nets' Dense layers do) or marked `per_sample`."""
    def known(layer) -> bool:
        cls = type(layer)
        if cls.__name__ == "Functional" and cls.__module__.startswith("keras."):
            return True
        return cls in PER_SAMPLE_LAYERS or getattr(cls, "per_sample", False) is True

    return known(model) and all(known(layer) for layer in walk_layers(model))


def public_walk(root, *, include_self: bool = False) -> list:
    """`walk_layers` through public attributes only."""
    found = [root] if include_self else []
    seen = {id(root)}

    def visit(layer) -> None:
        for child in _children(layer):
            if id(child) not in seen:
                seen.add(id(child))
                found.append(child)
                visit(child)

    visit(root)
    return found


def _children(layer) -> list:
    if isinstance(layer, keras.Model):
        return list(layer.layers)  # what the model tracks (not a Sequential's inner Functional)
    children = []
    pending = list(vars(layer).values())
    while pending:
        value = pending.pop(0)
        if isinstance(value, keras.layers.Layer):
            children.append(value)
        elif isinstance(value, (list, tuple)):
            pending[:0] = list(value)
        elif isinstance(value, dict):
            pending[:0] = list(value.values())
    return [child for child in children if child is not layer]


# KERASRL_FAST_PATHS=0 takes the public paths only (see kerasrl.backend).
_PRIVATE_WALK = os.environ.get("KERASRL_FAST_PATHS", "1") != "0"
