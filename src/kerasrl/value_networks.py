"""The value agents' networks with streams after a torso: noisy networks (Fortunato et al., 2018)
and dueling streams for the distributional heads (Rainbow's network, Hessel et al., 2018).

DQN's plain default network (an MLP, the Nature CNN) and its dueling network with linear streams
stay where they are (kerasrl.networks, models.dueling_q_network); `value_model` sends a config
here when it asks for more:

    torso:   the Nature CNN's convolutions for images (its 512-unit layer moves into the
             streams), else an MLP of hidden_sizes[:-1]; or the user's model
    streams: Dense(width, relu) -> Dense(outputs), width 512 (images) or hidden_sizes[-1],
             NoisyDense layers with `noisy_nets`
    dueling: value stream (1 or N outputs) + advantage stream (A or A * N), combined as
             V + A - mean over actions of A (per atom for a distribution), as Rainbow
    else:    one stream of A (or A * N) outputs

With N outputs per action (C51's atoms, QR-DQN's quantiles) the network outputs (B, A, N).
"""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np
from keras import layers, ops

from kerasrl.layers import NoisyDense
from kerasrl.networks import (DuelingCombine, image_input_scale, is_image_space, linear, mlp_torso,
                              nature_convolutions)


@keras.saving.register_keras_serializable(package="kerasrl")
class AtomDuelingCombine(layers.Layer):
    """Rainbow's dueling for a distribution: value (B, 1, N) and advantages (B, A, N) to logits
    V + A - mean over actions of A (B, A, N), atom by atom."""

    per_sample = True  # each sample's output is its own (backend.layers.per_sample)

    def call(self, value, advantages):
        return value + advantages - ops.mean(advantages, axis=1, keepdims=True)


def value_model(model, observation_space: gym.Space, action_space: gym.Space, config,
                outputs_per_action: int | None = None):
    """The Q-network a value agent's `config` asks for on `model` (the user's network, a torso
    builder, or None): with `noisy_nets`, or `dueling` with N `outputs_per_action`, `model` is the
    torso of `value_network`'s streams; with `dueling` alone DQN's dueling network
    (models.dueling_q_network); else, or for a network a checkpoint restored, `model` as given
    (None: the head's default network)."""
    from kerasrl.models import dueling_q_network, is_restored

    if model is not None and is_restored(model):  # a checkpoint's whole network
        return model
    noisy = getattr(config, "noisy_nets", False)
    if noisy or (config.dueling and outputs_per_action is not None):
        return value_network(model, observation_space, action_space, outputs_per_action,
                             config.hidden_sizes, dueling=config.dueling, noisy=noisy,
                             noisy_sigma=config.noisy_sigma)
    if config.dueling:
        return dueling_q_network(model, observation_space, action_space, config.hidden_sizes)
    return model


def value_network(torso, observation_space: gym.Space, action_space: gym.Space,
                  outputs_per_action: int | None, hidden_sizes=(64, 64), *, dueling: bool,
                  noisy: bool, noisy_sigma: float = 0.5) -> keras.Model:
    """Streams (see the module docstring) on `torso` (a model or builder; None: the default),
    outputs (B, A), or (B, A, `outputs_per_action`)."""
    from kerasrl.models import built_in

    n_actions, default = int(action_space.n), torso is None
    inputs, features, width = value_torso(torso, observation_space, action_space, hidden_sizes)

    def dense(units, fan_in, activation, name):
        if noisy:
            return NoisyDense(units, activation=activation, sigma_0=noisy_sigma, name=name)
        return linear(units, fan_in, activation=activation, name=name)

    def stream(name, n_outputs):
        hidden = dense(width, features.shape[-1], "relu", f"{name}_hidden")(features)
        flat = dense(n_outputs, width, None, name)(hidden)
        if outputs_per_action is None:
            return flat
        return layers.Reshape((n_outputs // outputs_per_action, outputs_per_action),
                              name=f"{name}_per_action")(flat)

    per_action = outputs_per_action or 1
    if not dueling:
        outputs = stream("q_values", n_actions * per_action)
    else:
        value, advantages = stream("value", per_action), stream("advantages", n_actions * per_action)
        combine = DuelingCombine if outputs_per_action is None else AtomDuelingCombine
        outputs = combine(name="dueling")(value, advantages)
    model = keras.Model(inputs, outputs, name="noisy_q_network" if noisy else "dueling_q_network")
    return built_in(model) if default else model


def value_torso(torso, observation_space: gym.Space, action_space: gym.Space, hidden_sizes):
    """`(observation input, features (B, d), the width of the layers after it)` of the torso
    the module docstring names: `torso` (a model or builder) on the input, or the default."""
    from kerasrl.models import resolve_torso

    inputs = keras.Input(shape=tuple(observation_space.shape), name="observation")
    hidden_sizes = tuple(hidden_sizes)
    if torso is None and is_image_space(observation_space):
        features, width = nature_convolutions(image_input_scale(observation_space)(inputs))
        return inputs, features, width
    if not hidden_sizes:
        raise ValueError("hidden_sizes=() leaves the value streams no hidden layer: give at "
                         "least one size (its last is the streams' width).")
    if torso is None:
        torso = mlp_torso(tuple(observation_space.shape), hidden_sizes[:-1],
                          observation_space=observation_space)
    else:
        torso = resolve_torso(torso, observation_space, action_space)
    features = torso(inputs)
    if len(features.shape) != 2:
        features = layers.Flatten()(features)
    return inputs, features, hidden_sizes[-1]


@keras.saving.register_keras_serializable(package="kerasrl")
class ImplicitQuantileNetwork(keras.Model):
    """IQN's network (Dabney et al., 2018, "Implicit Quantile Networks"): the return's quantile
    function Z_tau(s, a) at any fractions tau in [0, 1].

        psi(s)  = the torso's features (B, d)
        phi(t)  = ReLU(Dense_d(cos(pi i t), i = 1..n_cosines))          (B, N, d)
        Z(s, t) = Dense_A(ReLU(Dense_width(psi(s) * phi(t))))          -> (B, A, N)

    Called on `(observations, fractions (B, N))` it gives the quantiles at those fractions (what
    the learner trains and acts with); on observations alone, at the `acting_fractions` midpoints
    (i + 1/2) / K, the same for every observation: the deterministic network that saved policies,
    exports and evaluation use (its mean over them is a quadrature of Q).
    """

    def __init__(self, torso: keras.Model, n_actions: int, width: int, n_cosines: int = 64,
                 acting_fractions: int = 32, **kwargs):
        super().__init__(**kwargs)
        self.torso = torso
        self.n_actions, self.width = int(n_actions), int(width)
        self.n_cosines, self.acting_fractions = int(n_cosines), int(acting_fractions)
        features = int(torso.outputs[0].shape[-1])
        self.fraction_embedding = linear(features, self.n_cosines, "relu", "fraction_embedding")
        self.hidden = linear(self.width, features, "relu", "hidden")
        self.quantile_values = linear(self.n_actions, self.width, name="quantile_values")

    def call(self, inputs):
        if isinstance(inputs, (tuple, list)):
            observations, fractions = inputs
        else:  # (1, K) midpoints, broadcast over the batch below
            observations = inputs
            fractions = ops.convert_to_tensor(
                (np.arange(self.acting_fractions, dtype=np.float32)[None, :] + 0.5)
                / self.acting_fractions)
        features = self.torso(observations)  # (B, d)
        # Constants made with numpy: an export traces this call with a symbolic batch.
        frequencies = ops.convert_to_tensor(
            np.pi * np.arange(1, self.n_cosines + 1, dtype=np.float32))
        embedded = self.fraction_embedding(ops.cos(ops.expand_dims(fractions, -1) * frequencies))
        mixed = ops.expand_dims(features, 1) * embedded  # (B, N, d)
        return ops.transpose(self.quantile_values(self.hidden(mixed)), (0, 2, 1))

    def get_config(self) -> dict:
        return {**super().get_config(), "torso": keras.saving.serialize_keras_object(self.torso),
                "n_actions": self.n_actions, "width": self.width, "n_cosines": self.n_cosines,
                "acting_fractions": self.acting_fractions}

    @classmethod
    def from_config(cls, config: dict):
        config = dict(config)
        return cls(torso=keras.saving.deserialize_keras_object(config.pop("torso")), **config)


def implicit_quantile_network(torso, observation_space: gym.Space, action_space: gym.Space,
                              hidden_sizes=(64, 64), n_cosines: int = 64,
                              acting_fractions: int = 32) -> keras.Model:
    """IQN's network on `torso` (a model or builder; None: the default torso of the module
    docstring, with its width: 512 after the Nature CNN's convolutions as the paper, else
    hidden_sizes[-1])."""
    from kerasrl.models import built_in

    inputs, features, width = value_torso(torso, observation_space, action_space, hidden_sizes)
    model = ImplicitQuantileNetwork(keras.Model(inputs, features, name="torso"),
                                    int(action_space.n), width, n_cosines, acting_fractions,
                                    name="implicit_quantile_network")
    return built_in(model) if torso is None else model
