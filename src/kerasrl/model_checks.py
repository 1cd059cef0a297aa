"""What a user's model is told when its shape or its last layer cannot serve its role: the checks
`kerasrl.models.build_model` and `build_critic` run on models a user passes (kerasrl's own default
networks pass them by construction)."""

from __future__ import annotations

import warnings

import gymnasium as gym
import keras

from kerasrl.training_warnings import TrainingWarning, user_stacklevel


BOUNDED_OUTPUTS = {"softmax": "lie in [0, 1] and sum to 1", "sigmoid": "lie in [0, 1]",
                   "tanh": "lie in [-1, 1]", "relu": "are never negative"}
"""Last-layer activations that bound a model's outputs, and how."""


def _output_activation(model, output: int = 0) -> str | None:
    """The name of the activation that ends output `output` of a functional or Sequential model
    (None where there is none, or for a subclassed model, whose last layer is not known)."""
    # keras.Model(inputs, outputs) makes a "Functional"; a subclass of either is left alone.
    if type(model) is keras.Sequential and model.layers:
        last = model.layers[-1]
    elif type(model).__name__ == "Functional":
        try:  # the layer that made that output (the keras.io actor-critic: [softmax policy, value])
            last = model.outputs[output]._keras_history[0]
        except (AttributeError, IndexError, TypeError):
            return None
    else:
        return None
    if isinstance(last, keras.layers.Softmax):
        return "softmax"
    activation = getattr(last, "activation", None)
    name = getattr(activation, "__name__", None) if callable(activation) else activation
    return name if name in BOUNDED_OUTPUTS else None


def warn_bounded_output(model, role: str, output: int = 0) -> None:
    """Warn where a user's model ends in an activation that its role cannot have: values (a
    Q-network's, a value model's, a critic's) are returns, of any size and sign; logits go through
    kerasrl's own softmax. Other roles (actors, whose tanh bounds actions; NAF's L model) are not
    checked. `output`: which output of a model with several (a shared actor-critic's)."""
    values = role.startswith(("Q-network", "critic")) or "value" in role
    logits = "logits" in role
    activation = _output_activation(model, output) if values or logits else None
    if activation is None or (logits and activation not in ("softmax", "sigmoid")):
        return
    if logits:
        why = (f"kerasrl reads its outputs as logits and applies the softmax itself, so the policy "
               f"would be a softmax of {activation} outputs, flattened toward uniform")
    else:
        why = (f"its outputs {BOUNDED_OUTPUTS[activation]}, but they stand for returns, "
               f"which can reach max|reward| / (1 - gamma) in size, of either sign")
    warnings.warn(f"The {role} ends in {activation}: {why}. Make its last layer linear (no "
                  f"activation), as the default networks' is.", TrainingWarning,
                  stacklevel=user_stacklevel())


def window_hint(model, observation_space: gym.Space) -> str:
    """For keras-rl's habit, a model whose input is (window_length,) + obs_shape: what to drop."""
    try:
        wanted = tuple(model.inputs[0].shape[1:])
    except (AttributeError, IndexError, TypeError, ValueError):  # a subclassed model: no inputs
        return ""
    obs_shape = tuple(observation_space.shape or ())
    if len(wanted) == len(obs_shape) + 1 and wanted[1:] == obs_shape:
        return (f"\nThe model takes {wanted}: keras-rl's (window_length,) + observation shape. "
                f"kerasrl feeds observations as the env gives them, {obs_shape}: make the model's "
                f"input keras.Input({obs_shape}), and stack frames with an env wrapper "
                f"(gymnasium.wrappers.FrameStackObservation) if you need a window "
                f"(docs/guides/from-keras-rl.md).")
    return ""
