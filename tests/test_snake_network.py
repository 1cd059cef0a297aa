"""The Snake reference network: its size, its training and inference modes, its board limit."""

import gymnasium as gym
import numpy as np
import pytest

import kerasrl
from kerasrl.envs.snake import REFERENCE_MIN_BOARD
from kerasrl.envs.snake_networks import snake_reference_network, snake_small_network
from kerasrl.networks import MODEL_BUILDERS, model_builder


def test_reference_network_has_the_reference_size():
    model = snake_reference_network((9, 9, 2))
    assert model.count_params() == 1_120_019
    kinds = [type(layer).__name__ for layer in model.layers[1:]]
    assert kinds == ["Conv2D", "BatchNormalization", "Conv2D", "BatchNormalization", "Conv2D",
                     "Flatten", "Dense", "Dropout", "Dense"]
    assert all(layer.padding == "valid" for layer in model.layers if hasattr(layer, "padding"))
    assert model.output_shape == (None, 3)


def test_reference_network_takes_a_space():
    space = gym.make("kerasrl/Snake-v0").observation_space
    assert snake_reference_network(space).count_params() == 1_120_019


@pytest.mark.parametrize("shape", [(6, 9, 2), (9, 6, 2), (5, 5, 2)])
def test_reference_network_refuses_small_boards(shape):
    with pytest.raises(ValueError, match="too small for the Snake reference network") as error:
        snake_reference_network(shape)
    assert "larger board" in str(error.value) and "another model" in str(error.value)


def test_smallest_board_is_accepted():
    m = REFERENCE_MIN_BOARD
    model = snake_reference_network((m, m, 2))
    assert model(np.zeros((2, m, m, 2), np.float32)).shape == (2, 3)


def test_small_network_takes_any_board():
    model = snake_small_network((4, 5, 2))
    assert model(np.zeros((1, 4, 5, 2), np.float32)).shape == (1, 3)


def test_model_builder_names():
    assert set(MODEL_BUILDERS) >= {"snake_reference", "snake_small", "snake_fast"}
    with pytest.raises(ValueError, match="Unknown model 'nope'"):
        model_builder("nope")


@pytest.mark.backend
def test_reference_network_modes_differ():
    """Dropout and batch norm make training mode random and batch-dependent, inference not."""
    from keras.ops import convert_to_numpy

    model = snake_reference_network((9, 9, 2))
    obs = np.random.default_rng(0).random((8, 9, 9, 2)).astype(np.float32)
    a = convert_to_numpy(model(obs, training=False))
    b = convert_to_numpy(model(obs, training=False))
    np.testing.assert_array_equal(a, b)
    c = convert_to_numpy(model(obs, training=True))
    assert not np.allclose(a, c)


@pytest.mark.slow_on_other_backends
@pytest.mark.backend
def test_dqn_acts_in_inference_mode():
    """With Dropout(0.99) a training-mode pass is almost all noise: acting must not see it."""
    import keras

    def noisy(observation_space, action_space):
        inputs = keras.Input(observation_space.shape)
        x = keras.layers.Flatten()(inputs)
        x = keras.layers.Dense(32, activation="relu")(x)
        x = keras.layers.Dropout(0.99)(x)
        return keras.Model(inputs, keras.layers.Dense(int(action_space.n))(x))

    agent = kerasrl.DQN("kerasrl/Snake-v0", model=noisy, seed=0, learning_starts=10,
                        batch_size=8, buffer_size=100, train_freq=1)
    obs = np.random.default_rng(1).random((64, 9, 9, 2)).astype(np.float32)

    def check_deterministic():
        actions = agent._act_greedy(obs)  # what the agent acts with while training
        for _ in range(3):
            np.testing.assert_array_equal(agent._act_greedy(obs), actions)
        q = agent.policy.q_values(obs)
        np.testing.assert_array_equal(agent.policy.q_values(obs), q)
        np.testing.assert_array_equal(np.argmax(q, axis=-1), actions)
        # The same weights in training mode give other Q-values: the check above can fail.
        noisy_q = np.asarray(keras.ops.convert_to_numpy(agent.model(obs, training=True)))
        assert not np.allclose(noisy_q, q)

    check_deterministic()
    agent.fit(200, progress=False)  # the loss runs in training mode (dropout active) and stays finite
    assert len(agent.history.losses) and np.isfinite(agent.history.losses).all()
    check_deterministic()
    agent.close()


@pytest.mark.backend
@pytest.mark.parametrize("padding, kernel_size", [("same", 3), ("valid", 3), ("same", (2, 3))])
def test_patch_conv_is_conv2d(padding, kernel_size):
    """PatchConv2D computes Keras's Conv2D (stride 1) with the same weights, and its gradients."""
    import keras

    from kerasrl.networks import PatchConv2D

    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 6, 7, 3)).astype(np.float32)
    conv = keras.layers.Conv2D(5, kernel_size, padding=padding, activation="relu")
    patch = PatchConv2D(5, kernel_size, padding=padding, activation="relu")
    conv.build(x.shape), patch.build(x.shape)
    patch.set_weights(conv.get_weights())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(patch(x)), keras.ops.convert_to_numpy(conv(x)),
                               rtol=1e-5, atol=1e-5)
    assert patch.compute_output_shape(x.shape) == tuple(conv.compute_output_shape(x.shape))
    grads = [_weight_gradients(layer, x) for layer in (conv, patch)]
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def _weight_gradients(layer, x):
    from kerasrl import backend

    def loss(weights, x):
        out, _ = layer.stateless_call(weights, [], x)
        return keras_ops().sum(out * out), None

    _, grads = backend.value_and_grad(loss)([v.value for v in layer.trainable_variables], x)
    return backend.to_numpy(grads)


def keras_ops():
    import keras

    return keras.ops


@pytest.mark.backend
def test_snake_fast_policy_saves_and_loads_alone(tmp_path):
    from kerasrl.envs.snake_networks import snake_fast_network

    space = gym.make("kerasrl/Snake-v0").observation_space
    policy = kerasrl.QPolicy(snake_fast_network(space), space, gym.spaces.Discrete(3))
    policy.save(tmp_path / "p")
    loaded = kerasrl.load_policy(tmp_path / "p")
    obs = np.random.default_rng(0).random((16, 9, 9, 2)).astype(np.float32)
    np.testing.assert_allclose(loaded.q_values(obs), policy.q_values(obs), atol=1e-6)
    assert type(loaded.model.get_layer("conv_0")).__name__ == "PatchConv2D"


@pytest.mark.backend
def test_egocentric_view_is_the_same_whichever_way_the_board_is_turned():
    """Head at the centre, neck below it, walls off the board; a board turned by quarter turns
    (the same situation, another heading) gives the same view."""
    import keras

    from kerasrl.envs.snake_networks import SnakeEgocentricView

    board = np.zeros((9, 9, 2), np.float32)
    board[2, 3, 0], board[2, 2, 0], board[3, 2, 0] = 2.0, 1.0, 1.0  # head (2, 3) heading right; neck (2, 2)
    board[6, 7, 1] = 1.0  # fruit
    boards = np.stack([np.rot90(board, k, axes=(0, 1)) for k in range(4)])
    views = keras.ops.convert_to_numpy(SnakeEgocentricView()(boards))
    assert views.shape == (4, 17, 17, 3)
    for view in views[1:]:
        np.testing.assert_array_equal(view, views[0])
    view = views[0]
    assert view[8, 8, 0] == 2.0 and view[9, 8, 0] == 1.0  # head at the centre, neck just below
    # Heading right turned to heading up: the square right of the head comes up; the board's
    # top edge (2 rows above the head) is on the left, 3 columns away.
    assert view[8, 8 - 3, 2] == 1.0 and view[8, 8 - 2, 2] == 0.0
    assert view[9, 9, 0] == 1.0  # the body square below the neck, (3, 2), lies right of it once turned
    assert view[..., 1].sum() == 1.0 and view[8 - 4, 8 + 4, 1] == 1.0  # fruit 4 ahead, 4 to the right
