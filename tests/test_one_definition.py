"""Each algorithm is written once: the compiled loop runs the agent's own learner, so one training
round from the same state and batches gives the same state through either loop (issue 26)."""

from __future__ import annotations

import numpy as np
import pytest

from kerasrl import backend
from kerasrl.compiled import CompiledDQN

SMALL_DQN = dict(learning_starts=32, train_freq=4, gradient_steps=3, batch_size=16, buffer_size=256,
                 target_update_interval=8, tau=0.5, hidden_sizes=(16,))


def _leaves(tree, prefix=""):
    if isinstance(tree, dict):
        for key in sorted(tree):
            yield from _leaves(tree[key], f"{prefix}/{key}")
    elif isinstance(tree, (list, tuple)):
        for i, item in enumerate(tree):
            yield from _leaves(item, f"{prefix}/{i}")
    else:
        yield prefix, np.asarray(tree)


@pytest.mark.backend
@pytest.mark.slow_on_other_backends
@pytest.mark.parametrize("double_q", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_a_dqn_round_is_the_same_through_the_compiled_loop_and_the_learners_train(double_q):
    loop = CompiledDQN("CartPole", seeds=0, double_q=double_q, **SMALL_DQN)
    loop.fit(64, rounds_per_call=4)  # a filled buffer and trained weights, not the initial ones
    state = backend.to_tensors(loop.seed_state(0))
    learning_rate, tau = np.float32(1e-3), np.float32(0.75)

    # The compiled loop's training part (its sampling, then the learner's round)...
    train = backend.compile(lambda s: loop._train(s, learning_rate, tau))
    compiled_state, loss_sum = backend.to_numpy(train(state))
    # ... and the Python loop's: `QLearner.train` on the same batches, as numpy.
    _, batches = backend.to_numpy(backend.compile(lambda s: loop._sample(s, 3))(state))
    learner = loop.learner
    learner.load_state(backend.to_numpy(state["learner"]))
    loss, _ = learner.train(batches, learning_rate, tau)

    exact = backend.NAME == "jax"
    python_state = backend.to_numpy(learner.state)
    compared = 0
    for (path, a), (_, b) in zip(_leaves(compiled_state["learner"]), _leaves(python_state)):
        if exact:
            np.testing.assert_array_equal(a, b, err_msg=path)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=path)
        compared += 1
    assert compared == len(list(_leaves(python_state))) > 10
    np.testing.assert_allclose(float(loss_sum) / 3, loss, rtol=1e-6)
    # The round moved the weights and the target (so equality is not of two untouched states).
    before = dict(_leaves(loop.seed_state(0)["learner"]))
    assert not np.array_equal(before["/params/q/0"], python_state["params"]["q"][0])
    assert not np.array_equal(before["/target_params/q/0"], python_state["target_params"]["q"][0])


@pytest.mark.slow
@pytest.mark.backend
def test_a_dueling_dqn_on_an_ops_env_trains_in_the_compiled_loop_on_the_agents_network(caplog):
    """Dueling heads are only a network: the compiled loop runs them as the agent builds them."""
    import logging

    import kerasrl

    agent = kerasrl.DQN("kerasrl/OpsCartPole-v1", seed=0, dueling=True, **dict(SMALL_DQN, tau=1.0))
    before = agent.learner.weights("q")
    with caplog.at_level(logging.INFO, logger="kerasrl"):
        agent.fit(64, progress=False)
    assert agent.loop.compiled_streams is not None  # the compiled loop ran it
    assert "advantages" in [layer.name for layer in agent.model.layers]
    after = agent.learner.weights("q")
    assert len(after) == len(before) and any(not np.array_equal(a, b) for a, b in zip(after, before))


@pytest.mark.backend
@pytest.mark.slow_on_other_backends
@pytest.mark.parametrize("agent_name", [pytest.param("QRDQN", marks=pytest.mark.slow),
                                        pytest.param("C51", marks=pytest.mark.slow)])
def test_the_distributional_agents_run_the_same_round_in_the_compiled_loop(agent_name):
    """QR-DQN and C51 are a value head and a target on the DQN learner: `fit` on an ops env runs
    them in the compiled loop (their registration names it), and its round is their learner's."""
    import kerasrl

    agent = getattr(kerasrl, agent_name)("kerasrl/OpsCartPole-v1", seed=0,
                                         **dict(SMALL_DQN, hidden_sizes=(16,)))
    agent.fit(64, progress=False)
    assert agent.loop.compiled_streams is not None  # the compiled loop ran it
    loop = CompiledDQN.for_agent(agent)
    state = backend.to_tensors(loop.state_from_agent(agent))
    learning_rate, tau = np.float32(1e-3), np.float32(0.75)
    compiled_state, _ = backend.to_numpy(
        backend.compile(lambda s: loop._train(s, learning_rate, tau))(state))
    _, batches = backend.to_numpy(backend.compile(lambda s: loop._sample(s, 3))(state))
    agent.learner.train(batches, learning_rate, tau)
    for (path, a), (_, b) in zip(_leaves(compiled_state["learner"]),
                                 _leaves(backend.to_numpy(agent.learner.state))):
        if backend.NAME == "jax":
            np.testing.assert_array_equal(a, b, err_msg=path)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=path)
    # The compiled loop acts through the head: its greedy actions are the agent's.
    observations = np.random.default_rng(1).normal(size=(32, 4)).astype(np.float32)
    compiled_greedy = backend.to_numpy(backend.compile(loop.learner.greedy)(
        backend.to_tensors(compiled_state["learner"]), backend.to_tensors(observations)))
    np.testing.assert_array_equal(compiled_greedy, agent.predict(observations, deterministic=True))


@pytest.mark.backend
@pytest.mark.slow_on_other_backends
def test_boltzmann_exploration_in_the_compiled_loop_follows_the_temperature():
    """Near zero temperature the draws are the greedy actions; at a huge one, uniform."""
    from keras import ops

    from kerasrl.compiled.dqn import behaviour_actions

    def draws(temperature):
        loop = CompiledDQN("CartPole", seeds=0, exploration="boltzmann", random_warmup=False,
                           exploration_initial_temperature=temperature,
                           exploration_final_temperature=temperature, **dict(SMALL_DQN, n_envs=64))
        state = backend.to_tensors(loop.seed_state(0))
        u = ops.convert_to_tensor(np.random.default_rng(0).random(64).astype(np.float32))
        act = backend.compile(lambda s, u: (
            behaviour_actions(loop.learner, s["learner"], s["obs"], "boltzmann", temperature, u,
                              ops.zeros((64,), "int32")),
            loop.learner.greedy(s["learner"], s["obs"])))
        return backend.to_numpy(act(state, u))

    sampled, greedy = draws(1e-4)
    np.testing.assert_array_equal(sampled, greedy)
    sampled, greedy = draws(1e4)
    assert 0.3 < np.mean(sampled == greedy) < 0.7 and set(sampled) == {0, 1}


SMALL_PPO = dict(n_envs=4, n_steps=16, batch_size=32, n_epochs=2, hidden_sizes=(16,))


@pytest.mark.slow  # 20 s: a PPO agent and two compilations
@pytest.mark.backend
def test_a_ppo_update_is_the_same_through_the_compiled_loop_and_the_agent():
    """The compiled PPO loop holds a PPO agent and runs its update (`train_epochs`, what the
    agent's own update compiles) on the agent's learner layout, inside its round."""
    from kerasrl.compiled import CompiledPPO

    loop = CompiledPPO("CartPole", seeds=0, **SMALL_PPO)
    state = backend.to_tensors(loop.seed_state(0))
    rng = np.random.default_rng(0)
    n = 64
    data = {"observations": rng.normal(size=(n, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, n).astype(np.int32),
            "old_log_probs": np.log(rng.uniform(0.3, 0.7, n)).astype(np.float32),
            "old_values": rng.normal(size=n).astype(np.float32),
            "advantages": rng.normal(size=n).astype(np.float32),
            "returns": rng.normal(size=n).astype(np.float32)}
    indices = np.concatenate([rng.permutation(n).reshape(2, 32) for _ in range(2)]).astype(np.int32)
    args = (backend.to_tensors(data), backend.to_tensors(indices), np.float32(3e-4), np.float32(0.2))

    def inside_a_bigger_call(state, *args):  # as the compiled round calls it
        learner, sums, steps = loop.agent.train_epochs(state["learner"], *args)
        return learner, sums, steps, state["rounds"] + 1

    compiled = backend.to_numpy(backend.compile(inside_a_bigger_call)(state, *args))
    alone = backend.to_numpy(backend.compile(loop.agent.train_epochs)(state["learner"], *args))
    leaves = list(zip(_leaves(compiled[0]), _leaves(alone[0])))
    assert len(leaves) > 10 and compiled[2] == alone[2] == 4
    for (path, a), (_, b) in leaves:
        if backend.NAME == "jax":
            np.testing.assert_array_equal(a, b, err_msg=path)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=path)
    np.testing.assert_allclose(compiled[1], alone[1], rtol=1e-6)
    before = backend.to_numpy(state["learner"]["params"]["actor"][0])
    assert not np.array_equal(before, compiled[0]["params"]["actor"][0])


@pytest.mark.backend
@pytest.mark.slow_on_other_backends
def test_compiled_ppo_samples_the_agents_gaussian_on_continuous_actions():
    """On a Box action space the compiled loop draws from the agent's diagonal Gaussian (its
    policy mean and learned log std, Box-Muller draws), stores the drawn action with its
    log-probability, and steps the env with it clipped to the bounds."""
    from keras import ops

    from kerasrl.compiled import CompiledPPO

    n = 512
    loop = CompiledPPO("Pendulum", seeds=0, n_envs=n, n_steps=2, batch_size=n, n_epochs=1,
                       log_std_init=-0.5, hidden_sizes=(8,))
    state = backend.to_tensors(loop.seed_state(0))
    rollout = {"observations": ops.zeros((2, n, 3)), "actions": ops.zeros((2, n, 1)),
               **{key: ops.zeros((2, n)) for key in ("old_log_probs", "old_values", "rewards",
                                                     "terminated", "episode_ends", "final_values")}}
    step = backend.compile(lambda s, r: loop._env_step(ops.zeros((), "int32"), (s, r))[1])
    stored = backend.to_numpy(step(state, rollout))
    mean, _ = backend.to_numpy(backend.compile(loop.agent.act_outputs)(state["learner"], state["obs"]))
    actions, log_probs = stored["actions"][0], stored["old_log_probs"][0]
    z = (actions - mean) / np.exp(-0.5)
    assert abs(z.mean()) < 0.15 and abs(z.std() - 1.0) < 0.1  # 512 standard normal draws
    expected = np.sum(-0.5 * z ** 2 + 0.5 - 0.5 * np.log(2 * np.pi), axis=-1)
    np.testing.assert_allclose(log_probs, expected, rtol=1e-5, atol=1e-5)
    assert np.abs(actions).max() > 0 and np.isfinite(stored["rewards"][0]).all()


SMALL_OFF_POLICY = dict(learning_starts=64, batch_size=16, buffer_size=512, hidden_sizes=(16,), seed=0,
                        check_env=False)


def _assert_same_leaves(compiled, python, exact):
    leaves = list(zip(_leaves(compiled), _leaves(python)))
    assert len(leaves) == len(list(_leaves(python))) > 10
    for (path, a), (_, b) in leaves:
        if exact:
            np.testing.assert_array_equal(a, b, err_msg=path)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=path)


@pytest.mark.backend
@pytest.mark.slow_on_other_backends
@pytest.mark.parametrize("agent_name", [pytest.param("TD3", marks=pytest.mark.slow),
                                        pytest.param("SAC", marks=pytest.mark.slow),
                                        pytest.param("DDPG", marks=pytest.mark.slow)])
def test_off_policy_steps_are_the_same_through_the_compiled_loop_and_the_agents_update(agent_name):
    """`fit` on an ops env runs DDPG, TD3 and SAC in the compiled loop (their registration names
    it, tests/test_compiled_fit.py runs it); its gradient steps on a batch it samples (with the
    noise it draws) are the agent's own `update` on that batch, and its exploring actions are the
    Python loop's for the same noise."""
    import kerasrl
    from kerasrl.compiled import CompiledOffPolicy
    from kerasrl.compiled.engine import CompiledEngine

    agent = getattr(kerasrl, agent_name)("kerasrl/OpsPendulum-v1", **SMALL_OFF_POLICY)
    assert CompiledEngine.why_not(agent) is None
    # A filled buffer and trained weights, not the initial ones (the Python loop: it compiles the
    # agent's update, which the comparison runs, and not the whole compiled loop).
    agent.fit(96, progress=False, engine="local")
    loop = CompiledOffPolicy.for_agent(agent)
    state = backend.to_tensors(loop.state_from_agent(agent))
    learning_rate = np.float32(1e-3)
    # The loop's training part (its sampling, then the agent's steps), its sampling alone, and its
    # steps on given batches inside a bigger call (as its round calls them).
    train = backend.compile(lambda s: loop._train(s, learning_rate))
    sample = lambda s: loop._sample(s, 1)[2]  # noqa: E731  (its batches are inputs to both sides)
    steps = backend.compile(lambda s, b: (loop._train_steps(s["learner"], b, learning_rate), s["vector_steps"] + 1))
    exact = backend.NAME == "jax"
    before = backend.to_numpy(state["learner"])
    # Two steps (TD3: one that moves the actor and targets, one that leaves them), each from the
    # compiled loop's state, against the agent's `update` on the batch the loop sampled.
    for _ in range(2):
        agent.learner.load_state(backend.to_numpy(state["learner"]))
        batches = backend.to_numpy(sample(state))
        assert set(batches) == {"observations", "actions", "rewards", "next_observations", "discounts",
                                *agent.batch_noise_scales()}
        losses = agent.update(batches, learning_rate)
        python = backend.to_numpy(agent.learner.state)
        (stepped, sums), _ = backend.to_numpy(steps(state, backend.to_tensors(batches)))
        _assert_same_leaves(stepped, python, exact)  # bit for bit on JAX
        np.testing.assert_allclose(sums, [losses[name] for name in agent.loss_names], rtol=1e-6, atol=1e-7)
        # With its sampling in the same call, XLA may fuse the gathered rewards and discounts into
        # the target's arithmetic (one float32 rounding apart on JAX).
        state, _ = train(state)
        for (path, a), (_, b) in zip(_leaves(backend.to_numpy(state["learner"])), _leaves(python)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=path)
    after = backend.to_numpy(state["learner"])
    assert not np.array_equal(before["params"]["actor"][0], after["params"]["actor"][0])
    assert not np.array_equal(before["params"]["critic_0"][0], after["params"]["critic_0"][0])

    # Acting: the compiled loop's `explore` (keras.ops) is the Python loop's numpy exploration.
    rng = np.random.default_rng(1)
    observations = rng.normal(size=(8, 3)).astype(np.float32)
    normals = rng.normal(size=(8, 1)).astype(np.float32)
    explored = backend.to_numpy(agent.explore(backend.to_tensors(agent.learner.state),
                                              *backend.to_tensors([observations, normals])))
    python = agent.explore_from_outputs(agent.actor_outputs(observations), agent.exploration_std * normals)
    np.testing.assert_allclose(explored, python, rtol=1e-6, atol=1e-6)
    assert np.all(np.abs(explored) <= 1.0) and not np.allclose(explored, agent._deterministic_unit(observations))


@pytest.mark.slow  # 3 compiled loops
@pytest.mark.backend
def test_off_policy_seeds_trained_together_are_each_seed_trained_alone():
    from kerasrl.compiled import CompiledOffPolicy

    small = dict(SMALL_OFF_POLICY, learning_starts=32, train_freq=4, gradient_steps=2)
    small.pop("seed")
    together = CompiledOffPolicy("Pendulum", "sac", seeds=[0, 1], **small)
    together.fit(96, rounds_per_call=24)
    for index, seed in enumerate([0, 1]):
        alone = CompiledOffPolicy("Pendulum", "sac", seeds=seed, **small)
        alone.fit(96, rounds_per_call=24)
        leaves = list(zip(_leaves(together.seed_state(index)), _leaves(alone.seed_state(0))))
        for (path, a), (_, b) in leaves:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=path)
    assert not np.allclose(together.weights(0)[0], together.weights(1)[0])


@pytest.mark.slow  # 20 s: the loop's compilation (the DQN round above is the fast tier's check)
@pytest.mark.backend
@pytest.mark.parametrize("expected", [False, True])
def test_a_sarsa_round_is_the_same_through_the_compiled_loop_and_the_agent(expected):
    """SARSA's round (its target from the next actions taken, or Expected SARSA's from the
    Boltzmann policy) runs on the agent's learner in both loops: `SARSA._train_round`'s batch
    layout, the same numbers."""
    from kerasrl.compiled.sarsa import CompiledSARSA

    loop = CompiledSARSA("CartPole", seeds=0, expected=expected, n_envs=4, n_steps=4,
                         gradient_steps=3, hidden_sizes=(16,))
    state = backend.to_tensors(loop.seed_state(0))
    rng = np.random.default_rng(0)
    rollout = {"observations": rng.normal(size=(4, 4, 4)), "next_observations": rng.normal(size=(4, 4, 4)),
               "actions": rng.integers(0, 2, (4, 4)), "next_actions": rng.integers(0, 2, (4, 4)),
               "rewards": np.ones((4, 4)), "terminated": (rng.random((4, 4)) < 0.2),
               "rates": np.full((4, 4), 0.8)}
    rollout = {k: v.astype(np.int32 if "actions" in k else np.float32) for k, v in rollout.items()}
    learning_rate, tau = np.float32(1e-3), np.float32(1.0)
    compiled, _ = backend.to_numpy(backend.compile(lambda s, r: loop._train(s["learner"], r, learning_rate, tau))(
        state, backend.to_tensors(rollout)))
    batches = backend.to_numpy(backend.compile(lambda r: loop._batch(r, 3))(backend.to_tensors(rollout)))
    assert batches["temperature"].shape == (3, 16) and np.all(batches["temperature"] == np.float32(0.8))
    loop.learner.load_state(backend.to_numpy(state["learner"]))
    loop.learner.train(batches, learning_rate, tau)
    for (path, a), (_, b) in zip(_leaves(compiled), _leaves(backend.to_numpy(loop.learner.state))):
        if backend.NAME == "jax":
            np.testing.assert_array_equal(a, b, err_msg=path)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=path)


@pytest.mark.slow
@pytest.mark.backend
def test_sarsa_fit_on_an_ops_env_runs_the_compiled_loop_and_learns_cartpole():
    """`kerasrl.SARSA(...).fit` on the keras.ops CartPole runs the compiled loop at the agent's
    defaults. Measured (JAX): two seeds trained together at 500 and 500 after 100k steps."""
    import kerasrl

    agent = kerasrl.SARSA("kerasrl/OpsCartPole-v1", seed=0)
    agent.fit(100_000, progress=False)
    assert agent.loop.compiled_streams is not None
    assert agent.evaluate(episodes=20)["mean_return"] >= 450
