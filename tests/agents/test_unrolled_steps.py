"""Gradient steps unrolled for convolutions on XLA's CPU backend: one rule (learner.unrolled_steps)
for the value learners' rounds, PPO's update and the compiled engine's choice of loop, and PPO's
unrolled update equal to its compiled loop."""

from __future__ import annotations

from types import SimpleNamespace

import keras
import numpy as np
import pytest

import kerasrl
from kerasrl import backend, registry
from kerasrl.agents.dqn import dqn_target
from kerasrl.agents.learner import unrolled_steps
from kerasrl.agents.dqn import q_learner_for
from kerasrl.networks import PatchConv2D

pytestmark = pytest.mark.backend

TINY_PPO = dict(n_envs=2, n_steps=6, batch_size=4, n_epochs=1, initial_weights="keep")  # 3 steps


def shared_net(conv):
    """A shared actor-critic on QuadrantEnv's (12, 12, 3) uint8 frames: `conv` ("keras",
    "patches" or None for none), then the policy (4) and value (1) heads."""
    def build(observation_space=None, action_space=None):
        inputs = keras.Input((12, 12, 3))
        x = keras.layers.Rescaling(1 / 255)(inputs)
        if conv == "keras":
            x = keras.layers.Conv2D(2, 3, strides=3, kernel_initializer=numpy_draws)(x)
        elif conv == "patches":
            x = PatchConv2D(2, 3, kernel_initializer=numpy_draws)(x)
        x = keras.layers.Flatten()(x)
        return keras.Model(inputs, [keras.layers.Dense(4, kernel_initializer=numpy_draws)(x),
                                    keras.layers.Dense(1, kernel_initializer=numpy_draws)(x)])
    return build


def numpy_draws(shape, dtype=None):
    """Initial weights drawn by numpy: a Keras initializer compiles a draw per shape on JAX, most
    of what these tests would cost."""
    return np.random.default_rng(sum(shape)).normal(0.0, 0.5, shape).astype("float32")


def test_one_rule_for_the_value_learners_and_the_compiled_engine():
    """Keras convolutions on XLA's CPU backend: the value learners' rounds unrolled and "auto"
    keeps the compiled loop away; PatchConv2D (a matrix product) and an MLP keep the loops (PPO:
    the test below)."""
    xla_cpu = backend.COMPILED_LOOPS and backend.on_cpu()
    engine = registry.engine_class("compiled")
    for conv in ("keras", "patches", None):
        slow = xla_cpu and conv == "keras"
        model = shared_net(conv)()
        assert unrolled_steps([model]) == (slow or not backend.COMPILED_LOOPS)
        q_network = keras.Model(model.input, model.output[0])
        learner = q_learner_for(q_network, kerasrl.DQNConfig(), dqn_target(kerasrl.DQNConfig()), False)
        assert learner.unrolled == unrolled_steps([model])
        reason = engine.slower_here(SimpleNamespace(learner=learner))
        assert (reason is not None) == slow and (not slow or "has Conv2D layers" in reason)


def ppo_with_rollout(**config):
    """A PPO agent with a Conv2D on QuadrantEnv, its rollout buffer filled (3 minibatch steps)."""
    from image_env import QuadrantEnv

    agent = kerasrl.PPO(QuadrantEnv(), model=shared_net("keras"), **TINY_PPO, **config)
    rng, n = np.random.default_rng(0), TINY_PPO["n_envs"]
    for _ in range(TINY_PPO["n_steps"]):
        obs = rng.integers(0, 256, (n, 12, 12, 3)).astype(np.float32)
        logits, values = agent._evaluate_networks(obs)
        actions = rng.integers(0, 4, n).astype(np.int32)
        log_probs = (logits - np.log(np.exp(logits).sum(-1, keepdims=True)))[np.arange(n), actions]
        agent.buffer.add(obs, actions, log_probs, values, rng.normal(size=n).astype(np.float32),
                         np.zeros(n, bool), np.zeros(n, bool), None)
    agent.buffer.compute_advantages(np.zeros(n, np.float32), 0.99, 0.95)
    return agent


def check_paths_agree(agent, paths, monkeypatch) -> int:
    """Run the same update (state, rollout, minibatches) through each `(unrolled, steps per
    call)` path: the same steps, figures and weights (the weights moved). Returns the steps."""
    start = backend.to_numpy(agent.learner.state)
    results = []
    for unrolled, per_call in paths:
        monkeypatch.setattr("kerasrl.agents.ppo.UNROLLED_STEPS_PER_CALL", per_call)
        agent.unrolled = unrolled
        agent._train = backend.compile(agent._train_epochs, donate_state=True)  # traced anew
        agent._train_part = backend.compile(agent._train_steps, donate_state=True)
        agent.learner.load_state(start)
        agent.rng = np.random.default_rng(1)  # the same minibatches
        sums, steps, _ = agent._update_on(agent.buffer, np.float32(1e-3), 10_000)
        results.append((backend.to_numpy(agent.learner.state["params"]["actor"]), sums, steps))
    assert agent.update_parts(3) == ([(0, 1), (1, 2), (2, 3)] if agent.unrolled and per_call == 1
                                     else [(0, 3)])
    first_weights, first_sums, first_steps = results[0]
    assert any(np.abs(w - s).max() > 0 for w, s in zip(first_weights, start["params"]["actor"]))
    for weights, sums, steps in results[1:]:
        assert steps == first_steps
        np.testing.assert_allclose(sums, first_sums, rtol=1e-5, atol=1e-6)
        for w, r in zip(weights, first_weights):
            np.testing.assert_allclose(w, r, rtol=1e-5, atol=1e-6)
    return first_steps


@pytest.mark.slow_on_other_backends  # compiling the update three times: TensorFlow 15 s
def test_ppo_update_unrolled_equals_the_compiled_loop(monkeypatch):
    """PPO with a Conv2D on XLA's CPU backend unrolls its update by the same rule (and "auto"
    keeps its compiled loop away). The same update through the compiled loop, unrolled in one
    call and unrolled in calls of one step gives the same weights and figures."""
    agent = ppo_with_rollout()
    slow = backend.COMPILED_LOOPS and backend.on_cpu()
    assert agent.unrolled == slow
    assert (registry.engine_class("compiled").slower_here(agent) is not None) == slow
    assert check_paths_agree(agent, ((False, 16), (True, 16), (True, 1)), monkeypatch) == 3


@pytest.mark.slow  # two more compilations of the update
def test_ppo_update_in_unrolled_calls_stops_at_target_kl_as_the_loop(monkeypatch):
    """With a target_kl, the update in calls of one unrolled step stops where the compiled loop
    does (after the first step here: later ones move the policy) with the same weights."""
    agent = ppo_with_rollout(target_kl=1e-6)
    assert check_paths_agree(agent, ((False, 16), (True, 1)), monkeypatch) == 1
