"""The Snake Q-networks, beside the Snake env (kerasrl.envs.snake): the TensorFlow.js example's
network, a cheap one, the same built from PatchConv2D for the compiled loop, and the egocentric view.

Each builder takes the observation space (or its shape (height, width, channels)) and the number of
actions; kerasrl.registry.MODEL_BUILDERS names them for presets and the CLI
(`kerasrl.networks.model_builder("snake_egocentric")`). `SnakeEgocentricView` is registered with
Keras, so a saved model that holds it loads with safe_mode=True.
"""

from __future__ import annotations

import keras
from keras import layers

from kerasrl.envs.snake import REFERENCE_MIN_BOARD
from kerasrl.networks import PatchConv2D


def snake_reference_network(observation_space_or_shape, n_actions: int = 3,
                            name: str = "snake_reference"):
    """The Q-network of the TensorFlow.js `snake-dqn` example, layer for layer.

    Conv2D(128, 3, relu) -> BatchNormalization -> Conv2D(256, 3, relu) -> BatchNormalization ->
    Conv2D(256, 3, relu) -> Flatten -> Dense(100, relu) -> Dropout(0.25) -> Dense(n_actions);
    valid padding and Keras default initialisers, as in the example. 1,120,019 parameters on the
    9 x 9 x 2 board. Batch norm and dropout make the training and inference modes differ: kerasrl
    runs the online network in training mode only inside the loss.

    `observation_space_or_shape` is a `gymnasium.spaces.Box` or a shape (height, width, channels).
    The three valid 3x3 convolutions take 6 squares off each side, so boards smaller than
    `kerasrl.envs.snake.REFERENCE_MIN_BOARD` (7 x 7) raise a ValueError.
    """
    shape = tuple(getattr(observation_space_or_shape, "shape", observation_space_or_shape))
    if len(shape) != 3:
        raise ValueError(
            f"The Snake reference network reads boards of shape (height, width, channels), "
            f"got shape {shape}."
        )
    if min(shape[:2]) < REFERENCE_MIN_BOARD:
        raise ValueError(
            f"A {shape[0]} x {shape[1]} board is too small for the Snake reference network: its "
            f"three valid 3x3 convolutions need at least {REFERENCE_MIN_BOARD} x "
            f"{REFERENCE_MIN_BOARD}. Use a larger board (height and width >= "
            f"{REFERENCE_MIN_BOARD}) or another model (e.g. model=None for the default network, "
            f"or kerasrl.envs.snake_networks.snake_small_network)."
        )
    inputs = keras.Input(shape=shape, name="observation")
    x = layers.Conv2D(128, 3, activation="relu", name="conv_0")(inputs)
    x = layers.BatchNormalization(name="batch_norm_0")(x)
    x = layers.Conv2D(256, 3, activation="relu", name="conv_1")(x)
    x = layers.BatchNormalization(name="batch_norm_1")(x)
    x = layers.Conv2D(256, 3, activation="relu", name="conv_2")(x)
    x = layers.Flatten()(x)
    x = layers.Dense(100, activation="relu", name="hidden")(x)
    x = layers.Dropout(0.25, name="dropout")(x)
    outputs = layers.Dense(n_actions, name="output")(x)
    return keras.Model(inputs, outputs, name=name)


def snake_small_network(observation_space_or_shape, n_actions: int = 3,
                        name: str = "snake_small"):
    """A cheap Snake Q-network for fast, vectorized training (about 18x fewer multiply-adds per
    observation than the reference network on 9 x 9: 0.73 M against 13 M).

    Conv2D(16, 3, same, relu) -> Conv2D(32, 3, same, relu) -> Flatten -> Dense(128, relu) ->
    Dense(n_actions). No batch norm or dropout, so training and acting see the same function;
    "same" padding takes boards of any size.
    """
    return _two_convolutions_and_dense(observation_space_or_shape, n_actions, name, layers.Conv2D)


def _two_convolutions_and_dense(observation_space_or_shape, n_actions, name, convolution):
    """conv(16, 3, same, relu) -> conv(32, 3, same, relu) -> Flatten -> Dense(128, relu) ->
    Dense(n_actions), with `convolution` a Conv2D-like class."""
    shape = tuple(getattr(observation_space_or_shape, "shape", observation_space_or_shape))
    inputs = keras.Input(shape=shape, name="observation")
    x = convolution(16, 3, padding="same", activation="relu", name="conv_0")(inputs)
    x = convolution(32, 3, padding="same", activation="relu", name="conv_1")(x)
    x = layers.Flatten()(x)
    x = layers.Dense(128, activation="relu", name="hidden")(x)
    outputs = layers.Dense(n_actions, name="output")(x)
    return keras.Model(inputs, outputs, name=name)



def snake_fast_network(observation_space_or_shape, n_actions: int = 3, name: str = "snake_fast"):
    """`snake_small` built from PatchConv2D, for the compiled loop on the keras.ops Snake:
    PatchConv2D(16, 3, same, relu) -> PatchConv2D(32, 3, same, relu) -> Flatten ->
    Dense(128, relu) -> Dense(n_actions)."""
    return _two_convolutions_and_dense(observation_space_or_shape, n_actions, name, PatchConv2D)


@keras.saving.register_keras_serializable(package="kerasrl")
class SnakeEgocentricView(layers.Layer):
    """The Snake board as the snake sees it: centred on its head and turned so that it heads up.

    Input: Snake observations (B, H, W, 2) (channel 0: 2 at the head, 1 on the body; channel 1:
    the fruit). Output: (B, 2H-1, 2W-1, 3), body, fruit and wall (1 off the board), with the head
    at the centre and the heading (away from the neck) pointing to row 0. Actions are relative to
    the heading (straight, left, right), so in this view one situation looks the same whichever way
    the snake is going on the board, and a small dense network learns from every heading at once.
    Pure `keras.ops` (one-hot selection products, no gathers), so it runs in compiled loops.

    The neck is the body square next to the head; where more than one is (the snake curled round
    its head) the first of below, left, above, right is taken, so the view may be turned wrongly
    there. On a board without a head (the last observation after leaving the board) the view is
    centred on square (0, 0); such observations only enter as terminal states.
    """

    def call(self, boards):
        ops = keras.ops
        height, width = boards.shape[1], boards.shape[2]
        head = ops.cast(ops.argmax(ops.reshape(ops.cast(ops.equal(boards[..., 0], 2.0), "float32"),
                                               (-1, height * width)), axis=-1), "int32")
        rows = (head // width)[:, None] + ops.arange(2 * height - 1, dtype="int32")[None, :] - (height - 1)
        cols = (head % width)[:, None] + ops.arange(2 * width - 1, dtype="int32")[None, :] - (width - 1)
        pick_rows = ops.cast(ops.equal(rows[:, :, None], ops.arange(height, dtype="int32")[None, None, :]), "float32")
        pick_cols = ops.cast(ops.equal(cols[:, :, None], ops.arange(width, dtype="int32")[None, None, :]), "float32")
        view = ops.einsum("bjw,biwc->bijc", pick_cols, ops.einsum("bih,bhwc->biwc", pick_rows, boards))
        on_board = ops.sum(pick_rows, axis=-1)[:, :, None] * ops.sum(pick_cols, axis=-1)[:, None, :]
        view = ops.concatenate([view, (1.0 - on_board)[..., None]], axis=-1)
        # Quarter turns that bring the neck below the head: neck below 0, left 1, above 2, right 3.
        r, c = height - 1, width - 1
        body = view[..., 0]
        neck = ops.argmax(ops.stack([body[:, r + 1, c], body[:, r, c - 1], body[:, r - 1, c], body[:, r, c + 1]],
                                    axis=-1), axis=-1)
        turns = ops.one_hot(neck, 4)[:, :, None, None, None]
        turned, views = view, [view]
        for _ in range(3):
            turned = ops.flip(ops.transpose(turned, (0, 2, 1, 3)), axis=1)  # a quarter turn left
            views.append(turned)
        return sum(turns[:, k] * views[k] for k in range(4))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], 2 * input_shape[1] - 1, 2 * input_shape[2] - 1, 3)


def snake_egocentric_network(observation_space_or_shape, n_actions: int = 3, hidden: int = 128,
                             name: str = "snake_egocentric"):
    """SnakeEgocentricView -> Flatten -> Dense(hidden, relu) -> Dense(n_actions): on 9 x 9, 867
    inputs and about 111k multiply-adds per board (snake_small: 730k)."""
    shape = tuple(getattr(observation_space_or_shape, "shape", observation_space_or_shape))
    inputs = keras.Input(shape=shape, name="observation")
    x = layers.Flatten()(SnakeEgocentricView(name="egocentric_view")(inputs))
    x = layers.Dense(hidden, activation="relu", name="hidden")(x)
    outputs = layers.Dense(n_actions, name="output")(x)
    return keras.Model(inputs, outputs, name=name)
