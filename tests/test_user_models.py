"""Any Keras model a user writes is a Q-network or a policy, and a run with it can be saved.

Users write `def call(self, inputs)` without `training` (the snake-dqn port's DQNModel does);
Keras's `stateless_call` would hand `training=` straight to it. Every style below trains, acts,
and puts nested Dropout / BatchNormalization in the right mode.
"""

import warnings

import kerasrl  # first: it settles the Keras backend (KERAS_BACKEND, else the fastest installed)

import keras
import numpy as np
import pytest
from keras import layers

from kerasrl.checkpoint import CheckpointError
from kerasrl.models import stateless_apply

pytestmark = pytest.mark.backend

N_ACTIONS = 2  # CartPole


class NoTraining(keras.Model):
    """The most common way to write a model: call(inputs), no training argument."""

    def __init__(self, n_outputs=N_ACTIONS, **kwargs):
        super().__init__(**kwargs)
        self.hidden = layers.Dense(32, activation="relu")
        self.out = layers.Dense(n_outputs)

    def call(self, inputs):
        return self.out(self.hidden(inputs))


class TrainingKeyword(NoTraining):
    def call(self, inputs, training=None):
        return self.out(self.hidden(inputs))


class TrainingPositional(NoTraining):
    def call(self, inputs, training):  # no default: Keras passes it by keyword
        return self.out(self.hidden(inputs))


class MaskArgument(NoTraining):
    def call(self, inputs, mask=None):
        return self.out(self.hidden(inputs))


class VarKeyword(NoTraining):
    def call(self, inputs, **kwargs):
        return self.out(self.hidden(inputs))


class DropoutBatchNorm(keras.Model):
    """Dropout and batch norm inside a call() that never sees `training`."""

    def __init__(self, n_outputs=N_ACTIONS, **kwargs):
        super().__init__(**kwargs)
        self.hidden = layers.Dense(64, activation="relu")
        self.norm = layers.BatchNormalization()
        self.drop = layers.Dropout(0.5)
        self.out = layers.Dense(n_outputs)

    def call(self, inputs):
        return self.out(self.drop(self.norm(self.hidden(inputs))))


class Nested(keras.Model):
    """A subclassed model holding a Sequential with dropout."""

    def __init__(self, n_outputs=N_ACTIONS, **kwargs):
        super().__init__(**kwargs)
        self.torso = keras.Sequential([layers.Dense(32, activation="relu"), layers.Dropout(0.3)])
        self.out = layers.Dense(n_outputs)

    def call(self, inputs):
        return self.out(self.torso(inputs))


def sequential():
    return keras.Sequential([keras.Input((4,)), layers.Dense(32, activation="relu"),
                             layers.Dense(N_ACTIONS)])


def functional():
    inputs = keras.Input((4,))
    x = layers.Dense(32, activation="relu")(inputs)
    x = layers.Dropout(0.2)(x)
    return keras.Model(inputs, layers.Dense(N_ACTIONS)(x))


def functional_nested():
    inputs = keras.Input((4,))
    return keras.Model(inputs, layers.Dense(N_ACTIONS)(sequential_torso()(inputs)))


def sequential_torso():
    return keras.Sequential([layers.Dense(32, activation="relu"), layers.BatchNormalization()])


def built(model):
    model(np.zeros((1, 4), np.float32))
    return model


MODELS = {
    "call(x)": NoTraining,
    "call(x, training=None)": TrainingKeyword,
    "call(x, training)": TrainingPositional,
    "call(x, mask=None)": MaskArgument,
    "call(x, **kwargs)": VarKeyword,
    "dropout+batchnorm, no training arg": DropoutBatchNorm,
    "nested sequential": Nested,
    "sequential": sequential,
    "functional with dropout": functional,
    "functional, nested": functional_nested,
    "already built": lambda: built(NoTraining()),
}


# Which arguments call() takes is Keras's business, the same on every backend: every style runs on
# the default backend, two (the plainest, and nested dropout + batch norm) on every backend.
ON_EVERY_BACKEND = ("call(x)", "dropout+batchnorm, no training arg")


@pytest.mark.parametrize(
    "name", list(MODELS) if keras.backend.backend() == "jax" else list(ON_EVERY_BACKEND))
def test_dqn_trains_and_acts_with_every_model_style(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unregistered classes: weights-only note (tested below)
        agent = kerasrl.DQN("CartPole-v1", model=MODELS[name](), seed=0, learning_starts=64,
                            batch_size=32, train_freq=4, target_update_interval=100)
    agent.fit(240, progress=False)
    assert agent.history.updates, "no gradient step ran"
    assert np.isfinite([u["loss"] for u in agent.history.updates]).all()
    obs = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    actions = agent.predict(obs)
    assert actions.shape == (8,) and set(actions.tolist()) <= {0, 1}
    agent.close()


@pytest.mark.parametrize("model_class", [DropoutBatchNorm, Nested])
def test_training_mode_reaches_nested_layers_of_a_call_without_training(model_class):
    model = model_class()
    model(np.zeros((2, 4), np.float32))
    params = [v.value for v in model.trainable_variables]
    states = [v.value for v in model.non_trainable_variables]
    x = np.random.default_rng(1).normal(size=(16, 4)).astype(np.float32)
    inference, same_states = stateless_apply(model, params, states, x, False)
    inference_again, _ = stateless_apply(model, params, states, x, False)
    training, _ = stateless_apply(model, params, states, x, True)
    inference = keras.ops.convert_to_numpy(inference)
    np.testing.assert_array_equal(inference, keras.ops.convert_to_numpy(inference_again))
    # Dropout is active only in training mode, though call() never saw `training`.
    assert np.abs(keras.ops.convert_to_numpy(training) - inference).max() > 1e-3
    for before, after in zip(states, same_states):  # inference changes no statistics
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(before),
                                      keras.ops.convert_to_numpy(after))


@pytest.mark.slow_on_other_backends
def test_ppo_takes_subclassed_actor_critic_and_shared_models():
    class Shared(keras.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.torso = layers.Dense(32, activation="tanh")
            self.policy_head = layers.Dense(N_ACTIONS)
            self.value_head = layers.Dense(1)

        def call(self, inputs):
            x = self.torso(inputs)
            return self.policy_head(x), self.value_head(x)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kwargs in ({"model": NoTraining(), "value_model": NoTraining(1)},
                       {"model": Shared()}):
            agent = kerasrl.PPO("CartPole-v1", seed=0, n_steps=64, batch_size=32, n_epochs=2,
                                **kwargs)
            agent.fit(128, progress=False)
            assert agent.history.updates
            assert agent.predict(np.zeros((3, 4), np.float32)).shape == (3,)
            agent.close()


class ReadsValues(keras.Model):
    """A call() that reads a tensor value in Python: it cannot be compiled."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.out = layers.Dense(N_ACTIONS)

    def call(self, inputs):
        if float(keras.ops.convert_to_numpy(keras.ops.sum(inputs))) > 0:
            return self.out(inputs)
        return -self.out(inputs)


def test_a_model_that_cannot_be_compiled_is_refused_when_the_agent_is_made():
    with pytest.raises(ValueError, match=r"ReadsValues.*keras\.ops\.where"):
        kerasrl.DQN("CartPole-v1", model=ReadsValues(), seed=0)


def test_wrong_output_names_the_fix():
    with pytest.raises(ValueError, match=r"Dense\(2\)"):
        kerasrl.DQN("CartPole-v1", model=NoTraining(n_outputs=3), seed=0)


def _ending_in(activation, n_outputs=2, n_inputs=4):
    return keras.Sequential([keras.Input((n_inputs,)), layers.Dense(16, activation="relu"),
                             layers.Dense(n_outputs, activation=activation)])


def test_a_bounded_last_activation_on_values_or_logits_is_warned_at_the_users_line():
    """A softmax Q-network (Q-values in [0, 1]) or a softmax policy model (kerasrl applies its own
    softmax to the logits) trains quietly wrong; the warning points at the line that made the agent."""
    from kerasrl.diagnostics import TrainingWarning

    with pytest.warns(TrainingWarning, match=r"The Q-network ends in softmax: its outputs lie in "
                                             r"\[0, 1\] and sum to 1.*Make its last layer linear") as caught:
        kerasrl.DQN("CartPole-v1", model=_ending_in("softmax"), seed=0)
    assert {w.filename for w in caught if issubclass(w.category, TrainingWarning)} == {__file__}
    with pytest.warns(TrainingWarning, match=r"The policy model \(it outputs logits.*ends in softmax: "
                                             r"kerasrl reads its outputs as logits"):
        kerasrl.PPO("CartPole-v1", model=_ending_in("softmax"), seed=0)
    with pytest.warns(TrainingWarning, match="The value model ends in relu: its outputs are never negative"):
        kerasrl.PPO("CartPole-v1", value_model=_ending_in("relu", 1), seed=0)
    # keras.io's actor-critic example: one model, outputs [softmax policy, value].
    inputs = keras.Input((4,))
    common = layers.Dense(16, activation="relu")(inputs)
    keras_io = keras.Model(inputs, [layers.Dense(2, activation="softmax")(common), layers.Dense(1)(common)])
    with pytest.warns(TrainingWarning, match=r"The policy output of the shared actor-critic model \(it outputs "
                                             r"logits \(batch, n_actions\)\) ends in softmax: kerasrl reads"):
        kerasrl.A2C("CartPole-v1", model=keras_io, seed=0)
    relu_value = keras.Model(inputs, [layers.Dense(2)(common), layers.Dense(1, activation="relu")(common)])
    with pytest.warns(TrainingWarning, match=r"The value output of the shared actor-critic model ends in relu"):
        kerasrl.PPO("CartPole-v1", model=relu_value, seed=0)
    # TD3's two critics from one user's critic (cloned): warned once, not once a critic.
    import gymnasium as gym

    def relu_critic(observation_space: gym.Space, action_space: gym.Space) -> keras.Model:
        observations, actions = keras.Input(observation_space.shape), keras.Input(action_space.shape)
        joined = layers.Concatenate()([observations, actions])
        return keras.Model([observations, actions], layers.Dense(1, activation="relu")(joined))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kerasrl.TD3("Pendulum-v1", critic=relu_critic(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,))),
                    seed=0)
    assert [str(w.message)[:34] for w in caught if issubclass(w.category, TrainingWarning)] == [
        "The critic 0 ends in relu: its out"]
    # Where a bounded end is right: tanh on a Gaussian policy's means and on a TD3 actor (bounded
    # actions), and a dueling torso's features (kerasrl puts the linear head on it).
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrainingWarning)
        kerasrl.PPO("Pendulum-v1", model=_ending_in("tanh", 1, 3), seed=0)
        kerasrl.TD3("Pendulum-v1", model=_ending_in("tanh", 1, 3), seed=0)
        kerasrl.DQN("CartPole-v1", model=_ending_in("relu", 16), dueling=True, seed=0)


def test_a_keras_rl_window_input_names_the_fix():
    """keras-rl's models take (window_length,) + obs_shape (Flatten(input_shape=(1,) + shape))."""
    model = keras.Sequential([keras.Input((1, 4)), layers.Flatten(), layers.Dense(16, activation="relu"),
                              layers.Dense(2)])
    with pytest.raises(ValueError, match=r"could not be called(.|\n)*The model takes \(1, 4\): "
                                         r"keras-rl's \(window_length,\) \+ observation shape(.|\n)*"
                                         r"keras.Input\(\(4,\)\)"):
        kerasrl.DQN("CartPole-v1", model=model)


def test_an_agent_owns_a_users_model_by_a_record_not_an_attribute_on_it():
    """Which agent owns a model is recorded in kerasrl.networks, not written onto the user's model:
    making an agent adds no attribute to it. A second agent, of any kind and in any role, is
    refused with the fix; a model no agent took is free."""
    from kerasrl.models import is_claimed

    model, free = built(NoTraining()), NoTraining()
    before = set(vars(model))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NoTraining is saved as weights only
        kerasrl.DQN("CartPole-v1", model=model, seed=0)
    assert set(vars(model)) == before
    assert is_claimed(model) and not is_claimed(free)
    for kwargs, role in (({"model": model}, "policy model"), ({"value_model": model}, "value model")):
        with pytest.raises(ValueError, match=f"already belongs to another kerasrl agent.*pass a "
                                             f"new model, or a function that builds one, for the "
                                             f"{role}"):
            kerasrl.PPO("CartPole-v1", seed=0, **kwargs)
    with pytest.raises(ValueError, match="already belongs to another kerasrl agent"):
        kerasrl.DQN("CartPole-v1", model=model, seed=0)


# -- saving a model Keras cannot serialize --------------------------------------------------------
@pytest.mark.slow_on_other_backends
def test_unregistered_model_is_reported_when_the_agent_is_made_and_saved_as_weights(tmp_path):
    with pytest.warns(UserWarning, match=r"NoTraining will be saved as weights only.*"
                                         r"model_factory"):
        agent = kerasrl.DQN("CartPole-v1", model=NoTraining(), seed=0, learning_starts=64,
                            train_freq=4)
    # checkpoint_every used to fail at the first checkpoint, mid-run.
    agent.fit(400, progress=False, checkpoint_every=200, log_dir=tmp_path / "run")
    checkpoints = sorted((tmp_path / "run" / "checkpoints").iterdir())
    assert [c.name for c in checkpoints] == ["ckpt-000000200", "ckpt-000000400"]
    assert (checkpoints[-1] / "model.weights.h5").is_file()
    assert not (checkpoints[-1] / "model.keras").exists()

    with pytest.raises(CheckpointError, match=r"weights only of model \(.*NoTraining\).*"
                                              r"model_factory="):
        kerasrl.DQN.load(tmp_path / "run")
    with pytest.raises(CheckpointError, match="model_factory="):
        kerasrl.load_policy(tmp_path / "run")

    def factory(observation_space, action_space):
        return NoTraining(int(action_space.n))

    obs = np.random.default_rng(2).normal(size=(32, 4)).astype(np.float32)
    loaded = kerasrl.DQN.load(tmp_path / "run", model_factory=factory)
    assert loaded.num_timesteps == 400
    np.testing.assert_allclose(loaded.policy.q_values(obs), agent.policy.q_values(obs), atol=1e-6)
    policy = kerasrl.load_policy(tmp_path / "run", model_factory=factory)
    np.testing.assert_allclose(policy.q_values(obs), agent.policy.q_values(obs), atol=1e-6)
    loaded.fit(600, progress=False)  # and training continues
    assert loaded.num_timesteps == 600
    agent.close()
    loaded.close()


@keras.saving.register_keras_serializable(package="kerasrl_tests")
class RegisteredNoTraining(NoTraining):
    pass


def test_registered_subclassed_model_is_saved_whole(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no weights-only note
        agent = kerasrl.DQN("CartPole-v1", model=RegisteredNoTraining(), seed=0,
                            learning_starts=64)
    agent.fit(200, progress=False)
    agent.save(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "model.keras").is_file()
    obs = np.random.default_rng(3).normal(size=(16, 4)).astype(np.float32)
    policy = kerasrl.load_policy(tmp_path / "ckpt")  # no factory needed
    assert type(policy.model).__name__ == "RegisteredNoTraining"
    np.testing.assert_allclose(policy.q_values(obs), agent.policy.q_values(obs), atol=1e-6)
    agent.close()


def test_a_builder_without_the_two_spaces_is_refused_with_the_fix(tmp_path):
    """model= and model_factory= take functions of (observation_space, action_space); a
    `lambda: MyNet()` is refused where it is passed, naming the fix, not a TypeError from
    inside kerasrl."""
    def q_network():
        return keras.Sequential([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])

    with pytest.raises(TypeError, match=r"lambda observation_space, action_space: MyNet\(\)"):
        kerasrl.DQN("CartPole-v1", model=lambda: q_network(), seed=0)
    # Sized straight from the space, as users write it: Keras refuses Gymnasium's numpy integer
    # with "expected a positive integer. Received: units=2"; the fix is named with it.
    with pytest.raises(ValueError, match=r"write `int\(action_space.n\)`"):
        kerasrl.DQN("CartPole-v1", seed=0, model=lambda observation_space, action_space:
                    keras.Sequential([keras.layers.Dense(action_space.n)]))

    class QNet(keras.Model):  # not registered: saved as weights only
        def __init__(self):
            super().__init__()
            self.hidden, self.out = keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)

        def call(self, x):
            return self.out(self.hidden(x))

    with pytest.warns(UserWarning, match="weights only"):
        agent = kerasrl.DQN("CartPole-v1", model=QNet(), seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # none from Keras's writer either
        agent.save(tmp_path / "agent")
    with pytest.raises(TypeError, match="model_factory is called with"):
        kerasrl.load_policy(tmp_path / "agent", model_factory=lambda: QNet())
    policy = kerasrl.load_policy(tmp_path / "agent",
                                 model_factory=lambda observation_space, action_space: QNet())
    obs = np.zeros((3, 4), np.float32)
    np.testing.assert_array_equal(policy.predict(obs), agent.predict(obs))
