"""Default Keras models: MLPs, the Nature CNN, dueling heads, encoders of Dict and Tuple
observations, continuous-control actors and critics, the recurrent actor-critic, and kerasrl's own
layers (registered with Keras, so that saved models holding them load in safe mode).

Any Keras model (Sequential, functional or subclassed) that maps a batch of observations to
(batch, n_outputs) can be a Q-network or a policy instead. Every model, default or a user's, is
built, checked and owned in one place: kerasrl.models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import gymnasium as gym
import keras
import numpy as np
from keras import layers

from kerasrl import registry
from kerasrl.registry import MODEL_BUILDERS  # noqa: F401  (name -> builder, for presets and the CLI)
from kerasrl.spaces import FlatObservations, is_structured


def linear(units: int, fan_in: int, activation=None, name=None) -> layers.Dense:
    """A Dense layer initialised as PyTorch's `nn.Linear`: weights and biases uniform in
    +-1/sqrt(fan_in).

    The RL-Zoo settings were tuned on networks initialised this way; with Keras's default (Glorot
    weights, zero biases) DQN's zoo CartPole run reached 475 on 4 of 6 seeds, with this init on 6
    of 6 (BENCHMARKS.md).
    """
    bound = 1.0 / float(np.sqrt(fan_in))
    return layers.Dense(
        int(units), activation=activation, name=name,
        kernel_initializer=keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform"),
        bias_initializer=keras.initializers.RandomUniform(-bound, bound),
    )


def mlp(input_shape, n_outputs, hidden_sizes: Sequence[int] = (64, 64), activation="relu",
        name="mlp"):
    """A multilayer perceptron: Flatten -> Dense(h, activation) per hidden size -> Dense(n_outputs)."""
    inputs = keras.Input(shape=tuple(input_shape), name="observation")
    x = _hidden_layers(inputs, input_shape, hidden_sizes, activation)
    outputs = linear(n_outputs, x.shape[-1], name="output")(x)
    return keras.Model(inputs, outputs, name=name)


def _hidden_layers(inputs, input_shape, hidden_sizes, activation, normalization=None):
    """Dense layers of `hidden_sizes`, each after a `normalization(name)` layer when one is given."""
    x = layers.Flatten()(inputs) if len(input_shape) > 1 else inputs
    for i, size in enumerate(hidden_sizes):
        x = x if normalization is None else normalization(f"normalization_{i}")(x)
        x = linear(size, x.shape[-1], activation=activation, name=f"hidden_{i}")(x)
    return x


def nature_cnn(input_shape, n_outputs, name="nature_cnn", scale=None):
    """The DQN convolutional torso of Mnih et al. (2015) with a linear head, channels last.

    `scale` multiplies the input first (1/255 for uint8 images); the scaling is part of the model,
    so that saved and exported policies see raw observations.
    """
    inputs = keras.Input(shape=tuple(input_shape), name="observation")
    x = layers.Rescaling(scale)(inputs) if scale is not None else inputs
    outputs = layers.Dense(n_outputs, name="output")(nature_features(x))
    return keras.Model(inputs, outputs, name=name)


# The smallest frame side the Nature CNN's strides take (8x8 stride 4, 4x4 stride 2, 3x3 stride 1).
NATURE_MIN_SIDE = 36


def nature_features(x, kernel_initializer="glorot_uniform"):
    """The Nature CNN's torso on images x (B, H, W, C), already scaled: conv 32 8x8 stride 4, 64
    4x4 stride 2, 64 3x3 stride 1, Dense(512), ReLU throughout -> (B, 512). Small boards (sides
    under 36, e.g. Snake) cannot take the Atari strides: 3x3 stride-1 convolutions (32, 64) and
    Dense(256) instead."""
    x, units = nature_convolutions(x, kernel_initializer)
    return layers.Dense(units, activation="relu", kernel_initializer=kernel_initializer)(x)


def nature_convolutions(x, kernel_initializer="glorot_uniform"):
    """`nature_features` without its Dense layer: (flat convolution features, that layer's units)."""
    init = dict(kernel_initializer=kernel_initializer)
    if min(x.shape[1:3]) >= NATURE_MIN_SIDE:
        x = layers.Conv2D(32, 8, strides=4, activation="relu", **init)(x)
        x = layers.Conv2D(64, 4, strides=2, activation="relu", **init)(x)
        x = layers.Conv2D(64, 3, strides=1, activation="relu", **init)(x)
        return layers.Flatten()(x), 512
    x = layers.Conv2D(32, 3, padding="same", activation="relu", **init)(x)
    x = layers.Conv2D(64, 3, padding="same", activation="relu", **init)(x)
    return layers.Flatten()(x), 256


def image_input_scale(observation_space: gym.Space):
    """Inputs (B, H, W, C) of an image space as the CNN reads them: uint8 scaled by 1/255 inside
    the model, so that saved and exported policies take raw frames."""
    def scale(inputs):
        if observation_space.dtype == np.uint8:
            return layers.Rescaling(1.0 / 255.0, name="scale")(inputs)
        return inputs
    return scale


def nature_cnn_torso(observation_space: gym.Space, name="nature_cnn_torso"):
    """A model from images (uint8 scaled inside) to the Nature CNN's 512 features (e.g. the torso
    of a dueling Q-network)."""
    inputs = keras.Input(shape=tuple(observation_space.shape), name="observation")
    features = nature_features(image_input_scale(observation_space)(inputs))
    return keras.Model(inputs, features, name=name)


@keras.saving.register_keras_serializable(package="kerasrl")
class DuelingCombine(layers.Layer):
    """Q = V + A - mean(A) (Wang et al., 2016): value (B, 1) and advantages (B, A) to Q (B, A).

    A registered layer, not a Lambda, so that models holding it load with safe_mode=True.
    """

    per_sample = True  # each sample's output is its own (backend.layers.per_sample)

    def call(self, value, advantages):
        return value + advantages - keras.ops.mean(advantages, axis=-1, keepdims=True)


def dueling(torso: keras.Model, input_shape, n_actions: int, name="dueling_q_network"):
    """A dueling Q-network on `torso`, a model from observations to features (B, F).

    The torso's features feed a value stream Dense(1) and an advantage stream Dense(n_actions).
    """
    inputs = keras.Input(shape=tuple(input_shape), name="observation")
    features = torso(inputs)
    if len(features.shape) != 2:
        features = layers.Flatten()(features)
    value = linear(1, features.shape[-1], name="value")(features)
    advantages = linear(n_actions, features.shape[-1], name="advantages")(features)
    return keras.Model(inputs, DuelingCombine(name="q_values")(value, advantages), name=name)


def mlp_torso(input_shape, hidden_sizes=(64, 64), activation="relu", name="torso",
              observation_space: gym.Space | None = None):
    """An MLP without an output layer: observations to the last hidden layer's features (on the
    leaves' encoders when `observation_space` is a Dict or Tuple one)."""
    inputs = keras.Input(shape=tuple(input_shape), name="observation")
    x = inputs
    if isinstance(observation_space, FlatObservations):
        x = encode_leaves(inputs, observation_space)
        input_shape = tuple(x.shape[1:])
    return keras.Model(inputs, _hidden_layers(x, input_shape, hidden_sizes, activation),
                       name=name)


def is_image_space(space: gym.Space) -> bool:
    """An observation space that a CNN should read: (H, W, C) with C <= 4, both sides >= 7."""
    return (
        isinstance(space, gym.spaces.Box)
        and len(space.shape) == 3
        and space.shape[-1] <= 4
        and min(space.shape[:2]) >= 7
    )


def default_network(observation_space: gym.Space, n_outputs: int, hidden_sizes=(64, 64)):
    """An MLP for vector observations, a CNN for image-like ones; for a Dict or Tuple observation,
    one encoder per leaf, concatenated, then the MLP (see `encode_leaves`)."""
    if isinstance(observation_space, FlatObservations):
        inputs = keras.Input(shape=tuple(observation_space.shape), name="observation")
        x = encode_leaves(inputs, observation_space)
        x = _hidden_layers(x, x.shape[1:], hidden_sizes, "relu")
        outputs = linear(n_outputs, x.shape[-1], name="output")(x)
        return keras.Model(inputs, outputs, name="multi_input_mlp")
    if is_image_space(observation_space):
        scale = 1.0 / 255.0 if observation_space.dtype == np.uint8 else None
        return nature_cnn(observation_space.shape, n_outputs, scale=scale)
    return mlp(observation_space.shape, n_outputs, hidden_sizes)


# -- Dict and Tuple observations (kerasrl.spaces) --------------------------------------------------
@keras.saving.register_keras_serializable(package="kerasrl")
class SplitLeaves(keras.layers.Layer):
    """Flat observations (B, D) to {leaf name: (B, *leaf shape)}: the leaves of a Dict or Tuple
    observation, each in its own shape, for the encoders or a user's model with named inputs.

    Args:
        leaves: [[name, shape], ...] in the flat vector's order (`FlatObservations.leaves`).
    """

    per_sample = True  # each sample's output is its own (backend.layers.per_sample)

    def __init__(self, leaves, **kwargs):
        super().__init__(**kwargs)
        self.leaves = [[str(name), [int(d) for d in shape]] for name, shape in leaves]

    def call(self, inputs):
        out, start = {}, 0
        for name, shape in self.leaves:
            size = int(np.prod(shape))
            out[name] = keras.ops.reshape(inputs[:, start:start + size], (-1, *shape))
            start += size
        return out

    def compute_output_spec(self, inputs):
        return {name: keras.KerasTensor((inputs.shape[0], *shape), dtype=inputs.dtype)
                for name, shape in self.leaves}

    def get_config(self):
        # Not Layer.get_config: serializing the dtype policy imports TensorFlow (6 s) on any
        # backend, and every agent made on a Dict space checks this config.
        return {"name": self.name, "trainable": self.trainable, "leaves": self.leaves}


def split_layer(space: FlatObservations, name: str = "leaves") -> SplitLeaves:
    """The `SplitLeaves` layer of `space`."""
    return SplitLeaves([[leaf.name, leaf.shape] for leaf in space.leaves], name=name)


def _leaf_cnn(x, leaf):
    """A CNN on one image leaf (B, H, W, C) -> (B, F): `nature_cnn` without its head from 36 x 36
    up; below, `snake_small_network`'s torso (16 and 32 3x3 filters, 128 features), a quarter of
    the weights of nature_cnn's small-board fallback: a Dict's image leaf is often a small map
    beside other inputs."""
    name, shape = leaf.name, leaf.shape
    if leaf.space.dtype == np.uint8:
        x = layers.Rescaling(1.0 / 255.0, name=f"{name}_scale")(x)
    if min(shape[:2]) >= NATURE_MIN_SIDE:
        x = layers.Conv2D(32, 8, strides=4, activation="relu", name=f"{name}_conv_0")(x)
        x = layers.Conv2D(64, 4, strides=2, activation="relu", name=f"{name}_conv_1")(x)
        x = layers.Conv2D(64, 3, strides=1, activation="relu", name=f"{name}_conv_2")(x)
    else:
        x = layers.Conv2D(16, 3, padding="same", activation="relu", name=f"{name}_conv_0")(x)
        x = layers.Conv2D(32, 3, padding="same", activation="relu", name=f"{name}_conv_1")(x)
    x = layers.Flatten(name=f"{name}_flatten")(x)
    return layers.Dense(512 if min(shape[:2]) >= NATURE_MIN_SIDE else 128, activation="relu",
                        name=f"{name}_features")(x)


def encode_leaves(inputs, observation_space: FlatObservations):
    """Features (B, F) of flat Dict / Tuple observations: the leaves split apart, a CNN on each
    image leaf (H, W, C <= 4, sides >= 7), vectors and matrices flattened, uint8 leaves scaled by
    1/255 inside, all concatenated in the leaves' order (the default networks' torso)."""
    parts = split_layer(observation_space)(inputs)
    features = []
    for leaf in observation_space.leaves:
        x = parts[leaf.name]
        if is_image_space(leaf.space):
            x = _leaf_cnn(x, leaf)
        elif len(leaf.shape) > 3:
            names = ", ".join(repr(other.name) for other in observation_space.leaves)
            raise ValueError(
                f"The default networks cannot encode observation leaf {leaf.name!r} "
                f"({leaf.space}): they read vectors, matrices and images (height, width, "
                f"channels <= 4). Pass model= a Keras model that takes the leaves by name "
                f"({names}), as a dict.")
        else:
            if isinstance(leaf.space, gym.spaces.Box) and leaf.space.dtype == np.uint8:
                x = layers.Rescaling(1.0 / 255.0, name=f"{leaf.name}_scale")(x)
            if len(leaf.shape) > 1:
                x = layers.Flatten(name=f"{leaf.name}_flatten")(x)
        features.append(x)
    if len(features) == 1:
        return features[0]
    return layers.Concatenate(name="leaf_features")(features)


@keras.saving.register_keras_serializable(package="kerasrl")
class PatchConv2D(layers.Layer):
    """A stride-1 2D convolution computed as one matrix product over image patches (im2col).

    Same function, weight layout (kh, kw, in, out) and initialisers as `keras.layers.Conv2D`, but
    built from pad, slices and a matmul. Why: inside a compiled loop on XLA's CPU backend (JAX, and
    TensorFlow with XLA) the weight gradient of a real convolution falls off XLA's fast convolution
    path: measured on an AMD EPYC core, a 3x3, 16 -> 32 convolution on 64 boards of 9 x 9 takes
    60-90 ms per gradient inside `lax.scan` against 1.9 ms outside it. As patches and a product it
    takes 3.8 ms inside the loop. Meant for small boards (the patch tensor is kh*kw times the
    input); channels last.
    """

    per_sample = True  # each sample's output is its own (backend.layers.per_sample)

    def __init__(self, filters: int, kernel_size=3, padding: str = "same", activation=None,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        if padding not in ("same", "valid"):
            raise ValueError(f"PatchConv2D padding must be 'same' or 'valid', got {padding!r}.")
        self.filters = int(filters)
        size = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        self.kernel_size = tuple(int(k) for k in size)
        self.padding = padding
        self.activation = keras.activations.get(activation)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        kh, kw = self.kernel_size
        self.kernel = self.add_weight(name="kernel", shape=(kh, kw, int(input_shape[-1]), self.filters),
                                      initializer=self.kernel_initializer)
        self.bias = self.add_weight(name="bias", shape=(self.filters,),
                                    initializer=self.bias_initializer)

    def call(self, x):
        ops = keras.ops
        kh, kw = self.kernel_size
        if self.padding == "same":
            top, left = (kh - 1) // 2, (kw - 1) // 2
            x = ops.pad(x, ((0, 0), (top, kh - 1 - top), (left, kw - 1 - left), (0, 0)))
        height, width = x.shape[1] - kh + 1, x.shape[2] - kw + 1
        patches = ops.concatenate([x[:, i:i + height, j:j + width, :]
                                   for i in range(kh) for j in range(kw)], axis=-1)
        kernel = ops.reshape(self.kernel, (-1, self.filters))
        return self.activation(ops.matmul(patches, kernel) + self.bias)

    def compute_output_shape(self, input_shape):
        kh, kw = self.kernel_size
        height, width = input_shape[1], input_shape[2]
        if self.padding == "valid":
            height = None if height is None else height - kh + 1
            width = None if width is None else width - kw + 1
        return (input_shape[0], height, width, self.filters)

    def get_config(self):
        return {**super().get_config(), "filters": self.filters, "kernel_size": self.kernel_size,
                "padding": self.padding,
                "activation": keras.activations.serialize(self.activation),
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer)}


def model_builder(name: str) -> Callable:
    """A builder `(observation_space, action_space) -> keras.Model` for a name in MODEL_BUILDERS."""
    if name not in MODEL_BUILDERS:
        raise ValueError(f"Unknown model {name!r}. Known models: {', '.join(sorted(MODEL_BUILDERS))}.")
    build = registry.load(MODEL_BUILDERS[name])

    def builder(observation_space, action_space):
        return build(observation_space, int(action_space.n))

    builder.__name__ = name
    return builder


# -- continuous control: actors and critics (DDPG, TD3, SAC) -------------------------------------
def actor_network(observation_space: gym.Space, n_outputs: int, hidden_sizes=(400, 300),
                  output_activation: str | None = "tanh", name: str = "actor",
                  normalization: Callable | None = None) -> keras.Model:
    """An MLP actor: observations (B, *obs_shape) -> (B, n_outputs), ReLU hidden layers, weights
    drawn as `linear`'s. DDPG and TD3 use a tanh output (actions in [-1, 1], scaled to the bounds
    by the policy); SAC a linear one of 2 * action_dim (Gaussian means, then log stds).
    `normalization`: a function `name -> keras layer` put before every Dense layer (CrossQ's
    batch renormalization, as SB3-contrib's `pre_linear_modules`)."""
    shape = tuple(observation_space.shape)
    inputs = keras.Input(shape=shape, name="observation")
    x = inputs
    if isinstance(observation_space, FlatObservations):
        x = encode_leaves(inputs, observation_space)
        shape = tuple(x.shape[1:])
    x = _hidden_layers(x, shape, hidden_sizes, "relu", normalization)
    x = x if normalization is None else normalization(f"normalization_{len(hidden_sizes)}")(x)
    outputs = linear(n_outputs, x.shape[-1], activation=output_activation, name="output")(x)
    return keras.Model(inputs, outputs, name=name)


def critic_network(observation_space: gym.Space, action_dim: int, hidden_sizes=(400, 300),
                   name: str = "critic", n_outputs: int = 1,
                   normalization: Callable | None = None) -> keras.Model:
    """An MLP Q-function: [observations (B, *obs_shape), actions (B, action_dim)] -> (B, 1) (TQC's
    quantiles: (B, n_outputs)); the two are concatenated at the input, as SB3's ContinuousCritic,
    weights drawn as `linear`'s; `normalization` as `actor_network`'s."""
    shape = tuple(observation_space.shape)
    observations = keras.Input(shape=shape, name="observation")
    actions = keras.Input(shape=(int(action_dim),), name="action")
    flat = layers.Flatten()(observations) if len(shape) > 1 else observations
    if isinstance(observation_space, FlatObservations):
        flat = encode_leaves(observations, observation_space)
    x = layers.Concatenate(name="observation_action")([flat, actions])
    x = _hidden_layers(x, x.shape[1:], hidden_sizes, "relu", normalization)
    x = x if normalization is None else normalization(f"normalization_{len(hidden_sizes)}")(x)
    outputs = linear(n_outputs, x.shape[-1], name="q_value")(x)
    return keras.Model([observations, actions], outputs, name=name)


# -- recurrent actor-critics (kerasrl.RecurrentPPO) ----------------------------------------------


def recurrent_actor_critic(observation_space: gym.Space, n_outputs: int, units: int = 256,
                           cell: str = "lstm", hidden_sizes: Sequence[int] = (64, 64),
                           activation: str = "tanh", ortho_init: bool = True,
                           shared: bool = False, cell_init: str = "keras") -> keras.Model:
    """SB3-contrib's MlpLstmPolicy as one Keras model that takes one step:
    `[observation (B, *obs_shape), *states (B, units)] -> [policy (B, n_outputs), value (B, 1),
    *new states (B, units)]`.

    The observation goes through a recurrent cell ("lstm": states h and c; "gru": h), then an MLP
    per head (`hidden_sizes`) and a linear head (orthogonal init: gain sqrt 2 hidden, 0.01 policy,
    1 value, as `kerasrl.agents.ppo.actor_critic_mlp`). `shared=False` (SB3-contrib's default,
    enable_critic_lstm): the value has its own cell, so the states are the policy cell's then the
    value cell's; `shared=True`: one cell feeds both heads.

    `cell_init` is how the cells start (SB3's `ortho_init` never touches them): "keras" (Keras's
    defaults: Glorot input kernel, orthogonal recurrent kernel, zero bias with the LSTM's forget
    gate at 1) or "torch" (PyTorch's nn.LSTM / nn.GRU defaults, so SB3-contrib's: every weight and
    bias uniform in +-1/sqrt(units), forget gate not set apart; one LSTM bias where PyTorch adds
    two).
    """
    if cell not in ("lstm", "gru"):
        raise ValueError(f"cell must be 'lstm' or 'gru', got {cell!r}.")
    if cell_init not in ("keras", "torch"):
        raise ValueError(f"cell_init must be 'keras' or 'torch', got {cell_init!r}.")
    if isinstance(observation_space, FlatObservations) and is_structured(observation_space.structure):
        raise ValueError("recurrent_actor_critic takes Box and Discrete observations; flatten a "
                         "Dict or Tuple observation first (gymnasium.wrappers.FlattenObservation).")

    def init(gain):
        return keras.initializers.Orthogonal(gain) if ortho_init else "glorot_uniform"

    observation = keras.Input(shape=tuple(observation_space.shape), name="observation")
    features = (layers.Flatten()(observation) if len(observation_space.shape) > 1
                else observation)
    n_states = 2 if cell == "lstm" else 1
    heads = ("shared",) if shared else ("policy", "value")
    states = [keras.Input(shape=(units,), name=f"{head}_{kind}") for head in heads
              for kind in ("h", "c")[:n_states]]
    outputs, new_states = {}, []
    cell_options = {}
    if cell_init == "torch":
        bound = 1.0 / np.sqrt(units)
        cell_options = {f"{part}_initializer": keras.initializers.RandomUniform(-bound, bound)
                        for part in ("kernel", "recurrent", "bias")}
        if cell == "lstm":
            cell_options["unit_forget_bias"] = False
    for i, head in enumerate(heads):
        make_cell = layers.LSTMCell if cell == "lstm" else layers.GRUCell
        out, new = make_cell(units, name=f"{head}_{cell}", **cell_options)(
            features, states[i * n_states:(i + 1) * n_states])
        new_states += list(new) if isinstance(new, (list, tuple)) else [new]
        outputs[head] = out
    heads_in = {"policy": outputs.get("policy", outputs.get("shared")),
                "value": outputs.get("value", outputs.get("shared"))}
    results = {}
    for head, gain in (("policy", 0.01), ("value", 1.0)):
        x = heads_in[head]
        for j, size in enumerate(hidden_sizes):
            x = layers.Dense(size, activation=activation, kernel_initializer=init(np.sqrt(2)),
                             name=f"{head}_hidden_{j}")(x)
        results[head] = layers.Dense(n_outputs if head == "policy" else 1,
                                     kernel_initializer=init(gain), name=head)(x)
    return keras.Model([observation, *states], [results["policy"], results["value"], *new_states],
                       name="recurrent_actor_critic")
