"""Initial weights drawn from the seed with numpy (kerasrl.initializers).

Identity across backends is shown by tests/test_same_seed.py (one process per backend); here, on
one backend: each standard initializer's numpy draw has the distribution of Keras's own draw, what
cannot be reproduced is kept with a warning naming the layer, and `initial_weights='keep'` keeps a
user's weights.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import keras
import numpy as np
import pytest

import kerasrl
from kerasrl.initializers import InitializationWarning, draw, seed_initial_weights
from kerasrl.models import build_model

SHAPE = (300, 200)

STANDARD = [
    keras.initializers.GlorotUniform(), keras.initializers.GlorotNormal(),
    keras.initializers.HeUniform(), keras.initializers.HeNormal(),
    keras.initializers.LecunUniform(), keras.initializers.LecunNormal(),
    keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal"),
    keras.initializers.VarianceScaling(1.0 / 3.0, "fan_in", "uniform"),
    keras.initializers.RandomUniform(-0.3, 0.1), keras.initializers.RandomNormal(0.5, 0.2),
    keras.initializers.TruncatedNormal(0.0, 0.05), keras.initializers.Orthogonal(gain=1.7),
]


@pytest.mark.parametrize("initializer", STANDARD, ids=lambda i: type(i).__name__)
def test_numpy_draw_has_the_distribution_of_the_keras_initializer(initializer):
    ours = draw(initializer, SHAPE, np.random.default_rng(0))
    # Keras's own draw, seeded so that the comparison is the same on every run of this backend.
    seeded = type(initializer).from_config({**initializer.get_config(), "seed": 7})
    theirs = keras.ops.convert_to_numpy(seeded(SHAPE, dtype="float32"))
    assert ours.shape == SHAPE
    # 60,000 draws each: mean, spread and quantiles agree within about 5 standard errors of the
    # difference of two samples (for a normal: mean 0.006, std 0.004, median 0.007, 10% and 90%
    # quantiles 0.010, 1% and 99% quantiles 0.022, in units of the spread), so that another seed
    # or machine does not fail by chance; bounded distributions (uniform, truncated normal) also
    # share their bounds.
    spread = theirs.std()
    assert abs(ours.mean() - theirs.mean()) < 0.03 * spread + 1e-6
    assert abs(ours.std() - spread) < 0.02 * spread
    quantiles = [0.01, 0.1, 0.5, 0.9, 0.99]
    tolerance = np.array([0.12, 0.05, 0.05, 0.05, 0.12]) * spread
    difference = np.abs(np.quantile(ours, quantiles) - np.quantile(theirs, quantiles))
    assert np.all(difference < tolerance), dict(zip(quantiles, difference / spread))
    if "Uniform" in type(initializer).__name__ or "Truncated" in type(initializer).__name__ or (
            getattr(initializer, "distribution", "") in ("uniform", "truncated_normal")):
        assert abs(ours.min() - theirs.min()) < 0.02 * spread
        assert abs(ours.max() - theirs.max()) < 0.02 * spread
    if isinstance(initializer, keras.initializers.Orthogonal):
        np.testing.assert_allclose(ours.T @ ours, 1.7 ** 2 * np.eye(SHAPE[1]), atol=1e-9)


def test_conv_kernels_use_the_receptive_field_in_their_fans():
    ours = draw(keras.initializers.HeNormal(), (3, 3, 16, 32), np.random.default_rng(1))
    assert abs(ours.std() - np.sqrt(2.0 / (3 * 3 * 16))) < 0.03 * ours.std()


def mlp(initializer="glorot_uniform"):
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, kernel_initializer=initializer),
                             keras.layers.BatchNormalization(), keras.layers.Dense(2)])


def weights(model):
    return [keras.ops.convert_to_numpy(w).copy() for w in model.weights]


def test_same_seed_same_weights_other_seed_or_stream_other_weights():
    a, b, c, d = mlp(), mlp(), mlp(), mlp()
    seed_initial_weights(a, 3, "q")
    seed_initial_weights(b, 3, "q")
    seed_initial_weights(c, 4, "q")
    seed_initial_weights(d, 3, "critic")
    for x, y in zip(weights(a), weights(b)):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(weights(a)[0], weights(c)[0])
    assert not np.array_equal(weights(a)[0], weights(d)[0])
    # batch norm's gamma, beta and moving statistics keep their constants
    gamma, beta, mean, variance = weights(a)[2:6]
    assert np.all(gamma == 1) and np.all(beta == 0) and np.all(mean == 0) and np.all(variance == 1)


def test_a_custom_initializer_keeps_the_backend_draw_with_one_warning_naming_the_layer():
    def my_init(shape, dtype=None):
        return keras.random.uniform(shape, -1.0, 1.0, dtype=dtype)

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, name="custom_dense",
                                                                    kernel_initializer=my_init),
                              keras.layers.Dense(2)])
    before = weights(model)
    with pytest.warns(InitializationWarning, match="kernel of layer 'custom_dense'") as caught:
        seed_initial_weights(model, 0)
    assert len(caught) == 1
    after = weights(model)
    np.testing.assert_array_equal(after[0], before[0])  # kept
    assert not np.array_equal(after[2], before[2])  # the standard layer is drawn from the seed


def test_lstm_keeps_its_forget_gate_bias_at_one():
    model = keras.Sequential([keras.Input((5, 3)), keras.layers.LSTM(4), keras.layers.Dense(2)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", InitializationWarning)
        seed_initial_weights(model, 0)
    bias = next(keras.ops.convert_to_numpy(w) for w in model.weights if w.name == "bias"
                and w.shape == (16,))
    np.testing.assert_array_equal(bias, np.r_[np.zeros(4), np.ones(4), np.zeros(8)])


def test_agents_draw_users_models_from_the_seed_unless_told_to_keep_them():
    def build(observation_space, action_space):
        return keras.Sequential([keras.layers.Dense(16, activation="relu"),
                                 keras.layers.Dense(int(action_space.n))])

    first = kerasrl.DQN("CartPole-v1", seed=5, model=build)
    second = kerasrl.DQN("CartPole-v1", seed=5, model=build)
    for x, y in zip(weights(first.model), weights(second.model)):
        np.testing.assert_array_equal(x, y)

    pretrained = build(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    pretrained(np.zeros((1, 4), np.float32))
    mine = weights(pretrained)
    kept = kerasrl.DQN("CartPole-v1", seed=5, model=pretrained, initial_weights="keep")
    for x, y in zip(weights(kept.model), mine):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match="initial_weights must be 'seed' or 'keep'"):
        kerasrl.DQN("CartPole-v1", initial_weights="numpy")


@pytest.mark.parametrize("make", [
    pytest.param(lambda: kerasrl.DQN("CartPole-v1", seed=3, dueling=True).model, id="dqn-dueling",
                 marks=pytest.mark.slow),
    pytest.param(lambda: kerasrl.PPO("Pendulum-v1", seed=3).model, id="ppo"),
    pytest.param(lambda: kerasrl.SAC("Pendulum-v1", seed=3).model, id="sac", marks=pytest.mark.slow),
    pytest.param(lambda: build_model(
        None, gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), 6,
        default=lambda: kerasrl.networks.nature_cnn((84, 84, 4), 6, scale=1 / 255), seed=3),
        id="nature-cnn", marks=pytest.mark.slow),
    pytest.param(lambda: kerasrl.PPO("CartPole-v1", seed=3, shared_network=True).model,
                 id="ppo-shared"),
    pytest.param(lambda: kerasrl.RecurrentPPO("CartPole-v1", seed=3).model, id="recurrent-ppo"),
    pytest.param(lambda: kerasrl.DQN("CartPole-v1", seed=3, model=lambda o, a: keras.Sequential(
        [keras.Input(o.shape), keras.layers.Dense(16), keras.layers.Dense(int(a.n))])).model,
        id="users-builder"),
])
def test_default_networks_skip_the_backend_draw_and_get_the_same_weights(make, monkeypatch):
    """Keras's draw of kerasrl's own networks and of a user's builder's is skipped (it is drawn
    again from the seed): the weights are the ones a full backend draw then a numpy redraw gives,
    and none is left at zero."""
    import contextlib

    from kerasrl import initializers

    skipped = [w.copy() for w in make().get_weights()]
    monkeypatch.setattr(initializers, "backend_draws_skipped", contextlib.nullcontext)
    drawn = make().get_weights()
    assert len(skipped) == len(drawn)
    for a, b in zip(skipped, drawn):
        np.testing.assert_array_equal(a, b)
    kernels = [w for w in skipped if w.ndim >= 2]
    assert kernels and all(np.any(k != 0) for k in kernels)


@pytest.mark.parametrize("agent_class", [kerasrl.TD3, kerasrl.NAF])
def test_continuous_agents_draw_every_network_from_the_seed(agent_class):
    """The actor and each critic (NAF: mu, V and L) from the seed with numpy, each its own stream:
    the same weights on every backend."""
    from kerasrl.initializers import WeightDraws

    agent = agent_class("Pendulum-v1", seed=5)
    streams = ["actor"] + ([f"critic_{i}" for i in range(len(agent.critics))]
                           if agent_class is kerasrl.TD3 else ["value", "l"])
    firsts = []
    for model, stream in zip([agent.actor, *agent.critics], streams):
        plan = WeightDraws(model)
        assert not plan.kept
        for variable, value in zip(plan.drawn, plan.values(5, stream)):
            np.testing.assert_array_equal(np.asarray(variable), value.astype(np.float32))
        firsts.append(np.asarray(plan.drawn[0]).ravel()[:8])
    assert all(np.any(a != b) for i, a in enumerate(firsts) for b in firsts[i + 1:] if a.shape == b.shape)


def test_a_builder_with_an_initializer_not_reproduced_is_built_again_with_the_backends_draw():
    """Built with the draws skipped, the layer of a custom initializer would start at zero: the
    builder is called again, as Keras builds, and that layer keeps the backend's draw."""
    calls = []

    def build(observation_space, action_space):
        calls.append(1)
        return keras.Sequential([
            keras.Input(observation_space.shape),
            keras.layers.Dense(8, name="custom_dense", kernel_initializer=_UniformOfMyOwn()),
            keras.layers.Dense(int(action_space.n))])

    with pytest.warns(InitializationWarning, match="kernel of layer 'custom_dense'"):
        agent = kerasrl.DQN("CartPole-v1", seed=0, model=build)
    assert len(calls) == 2
    kernel = weights(agent.model)[0]
    assert np.all(np.abs(kernel) <= 1.0) and np.std(kernel) > 0.1  # the draw, not zeros


class _UniformOfMyOwn(keras.initializers.Initializer):
    """A user's initializer drawing through the module Keras's own initializers draw from (which
    the skipped draws replace), unknown to kerasrl.initializers."""

    def __call__(self, shape, dtype=None):
        from keras.src.initializers.random_initializers import random
        return random.uniform(shape, minval=-1.0, maxval=1.0, dtype=dtype)


def test_a_saved_policy_loads_without_drawing_weights_the_file_replaces(tmp_path, monkeypatch):
    """Keras builds a loaded model's layers with their initializers, then reads every weight from
    the file: the draws were thrown away, and on JAX each compiled a program per weight shape
    (`load_policy` of a two-layer MLP took 4 to 6 s; now a few hundredths)."""
    from keras.src.initializers import random_initializers

    agent = kerasrl.PPO("Pendulum-v1", seed=0)
    agent.policy.save(tmp_path / "policy")

    def refuse(*args, **kwargs):
        raise AssertionError("a backend draw while loading")

    for name in ("uniform", "normal", "truncated_normal"):
        monkeypatch.setattr(random_initializers.random, name, refuse)
    policy = kerasrl.load_policy(tmp_path / "policy")
    for x, y in zip(weights(policy.model), weights(agent.policy.model)):
        np.testing.assert_array_equal(x, y)


def shared_actor_critic(observation_space, action_space):
    inputs = keras.Input(observation_space.shape)
    hidden = keras.layers.Dense(16, activation="tanh")(inputs)
    return keras.Model(inputs, [keras.layers.Dense(int(action_space.n))(hidden),
                                keras.layers.Dense(1)(hidden)])


def recurrent_actor_critic(observation_space, action_space):
    """One step of a GRU actor-critic, as RecurrentPPO takes a user's model."""
    observation, state = keras.Input(observation_space.shape), keras.Input((8,))
    new_state, _ = keras.layers.GRUCell(8)(observation, state)
    return keras.Model([observation, state], [keras.layers.Dense(int(action_space.n))(new_state),
                                              keras.layers.Dense(1)(new_state), new_state])


@pytest.mark.parametrize("make", [
    pytest.param(lambda: kerasrl.PPO("CartPole-v1", seed=3, model=shared_actor_critic),
                 id="ppo-shared-builder"),
    pytest.param(lambda: kerasrl.RecurrentPPO("CartPole-v1", seed=3, model=recurrent_actor_critic),
                 id="recurrent-ppo-builder"),
    pytest.param(lambda: kerasrl.DQN("CartPole-v1", seed=3, model=lambda o, a: keras.Sequential(
        [keras.Input(o.shape), keras.layers.Dense(16), keras.layers.Dense(int(a.n))])),
        id="dqn-builder"),
])
def test_users_builders_with_a_seed_make_no_backend_draw(make, monkeypatch):
    """Every agent builds a user's network builder with Keras's draws skipped when a seed draws
    every weight again (on JAX each draw compiles a program per weight shape); the weights are
    those of a build with the draws made, and none is left at zero."""
    from keras.src.initializers import random_initializers

    model = make().model
    drawn = weights(model)
    kernels = [i for i, w in enumerate(model.weights) if "kernel" in w.path]

    def refuse(*args, **kwargs):
        raise AssertionError("a backend draw that the seed replaces")

    for name in ("uniform", "normal", "truncated_normal"):
        monkeypatch.setattr(random_initializers.random, name, refuse)
    skipped = weights(make().model)
    assert len(skipped) == len(drawn)
    for x, y in zip(skipped, drawn):
        np.testing.assert_array_equal(x, y)
    assert kernels and all(np.any(skipped[i] != 0) for i in kernels)
