"""Weights reach the Keras models through one public call, `sync_model()` (the models are read
here directly, not through the `model` / `policy` getters, which call it too)."""

import keras
import numpy as np
import pytest

import kerasrl
from kerasrl import backend


def _numpy(values):
    return [np.asarray(v) for v in backend.to_numpy(values)]


def _variables(model):
    return [np.asarray(keras.ops.convert_to_numpy(v.value)) for v in model.trainable_variables]


def _assert_same(learner_params, model):
    for learned, held in zip(_numpy(learner_params), _variables(model), strict=False):
        np.testing.assert_array_equal(learned, held)


@pytest.mark.parametrize("algorithm", ["dqn", "ppo", "td3"])
def test_sync_model_writes_the_learner_weights_into_the_models(algorithm):
    if algorithm == "dqn":
        agent = kerasrl.DQN("CartPole-v1", seed=0, learning_starts=16, batch_size=8,
                            buffer_size=200, hidden_sizes=(8,))
        agent.fit(64, progress=False)
        agent.sync_model()
        _assert_same(agent.learner.state["params"], agent.q_network)  # read with no getter
    elif algorithm == "ppo":
        agent = kerasrl.PPO("CartPole-v1", seed=0, n_steps=16, batch_size=8, n_epochs=1)
        agent.fit(32, progress=False)
        agent.sync_model()
        _assert_same(agent.state["params"], agent.actor)
    else:
        agent = kerasrl.TD3("Pendulum-v1", seed=0, learning_starts=16, batch_size=8,
                            buffer_size=200, hidden_sizes=(8,))
        agent.fit(48, progress=False)
        agent.sync_model()
        _assert_same(agent.learner.state["params"]["actor"], agent.actor)


def test_sync_model_after_driving_the_learner_by_hand():
    agent = kerasrl.DQN("CartPole-v1", seed=0, learning_starts=16, batch_size=8, buffer_size=200,
                        hidden_sizes=(8,))
    agent.fit(64, progress=False)
    agent.sync_model()
    before = _variables(agent.q_network)
    batches = agent.buffer.sample(8, agent.rng, n_batches=1)
    batches.pop("indices", None)
    agent.learner.train(batches, 1e-2, 0.0)
    assert all((a == b).all() for a, b in zip(before, _variables(agent.q_network)))  # not yet
    agent.sync_model()
    _assert_same(agent.learner.state["params"], agent.q_network)
