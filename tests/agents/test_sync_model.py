"""Weights reach the Keras models through one public call, `sync_model()`, which the library
makes at fixed points (fit's end, before each callback); the `model` / `policy` getters only read."""

import keras
import numpy as np
import pytest

import kerasrl
from kerasrl import backend
from kerasrl.envs.testing import TargetEnv


def _numpy(values):
    return [np.asarray(v) for v in backend.to_numpy(values)]


def _variables(model):
    return [np.asarray(keras.ops.convert_to_numpy(v.value)) for v in model.trainable_variables]


def _assert_same(learner_params, model):
    for learned, held in zip(_numpy(learner_params), _variables(model), strict=False):
        np.testing.assert_array_equal(learned, held)


def _agent(algorithm):
    if algorithm == "dqn":
        return kerasrl.DQN("CartPole-v1", seed=0, learning_starts=16, batch_size=8,
                           buffer_size=200, hidden_sizes=(8,))
    if algorithm == "ppo":
        return kerasrl.PPO("CartPole-v1", seed=0, n_steps=16, batch_size=8, n_epochs=1)
    return kerasrl.TD3(TargetEnv, seed=0, learning_starts=16, batch_size=8,  # 10-step episodes
                       buffer_size=200, hidden_sizes=(8,))


def _online(agent):
    """The learner's online weights of the model that `agent.model` is, and that model."""
    name = "q" if agent.algorithm == "dqn" else "actor"
    return agent.learner.state["params"][name], (agent.q_network if name == "q" else agent.actor)


@pytest.mark.parametrize("algorithm", ["dqn", "ppo", "td3"])
def test_the_models_hold_the_learner_weights_when_fit_returns_and_in_callbacks(algorithm):
    agent = _agent(algorithm)
    seen = []

    def callback(agent, history):
        params, model = _online(agent)
        seen.append(all((a == b).all() for a, b in zip(_numpy(params), _variables(model))))

    agent.fit(64, progress=False, callback=callback)
    assert seen and all(seen)
    params, model = _online(agent)  # read with no getter
    _assert_same(params, model)
    assert agent.model is model


def test_the_getters_only_read_and_sync_model_writes():
    agent = _agent("dqn")
    agent.fit(64, progress=False)
    before = _variables(agent.q_network)
    batches = agent.buffer.sample(8, agent.rng, n_batches=1)
    batches.pop("indices", None)
    agent.learner.train(batches, 1e-2, 0.0)  # the learner driven by hand
    for _ in (agent.model, agent.policy):  # getters: no weight moves
        assert all((a == b).all() for a, b in zip(before, _variables(agent.q_network)))
    agent.sync_model()
    _assert_same(agent.learner.state["params"]["q"], agent.q_network)
    assert not all((a == b).all() for a, b in zip(before, _variables(agent.q_network)))
