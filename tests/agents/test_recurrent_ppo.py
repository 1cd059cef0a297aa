"""Recurrent PPO on the active backend: the replay of sequences against the rollout, the state
at episode starts, saved and exported policies over whole episodes, exact resume, the model
contract; the loss across backends."""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np
import pytest

import kerasrl
from kerasrl import backend, devices
from kerasrl.agents.recurrent_ppo import RecurrentPPO
from kerasrl.config import RecurrentPPOConfig
from kerasrl.losses import categorical_log_prob
from kerasrl.networks import recurrent_actor_critic
from kerasrl.policies import episode_actor

pytestmark = pytest.mark.backend

ENV = "kerasrl/CartPoleNoVel-v1"
# 16-step sequences (the update replays them in a rolled loop on JAX and TensorFlow, unrolled
# on PyTorch, where loops are Python).
TINY = dict(n_envs=4, n_steps=16, batch_size=32, n_epochs=2, recurrent_units=8,
            hidden_sizes=(16,), learning_rate=1e-3, ortho_init=False)


@pytest.fixture(scope="module")
def trained():
    """A tiny agent after two updates, and the replay check's figures of both rollouts."""
    agent = RecurrentPPO(ENV, seed=0, **TINY)
    replays = []
    learn = agent.learn_from_rollout

    def replay_then_learn(buffer, last_obs, total_steps, logger):
        replays.append(_replay(agent, buffer))
        return learn(buffer, last_obs, total_steps, logger)

    agent.learn_from_rollout = replay_then_learn
    agent.fit(128, progress=False)
    del agent.learn_from_rollout
    return agent, replays


def _replay(agent, buffer):
    """The update's replay of the whole rollout at the current weights: log-probs and values
    (T, N); and the same replay with the episode starts ignored."""
    data, _ = agent._training_data(buffer)
    rows = np.arange(buffer.n_envs, dtype=np.int32)
    params, non_trainable = agent.learner.acting_weights()
    out = {}
    for name, starts in (("replayed", data["episode_starts"]),
                         ("starts_ignored", np.zeros_like(data["episode_starts"]))):
        batch = agent._minibatch(backend.feed({**data, "episode_starts": starts}),
                                 backend.feed(rows))
        policy, values, _ = agent._batch_outputs(params, non_trainable, batch)
        log_probs = categorical_log_prob(policy, batch["actions"], agent.action_sizes)
        log_probs, values = (np.asarray(x) for x in backend.to_numpy((log_probs, values)))
        shape = (buffer.n_envs, buffer.n_steps)  # env-major, as the minibatches are flattened
        out[name] = (log_probs.reshape(shape).T, values.reshape(shape).T)
    out["rollout"] = (buffer.log_probs.copy(), buffer.values.copy())
    out["episode_starts"] = data["episode_starts"].T.copy()
    return out


@pytest.mark.slow_on_other_backends
def test_replayed_sequences_give_the_rollouts_log_probs_and_values(trained):
    _, replays = trained
    assert len(replays) == 2
    for replay in replays:
        # Episodes start inside the rollout (not only at its first row): the resets matter.
        assert replay["episode_starts"][1:].any()
        for got, expected in zip(replay["replayed"], replay["rollout"]):
            np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)
    # Without zeroing the state at episode starts the replay is wrong after the first restart.
    ignored, rollout = replays[-1]["starts_ignored"][1], replays[-1]["rollout"][1]
    assert np.max(np.abs(ignored - rollout)) > 1e-3


def test_the_replay_traces_one_model_step_for_any_length_where_loops_compile(trained):
    """The update's replay of T steps is one traced step in a loop where loops compile (JAX,
    TensorFlow): T unrolled steps made XLA's compilation superlinear in T (SB3-contrib's default
    n_steps=128 with 256-unit LSTMs never finished compiling). Where loops are Python (PyTorch)
    a trace records every step."""
    agent, _ = trained
    params, non_trainable = agent.learner.acting_weights()
    traced = []
    step = agent._step

    def counted(*args):
        traced.append(1)
        return step(*args)

    agent._step = counted
    try:
        for n_steps in (4, 24):
            rng = np.random.default_rng(n_steps)
            batch = backend.to_tensors({
                "observations": rng.normal(size=(3, n_steps, 2)).astype(np.float32),
                "episode_starts": (rng.random((3, n_steps)) < 0.2).astype(np.float32),
                "states": [np.zeros((3, size), np.float32) for size in agent.state_sizes]})
            del traced[:]
            replay = backend.compile(lambda p, n, b: agent._batch_outputs(p, n, b)[:2])
            policy, values = backend.to_numpy(replay(params, non_trainable, batch))
            if backend.COMPILED_LOOPS:
                assert len(traced) == 2  # step 0, then the loop's body: for any T
            else:  # every step, in each pass the trace makes
                assert len(traced) >= n_steps and len(traced) % n_steps == 0
            # The loop's outputs are the steps' own, in order: step t of sequence e at e * T + t.
            eager = backend.to_numpy(agent._batch_outputs(params, non_trainable, batch)[:2])
            np.testing.assert_allclose(policy, eager[0], atol=1e-6)
            np.testing.assert_allclose(values, eager[1], atol=1e-6)
            assert np.asarray(values).shape == (3 * n_steps,)
    finally:
        del agent._step


@pytest.mark.slow_on_other_backends
def test_the_state_is_zeroed_at_episode_starts(trained):
    agent, _ = trained
    policy = agent.policy
    obs = np.array([[0.01, 0.02], [-0.03, 0.04]], np.float32)
    fresh, fresh_state = policy.predict(obs)
    _, carried = policy.predict(obs * 10, state=fresh_state)
    _, later_state = policy.predict(obs, state=carried)
    assert not np.allclose(later_state[0], fresh_state[0])  # the state changes what comes out
    actions, restarted = policy.predict(obs, state=carried, episode_start=np.array([True, True]))
    np.testing.assert_array_equal(actions, fresh)
    for a, b in zip(restarted, fresh_state):
        np.testing.assert_allclose(a, b, atol=1e-7)
    # One row restarts, the other carries on.
    _, mixed = policy.predict(obs, state=carried, episode_start=np.array([True, False]))
    np.testing.assert_allclose(mixed[0][0], fresh_state[0][0], atol=1e-7)
    np.testing.assert_allclose(mixed[0][1], later_state[0][1], atol=1e-7)
    # The agent's loop: the step after an episode's end starts from zeros, and only that one.
    starts, ends = agent.rollout_episode_starts, agent.buffer.episode_ends
    assert ends.any()
    np.testing.assert_array_equal(starts[1:], ends[:-1])
    assert [s.shape for s in policy.initial_state(3)] == [(3, 8)] * 4


def _episodes(agent, others, n_episodes=3, seed=5):
    """Whole episodes on one env, acting with the agent; every other actor `f(obs, starts)`
    must pick the same action at every step. The env takes a random action every other step, so
    that the policies see varied states. Returns the steps and the distinct actions chosen."""
    env, rng = gym.make(ENV), np.random.default_rng(seed)
    steps, seen = 0, set()
    for episode in range(n_episodes):
        obs, _ = env.reset(seed=seed + episode)
        starts, done = np.array([True]), False
        while not done:
            agent._episodes_start(starts)
            action = int(agent._act_greedy(obs[None].astype(np.float32))[0])
            for name, act in others.items():
                assert int(act(obs[None], starts)[0]) == action, (name, episode, steps)
            seen.add(action)
            step_action = action if steps % 2 else int(rng.integers(2))
            obs, _, terminated, truncated, _ = env.step(step_action)
            done, starts, steps = terminated or truncated, np.array([False]), steps + 1
    return steps, seen


def _carrying(predict, initial):
    def act(obs, starts):
        actions, act.state = predict(obs, act.state, starts)
        return actions

    act.state = initial
    return act


@pytest.mark.slow_on_other_backends
def test_saved_policy_and_onnx_export_act_as_the_agent_over_whole_episodes(trained, tmp_path):
    pytest.importorskip("onnxruntime")
    import onnxruntime as ort

    agent, _ = trained
    policy = agent.policy
    loaded = kerasrl.load_policy(policy.save(tmp_path / "policy"))
    assert type(loaded).__name__ == "RecurrentActorCriticPolicy"
    path = policy.export(tmp_path / "policy.onnx")  # checks itself over carried states
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]

    def onnx_step(obs, state, starts):
        state = [np.where(starts[:, None], 0.0, s).astype(np.float32) for s in state]
        actions, *new_state = session.run(None, dict(zip(names, [obs.astype(np.float32), *state])))
        return actions, new_state

    def policy_step(p):
        return lambda obs, state, starts: p.predict(obs, state=state, episode_start=starts)

    actor = [None]

    def one_observation_at_a_time(obs, starts):  # as kerasrl evaluate / play / watch act
        if starts[0]:
            actor[0] = episode_actor(loaded)
        return np.atleast_1d(actor[0](obs[0]))

    carried = {"policy": _carrying(policy_step(policy), policy.initial_state(1)),
               "loaded": _carrying(policy_step(loaded), loaded.initial_state(1)),
               "onnx": _carrying(onnx_step, policy.initial_state(1))}
    steps, _ = _episodes(agent, {"episode_actor": one_observation_at_a_time, **carried})
    assert steps >= 30
    # The states carried to the end agree too (the actions alone may not tell: a barely trained
    # policy can push one way in every state).
    final = carried["policy"].state
    assert max(np.abs(s).max() for s in final) > 1e-2
    for name in ("loaded", "onnx"):
        for a, b in zip(carried[name].state, final):
            np.testing.assert_allclose(a, b, atol=1e-5, err_msg=name)


@pytest.mark.slow  # three agents and a checkpoint round trip
def test_checkpoint_mid_rollout_resumes_exactly(tmp_path):
    make = lambda: RecurrentPPO(ENV, seed=3, normalize_observations=True, **TINY)
    whole = make()
    whole.fit(192, progress=False)
    first = make()
    first.fit(192, stop_at=100, progress=False)  # stops within a rollout
    path = first.save(tmp_path / "checkpoint")
    resumed = RecurrentPPO.load(path)
    resumed.env = first.env  # (kerasrl.checkpoint saves the env's state apart; same objects here)
    for a, b in zip(resumed.states, first.states):
        np.testing.assert_array_equal(a, b)
    resumed.fit(192, progress=False)
    np.testing.assert_allclose(resumed.history.losses, whole.history.losses, rtol=1e-6)
    for a, b in zip(resumed.model.get_weights(), whole.model.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(resumed.states, whole.states):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_model_outside_the_contract_is_refused_naming_it():
    obs = keras.Input((2,))
    plain = keras.Model(obs, [keras.layers.Dense(2)(obs), keras.layers.Dense(1)(obs)])
    with pytest.raises(ValueError, match="takes one step.*no state"):
        RecurrentPPO(ENV, model=plain, **TINY)
    h = keras.Input((4,))
    out, new = keras.layers.GRUCell(4)(obs, [h])
    no_state_out = keras.Model([obs, h], [keras.layers.Dense(2)(out), keras.layers.Dense(1)(out)])
    with pytest.raises(ValueError, match=r"outputs \[\(2, 2\), \(2, 1\)\], not"):
        RecurrentPPO(ENV, model=no_state_out, **TINY)
    with pytest.raises(ValueError, match="batch_size must be a multiple of n_steps"):
        RecurrentPPO(ENV, **{**TINY, "batch_size": 40})


def test_auto_weighs_the_rows_each_op_of_the_replay_sees():
    """On a GPU machine "auto" learns on the host where one gradient step's work is small: PyTorch
    replays the sequences op by op (one row a sequence per kernel), so SB3-contrib's defaults (one
    env, 128 steps, 256-unit LSTMs) learn on the host; JAX and TensorFlow weigh the whole
    minibatch of one compiled program and learn on the accelerator."""
    agent = RecurrentPPO(ENV, seed=0, n_steps=128, batch_size=128, check_env=False)
    gpu_machine = devices.Placement("auto", None, True, agent.rows_per_gradient_step)
    learning = gpu_machine.for_learner(agent.learner.models.values()).learning
    if backend.NAME == "torch":
        assert agent.rows_per_gradient_step == 1 and learning == backend.devices()[0]
    else:
        assert agent.rows_per_gradient_step == 128 and learning is None
    assert RecurrentPPO(ENV, seed=0, n_envs=4, n_steps=16, batch_size=32,
                        check_env=False).rows_per_gradient_step == (2 if backend.NAME == "torch" else 32)


def test_recurrent_init_torch_starts_the_cells_as_pytorch_does():
    """SB3-contrib's LSTMs keep PyTorch's init (its ortho_init touches Linear layers only):
    every weight and bias uniform in +-1/sqrt(units), no forget-gate bias of 1."""
    units = TINY["recurrent_units"]  # TINY's shapes: nothing new to compile
    bound = 1.0 / np.sqrt(units)
    agent = RecurrentPPO(ENV, seed=0, check_env=False, recurrent_init="torch", **TINY)
    for head in ("policy", "value"):
        kernel, recurrent, bias = agent.actor.get_layer(f"{head}_lstm").get_weights()
        for weight in (kernel, recurrent, bias):
            assert bound >= np.abs(weight).max() > 0.8 * bound
            assert abs(weight.mean()) < 0.2 * bound
    keras_cells = recurrent_actor_critic(gym.spaces.Box(-1, 1, (2,)), 2, units)
    _, _, keras_bias = keras_cells.get_layer("policy_lstm").get_weights()
    np.testing.assert_array_equal(keras_bias[units:2 * units], 1.0)  # Keras: forget gate at 1
    with pytest.raises(ValueError, match="recurrent_init"):
        RecurrentPPOConfig(recurrent_init="pytorch")


def test_cartpole_without_velocities_observes_position_and_angle():
    full, partial = gym.make("CartPole-v1"), gym.make(ENV)
    assert partial.observation_space.shape == (2,) and partial.spec.max_episode_steps == 500
    a, _ = full.reset(seed=1)
    b, _ = partial.reset(seed=1)
    for _ in range(5):
        np.testing.assert_array_equal(b, a[[0, 2]])
        a, *_ = full.step(1)
        b, *_ = partial.step(1)


PARITY_SCRIPT = """
import json, sys
import numpy as np
from kerasrl import backend
from kerasrl.agents.recurrent_ppo import RecurrentPPO
agent = RecurrentPPO("kerasrl/CartPoleNoVel-v1", seed=0, n_envs=4, n_steps=16, batch_size=64,
                     recurrent_units=8, hidden_sizes=(16,), ortho_init=False, check_env=False)
rng = np.random.default_rng(0)
n, t = 4, 16
data = {"observations": rng.normal(size=(n, t, 2)).astype(np.float32),
        "actions": rng.integers(0, 2, size=(n, t)).astype(np.int32),
        "old_log_probs": (np.log(0.5) + rng.normal(0, 0.1, (n, t))).astype(np.float32),
        "old_values": rng.normal(size=(n, t)).astype(np.float32),
        "advantages": rng.normal(size=(n, t)).astype(np.float32),
        "returns": rng.normal(size=(n, t)).astype(np.float32),
        "episode_starts": rng.random((n, t)) < 0.2,
        "states": [rng.normal(0, 0.5, (n, s)).astype(np.float32) for s in agent.state_sizes]}
batch = agent._minibatch(backend.feed(data), backend.feed(np.arange(n, dtype=np.int32)))
params, non_trainable = agent.learner.acting_weights()
loss, (_, metrics) = agent._loss(params, non_trainable, batch, np.float32(0.2))
out = {"loss": loss, **metrics}
print(json.dumps({k: float(np.asarray(backend.to_numpy(v))) for k, v in out.items()}))
"""


@pytest.mark.slow
@pytest.mark.cross_backend
def test_the_recurrent_loss_agrees_across_backends_within_1e_5():
    import json
    import os
    import subprocess
    import sys

    results = {}
    for name in ("jax", "tensorflow", "torch"):
        env = {**os.environ, "KERAS_BACKEND": name, "OMP_NUM_THREADS": "1"}
        run = subprocess.run([sys.executable, "-c", PARITY_SCRIPT], capture_output=True,
                             text=True, env=env, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        results[name] = json.loads(run.stdout.splitlines()[-1])
    reference = results["jax"]
    assert reference["approx_kl"] > 0 and reference["clip_fraction"] > 0  # a batch that clips
    for name in ("tensorflow", "torch"):
        for key, value in reference.items():
            assert abs(results[name][key] - value) <= 1e-5 * max(1.0, abs(value)), (name, key)
