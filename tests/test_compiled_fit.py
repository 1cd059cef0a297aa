"""`Agent.fit` runs the compiled loop by itself on a keras.ops env (kerasrl.compiled.engine): the
agent's own model and state, episodes booked as the Python loop books them, exact step counts,
chunked and resumed runs equal to one run, and the Python loop with one INFO line where the
compiled one cannot run."""

from __future__ import annotations

import logging

import keras
import numpy as np
import pytest

import kerasrl
from kerasrl import backend

OPS_CARTPOLE = "kerasrl/OpsCartPole-v1"
TINY = dict(learning_starts=64, train_freq=8, gradient_steps=2, batch_size=16, buffer_size=500,
            target_update_interval=50, n_envs=2, seed=3)


class QNet(keras.Model):
    """As users write them: subclassed, no `training` argument, not registered with Keras."""

    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(32, activation="relu")
        self.out = keras.layers.Dense(2)

    def call(self, x):
        return self.out(self.hidden(x))


def python_loop_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kerasrl" and "Python loop" in r.getMessage()]


def test_fit_on_an_ops_env_runs_the_compiled_loop_on_the_agents_model(caplog):
    caplog.set_level(logging.INFO, logger="kerasrl")
    agent = kerasrl.DQN(OPS_CARTPOLE, model=QNet(), **TINY)
    model = agent.model
    history = agent.fit(1_010, progress=False)  # 63 rounds of 16 steps, then 1 vector step of one
    assert agent.loop.compiled_streams is not None and python_loop_lines(caplog) == []
    assert agent.num_timesteps == 1_010
    # The rounds ending after learning_starts (at env steps 80, 96, ..., 1008) train twice each.
    assert agent.n_updates == 2 * ((1_008 - 80) // 16 + 1)
    episodes = history.episodes
    assert len(episodes) > 10 and all(e["return"] == e["length"] for e in episodes)  # CartPole: +1 a step
    steps = [e["step"] for e in episodes]
    assert steps == sorted(steps) and steps[-1] <= 1_010 and all(s % 2 == 0 for s in steps)
    # Every env step is in an episode or in a running one.
    assert sum(e["length"] for e in episodes) + agent.loop.episode_lengths.sum() == 1_010
    assert agent.model is model  # one copy: the user's model holds the trained weights
    for variable, value in zip(model.trainable_variables, backend.to_numpy(agent.learner.state["params"]["q"])):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(variable), value)
    assert np.isfinite(history.losses).all() and len(history.losses) > 0
    predictions = agent.predict(agent.loop.observations)
    assert predictions.shape == (2,)


@pytest.mark.slow_on_other_backends  # bit for bit on TensorFlow and PyTorch too (40 s there: CI time)
@pytest.mark.backend
@pytest.mark.parametrize("replay", [
    pytest.param({}, id="uniform"),
    # The priorities and the largest priority travel with the agent's buffer (its sum tree).
    pytest.param(dict(n_step_return=3, prioritized_replay=True), id="n_step_prioritized", marks=pytest.mark.slow)])
def test_runs_split_by_checkpoints_and_resumed_are_the_one_run(tmp_path, replay):
    one = kerasrl.DQN(OPS_CARTPOLE, **TINY, **replay)
    one.fit(800, progress=False)
    split = kerasrl.DQN(OPS_CARTPOLE, **TINY, **replay)
    split.fit(800, progress=False, checkpoint_every=300, checkpoint_dir=tmp_path / "ckpt")  # mid-round stops
    resumed = kerasrl.DQN.load(tmp_path / "ckpt" / "ckpt-000000300")
    resumed.fit(800, progress=False)
    for run in (split, resumed):
        assert run.num_timesteps == 800
        for a, b in zip(backend.to_numpy(one.learner.state["params"]["q"]),
                        backend.to_numpy(run.learner.state["params"]["q"])):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(one.buffer.observations, run.buffer.observations)
        if replay:
            rows = np.arange(500)
            np.testing.assert_array_equal(one.buffer.tree.leaves(rows), run.buffer.tree.leaves(rows))
            assert one.buffer.max_priority == run.buffer.max_priority > 1.0
        assert [e["step"] for e in run.history.episodes] == [e["step"] for e in one.history.episodes]
        for key in one.loop.compiled_streams:
            np.testing.assert_array_equal(one.loop.compiled_streams[key], run.loop.compiled_streams[key])


def test_the_python_loop_where_the_compiled_one_cannot_run_says_why_once(caplog):
    caplog.set_level(logging.INFO, logger="kerasrl")
    agent = kerasrl.DQN("CartPole-v1", **TINY)
    agent.fit(20, progress=False)
    agent.fit(40, progress=False)
    assert len(python_loop_lines(caplog)) == 1 and "not a keras.ops environment" in python_loop_lines(caplog)[0]
    assert agent.loop.compiled_streams is None and agent.num_timesteps == 40
    caplog.clear()
    normalized_sac = kerasrl.SAC("kerasrl/OpsPendulum-v1", normalize_observations=True, n_envs=2, seed=3)
    normalized_sac.fit(20, progress=False)  # random warm-up steps only
    assert "normalize_observations=True" in python_loop_lines(caplog)[0]
    assert normalized_sac.loop.compiled_streams is None
    with pytest.raises(ValueError, match="normalize_observations=True"):
        normalized_sac.fit(40, progress=False, engine="compiled")
    cem = kerasrl.CEM(OPS_CARTPOLE, n_envs=2)
    with pytest.raises(ValueError, match="CEM has no compiled loop yet: it scores a population"):
        cem.fit(32, progress=False, engine="compiled")
    batch_norm = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.BatchNormalization(),
                                   keras.layers.Dense(2)])
    normalized = kerasrl.PPO(OPS_CARTPOLE, model=batch_norm, n_envs=2, n_steps=16, batch_size=16)
    with pytest.raises(ValueError, match="batch norm"):
        normalized.fit(32, progress=False, engine="compiled")


def test_short_learning_check_dqn_on_ops_cartpole():
    """RL-Zoo CartPole settings, a smaller network, 20,000 steps (about 6 s). Measured on seeds 0-5:
    the last 100 training episodes average 91 to 173 steps (random play: about 22)."""
    agent = kerasrl.DQN(OPS_CARTPOLE, learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
                        learning_starts=1000, target_update_interval=10, train_freq=256, gradient_steps=128,
                        exploration_fraction=0.16, exploration_final_eps=0.04, hidden_sizes=(64, 64), seed=0)
    history = agent.fit(20_000, progress=False)
    assert agent.loop.compiled_streams is not None
    assert history.mean_return(last=100) >= 50, history.mean_return(last=100)


@pytest.mark.slow  # about 15 s on JAX (the fast tier runs one round of it: tests/test_one_definition.py)
def test_dqn_with_n_step_returns_and_prioritized_replay_learns_in_the_compiled_loop(caplog):
    """The short check above with `n_step_return=3` and `prioritized_replay=True`: `fit` runs them
    compiled (no Python-loop line). Measured on JAX, seeds 0-11 at 20,000 steps: the last 100
    training episodes average 136 to 180 steps on 11 seeds and 53 on seed 3 (random play: about 22)."""
    caplog.set_level(logging.INFO, logger="kerasrl")
    agent = kerasrl.DQN(OPS_CARTPOLE, learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
                        learning_starts=1000, target_update_interval=10, train_freq=256, gradient_steps=128,
                        exploration_fraction=0.16, exploration_final_eps=0.04, hidden_sizes=(64, 64), seed=0,
                        n_step_return=3, prioritized_replay=True)
    history = agent.fit(20_000, progress=False)
    assert agent.loop.compiled_streams is not None and python_loop_lines(caplog) == []
    assert agent.buffer.max_priority > 1.0  # priorities came back from the loop
    assert history.mean_return(last=100) >= 100, history.mean_return(last=100)


@pytest.mark.slow_on_other_backends  # one seed after another there: the same check, three times the time
@pytest.mark.backend
def test_seeds_trained_together_are_each_the_run_of_its_own_fit(tmp_path):
    together = [kerasrl.DQN(OPS_CARTPOLE, **dict(TINY, seed=seed)) for seed in (3, 4, 5)]
    histories = kerasrl.fit_seeds(together, 600, progress=False, log_dirs=[tmp_path / f"seed-{s}" for s in (3, 4, 5)])
    alone = kerasrl.DQN(OPS_CARTPOLE, **dict(TINY, seed=4))
    alone.fit(600, progress=False)
    assert [a.num_timesteps for a in together] == [600] * 3
    for a, b in zip(backend.to_numpy(together[1].learner.state["params"]["q"]),
                    backend.to_numpy(alone.learner.state["params"]["q"])):
        np.testing.assert_array_equal(a, b)
    assert histories[1].episodes == alone.history.episodes
    assert histories[0].episodes != histories[1].episodes  # their own runs
    assert (tmp_path / "seed-5" / "episodes.csv").read_text().count("\n") == len(histories[2].episodes) + 1
    with pytest.raises(ValueError, match=r"differs from agent 0's in \['batch_size'\]"):
        kerasrl.fit_seeds([kerasrl.DQN(OPS_CARTPOLE, **TINY), kerasrl.DQN(OPS_CARTPOLE, **dict(TINY, seed=9,
                                                                                              batch_size=8))], 100)


def test_fit_seeds_refuses_what_is_not_one_configuration_of_agents_naming_it():
    # Each refusal before any step; the algorithm is checked before the seeds (two agents of other
    # algorithms both at seed 0 were told "the seeds must differ"), and a non-agent is named
    # (was "'int' object has no attribute 'config'").
    dqn = kerasrl.DQN(OPS_CARTPOLE, **TINY)
    refusals = [
        ([], ValueError, "fit_seeds needs at least one agent."),
        ([dqn, 2], TypeError, r"fit_seeds takes kerasrl agents \(e.g. \[kerasrl.PPO\(env, seed=s\) for s in "
                              r"range\(8\)\]\); item 1 is 2 \(int\)."),
        ([dqn, kerasrl.PPO(OPS_CARTPOLE, seed=TINY["seed"])], ValueError,
         "agent 1 is a PPO on kerasrl/OpsCartPole-v1, agent 0 a DQN on kerasrl/OpsCartPole-v1; train one"),
        ([dqn, kerasrl.DQN(OPS_CARTPOLE, **TINY)], ValueError, r"the agents' seeds must differ, got \[(\d+), \1\]"),
    ]
    for agents, error, message in refusals:
        with pytest.raises(error, match=message):
            kerasrl.fit_seeds(agents, 100, progress=False)
    assert dqn.num_timesteps == 0


ZOO_PPO = dict(n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=10, ent_coef=0.0,
               learning_rate=1e-3, lr_schedule="linear", clip_range=0.2, clip_range_schedule="linear")


@pytest.mark.slow_on_other_backends
@pytest.mark.backend
def test_ppo_fit_on_an_ops_env_runs_the_compiled_loop_and_learns():
    """RL-Zoo CartPole settings (10 epochs): 48 rollouts in compiled calls, then 13 vector steps
    of a 49th in the Python loop (a rollout is whole in the compiled loop). Measured on seeds 0-4:
    the last 30 training episodes average 172 to 231 steps (random play: about 22)."""
    agent = kerasrl.PPO(OPS_CARTPOLE, seed=0, **ZOO_PPO)
    history = agent.fit(12_392, progress=False)
    assert agent.loop.compiled_streams is not None
    assert agent.num_timesteps == 12_392 and agent.buffer.position == 13  # 13 vector steps of 8 envs
    assert agent.n_updates == 48 * 10  # one minibatch of 256 per epoch
    assert sum(e["length"] for e in history.episodes) + agent.loop.episode_lengths.sum() == 12_392
    assert history.mean_return(last=30) >= 100, history.mean_return(last=30)
    # The figures of the Python loop's updates (docs/diagnostics.md), per compiled call.
    python_loop = kerasrl.PPO("CartPole-v1", seed=0, **dict(ZOO_PPO, n_steps=4, batch_size=32))
    python_loop.fit(32, progress=False)
    assert set(python_loop.history.updates[-1]) <= set(history.updates[-1])
    last = history.updates[-1]
    assert 0.0 < last["entropy"] < np.log(2) and 0.0 <= last["clip_fraction"] <= 1.0
    assert abs(last["approx_kl"]) < 0.1 and last["explained_variance"] <= 1.0
    assert last["gradient_steps"] == 10 and 0.0 < last["clip_range"] < 0.2
    for variable, value in zip(agent.model.trainable_variables,
                               backend.to_numpy(agent.learner.state["params"]["actor"])):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(variable), value)


@pytest.mark.slow  # 30-50 s on this machine
def test_normalized_ppo_fit_on_an_ops_env_runs_the_compiled_loop_and_learns(caplog, tmp_path):
    """Observation and reward normalization in the compiled loop (RL-Zoo CartPole settings as
    above): `fit` picks it, the statistics it carries are the agent's after the fit (every step
    folded in once, the last 13 vector steps' in the Python loop), and it learns. Measured on
    seeds 0-4: the last 30 training episodes average 145 to 266 steps. A run split by a
    checkpoint at a rollout's end and resumed is the one run, statistics included."""
    caplog.set_level(logging.INFO, logger="kerasrl")
    normalized = dict(ZOO_PPO, normalize_observations=True, normalize_reward=True, target_kl=0.05)
    agent = kerasrl.PPO(OPS_CARTPOLE, seed=0, **normalized)
    history = agent.fit(12_392, progress=False)
    assert agent.loop.compiled_streams is not None and python_loop_lines(caplog) == []
    assert agent.obs_rms.count == pytest.approx(12_392) and agent.return_rms.count == pytest.approx(12_392)
    assert agent.policy.obs_rms is agent.obs_rms and (agent.obs_rms.var < 0.9).all()  # moved from 1
    assert history.mean_return(last=30) >= 100, history.mean_return(last=30)

    one = kerasrl.PPO(OPS_CARTPOLE, seed=1, **normalized)
    one.fit(1_024, progress=False)
    split = kerasrl.PPO(OPS_CARTPOLE, seed=1, **normalized)
    split.fit(1_024, progress=False, checkpoint_every=512, checkpoint_dir=tmp_path / "ckpt")
    resumed = kerasrl.PPO.load(tmp_path / "ckpt" / "ckpt-000000512")
    resumed.fit(1_024, progress=False)
    for run in (split, resumed):
        for a, b in zip(backend.to_numpy(one.learner.state["params"]["actor"]),
                        backend.to_numpy(run.learner.state["params"]["actor"])):
            np.testing.assert_array_equal(a, b)
        statistics = keras.tree.flatten(one.running_statistics())
        assert len(statistics) == 7
        for a, b in zip(statistics, keras.tree.flatten(run.running_statistics())):
            np.testing.assert_array_equal(a, b)


SNAKE_TINY = dict(learning_starts=32, train_freq=4, gradient_steps=1, batch_size=8, buffer_size=200, target_update_interval=16,
                  n_envs=2, seed=0)


# 29 s (it compiles the Conv2D network into the compiled loop, the slow path it is about); the fast
# tier checks the rule itself (tests/agents/test_unrolled_steps.py, one rule for the learners and
# `CompiledEngine.slower_here`).
@pytest.mark.slow
def test_auto_takes_the_python_loop_for_keras_convolutions_on_xla_cpu(caplog):
    """Conv2D's weight gradient is ~10x slower inside XLA's CPU loops (CompiledEngine.slower_here):
    "auto" runs such a model in the Python loop and says why; PatchConv2D runs compiled."""
    from kerasrl.envs.snake_networks import snake_fast_network, snake_small_network

    caplog.set_level(logging.INFO, logger="kerasrl")
    conv = kerasrl.DQN("kerasrl/OpsSnake-v0", model=snake_small_network((9, 9, 2)), **SNAKE_TINY)
    conv.fit(40, progress=False)
    if backend.COMPILED_LOOPS and backend.on_cpu():  # JAX, TensorFlow (XLA's CPU backend)
        assert len(python_loop_lines(caplog)) == 1 and "Conv2D layers" in python_loop_lines(caplog)[0]
        assert "PatchConv2D" in python_loop_lines(caplog)[0] and conv.loop.compiled_streams is None
        conv.fit(48, progress=False, engine="compiled")  # insisting runs it
        assert conv.loop.compiled_streams is not None and conv.num_timesteps == 48
    else:  # PyTorch's compiled pieces keep its own convolutions; an accelerator's XLA too
        assert python_loop_lines(caplog) == [] and conv.loop.compiled_streams is not None
    caplog.clear()
    patches = kerasrl.DQN("kerasrl/OpsSnake-v0", model=snake_fast_network((9, 9, 2)), **SNAKE_TINY)
    patches.fit(40, progress=False)
    assert python_loop_lines(caplog) == [] and patches.loop.compiled_streams is not None


@pytest.mark.slow  # three TD3 agents' compiled loops (the fit parts of a split run compile apart)
@pytest.mark.backend
def test_td3_runs_split_by_checkpoints_and_resumed_are_the_one_run(tmp_path):
    """TD3 on an ops env runs compiled (registry: compiled=) and splits as DQN does: mid-round
    stops, a checkpoint and a resume give the run made in one fit."""
    small = dict(learning_starts=64, batch_size=16, buffer_size=512, hidden_sizes=(16,), train_freq=4,
                 gradient_steps=2, seed=0)
    one = kerasrl.TD3("kerasrl/OpsPendulum-v1", **small)
    one.fit(500, progress=False)
    split = kerasrl.TD3("kerasrl/OpsPendulum-v1", **small)
    split.fit(500, progress=False, checkpoint_every=250, checkpoint_dir=tmp_path / "ckpt")  # mid-round stops
    resumed = kerasrl.TD3.load(tmp_path / "ckpt" / "ckpt-000000250")
    resumed.fit(500, progress=False)
    assert one.loop.compiled_streams is not None and one.n_updates == 2 * ((500 - 64) // 4)
    for run in (split, resumed):
        assert run.num_timesteps == 500 and run.n_updates == one.n_updates
        for name in ("actor", "critic_1"):
            for a, b in zip(backend.to_numpy(one.learner.state["params"][name]),
                            backend.to_numpy(run.learner.state["params"][name])):
                np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(one.buffer.actions, run.buffer.actions)
        assert [e["return"] for e in run.history.episodes] == [e["return"] for e in one.history.episodes]
