"""The compiled whole loop (kerasrl.compiled): seeds trained together are the seeds trained alone,
a short learning check, the errors; the RL-Zoo learning bars in the slow tier."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from kerasrl import backend
from kerasrl.compiled import CompiledDQN, CompiledPPO
from kerasrl.compiled.common import parse_seeds
from kerasrl.envs.ops.cartpole import CartPole
from state_trees import leaves

TINY_DQN = dict(learning_starts=32, train_freq=4, gradient_steps=2, batch_size=16, buffer_size=256,
                target_update_interval=40, hidden_sizes=(16,))
ZOO_DQN = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
               target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
               exploration_final_eps=0.04, hidden_sizes=(256, 256))
ZOO_PPO = dict(n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
               learning_rate=1e-3, lr_schedule="linear", clip_range=0.2, clip_range_schedule="linear")


@pytest.mark.slow_on_other_backends
@pytest.mark.backend
def test_seeds_trained_together_are_the_seeds_trained_alone_and_resume_exactly(tmp_path):
    together = CompiledDQN("CartPole", seeds=[3, 4], **TINY_DQN)
    together.fit(160, rounds_per_call=20, callback=lambda agent, record: False)  # stops after one call
    assert together.num_timesteps == 80
    together.save(tmp_path / "run.npz")
    resumed = CompiledDQN("CartPole", seeds=[3, 4], **TINY_DQN)
    resumed.load(tmp_path / "run.npz")
    resumed.fit(160, rounds_per_call=20)
    assert resumed.num_timesteps == 160 and len(resumed.history) == 1
    # Resumed exactly: bit for bit the run made in one go (docs/ops_envs.md).
    straight = CompiledDQN("CartPole", seeds=[3, 4], **TINY_DQN)
    straight.fit(160, rounds_per_call=20)
    for index in (0, 1):
        for a, b in zip(resumed.weights(index), straight.weights(index)):
            np.testing.assert_array_equal(a, b)
    # The second seed alone, straight through (the first shares the model's own initial weights,
    # so is the easier case).
    alone = CompiledDQN("CartPole", seeds=4, **TINY_DQN)
    alone.fit(160, rounds_per_call=20)
    for a, b in zip(resumed.weights(1), alone.weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert resumed.history[-1]["episodes"][1] == alone.history[-1]["episodes"] > 0
    np.testing.assert_allclose(resumed.history[-1]["loss"][1], alone.history[-1]["loss"], rtol=1e-5)
    # The seeds are their own runs: different weights.
    assert not np.allclose(resumed.weights(0)[0], resumed.weights(1)[0])
    with pytest.raises(ValueError, match="seeds"):
        CompiledDQN("CartPole", seeds=[3, 5], **TINY_DQN).load(tmp_path / "run.npz")


@pytest.mark.parametrize("make", [
    lambda seeds: CompiledDQN("CartPole", seeds=seeds, **dict(TINY_DQN, n_envs=3)),
    lambda seeds: CompiledPPO("CartPole", seeds=seeds, n_envs=3, n_steps=8, batch_size=8),
], ids=["dqn", "ppo"])
def test_many_seeds_are_set_up_at_once_as_each_seed_alone(make):
    """The many-seed setup (one reset of every seed's games, weights drawn with numpy in one pass,
    one optimizer state) gives each seed exactly the runner state it has alone."""
    together = make([7, 2])
    for index, seed in enumerate([7, 2]):
        alone = dict(leaves(make(seed).seed_state(0)))
        mine = dict(leaves(together.seed_state(index)))
        assert mine.keys() == alone.keys()
        for key in alone:
            assert mine[key].dtype == alone[key].dtype and mine[key].shape == alone[key].shape, key
            np.testing.assert_array_equal(mine[key], alone[key], err_msg=f"seed {seed}: {key}")
    weights = together.weights
    assert not np.array_equal(weights(0)[0], weights(1)[0])  # the seeds draw their own weights


@pytest.mark.slow_on_other_backends
@pytest.mark.backend
def test_short_learning_check_ppo_cartpole():
    agent = CompiledPPO("CartPole", seeds=0, **dict(ZOO_PPO, n_epochs=10))
    history = agent.fit(12_288, rounds_per_call=12)  # 48 rollouts, 4 calls
    first, last = history[0]["mean_return"], history[-1]["mean_return"]
    # A random policy averages about 22 steps; the zoo settings pass 100 within these steps.
    assert last >= 100 and last >= 3 * first, [r["mean_return"] for r in history]
    assert np.isfinite(history[-1]["loss"])


def test_a_fits_shorter_last_call_runs_the_same_compiled_function():
    """The round count is an input of the compiled call (JAX, TensorFlow): a fit of 7 rounds in
    calls of 3 (3, 3, 1) compiles one function, and gives the run of 7 calls of one round.
    (PyTorch's call is a Python loop over compiled pieces: one per count, nothing compiled.)"""
    tiny = dict(TINY_DQN, learning_starts=8)
    split = CompiledDQN("CartPole", seeds=0, **tiny)
    split.fit(7 * 4, rounds_per_call=3)
    assert len(split._calls) == (1 if backend.COMPILED_LOOPS else 2)
    assert [r["timesteps"] for r in split.history] == [12, 24, 28]
    one_by_one = CompiledDQN("CartPole", seeds=0, **tiny)
    one_by_one.fit(7 * 4, rounds_per_call=1)
    for (path, a), (_, b) in zip(leaves(split.seed_state(0)), leaves(one_by_one.seed_state(0))):
        np.testing.assert_array_equal(a, b, err_msg=path)


@pytest.mark.parametrize("make", [
    lambda: CompiledDQN("CartPole", seeds=[0, 1], **dict(TINY_DQN, learning_starts=8, lr_schedule="linear",
                                                           exploration_fraction=0.5)),
    lambda: CompiledPPO("CartPole", seeds=0, n_envs=2, n_steps=8, batch_size=8, n_epochs=2,
                        lr_schedule="linear", clip_range_schedule="linear"),
], ids=["dqn", "ppo"])
def test_a_fit_continued_to_a_larger_total_reads_the_new_total_in_the_same_compiled_function(make):
    """The run's length, which epsilon, the learning rate and the clip range decay over, is an
    input of the compiled call (JAX, TensorFlow; PyTorch's traced pieces): `fit(48)` then
    `fit(96)` compile one function, and its second call reads 96, as a function compiled afresh
    for 96 does."""
    staged, fresh = make(), make()
    for total in (48, 96):
        staged.fit(total, rounds_per_call=4)
        for compiled in ("_calls", "_pieces", "_chunks"):  # compiled (PyTorch: traced) anew for each total
            fresh.__dict__.get(compiled, {}).clear()
        fresh.fit(total, rounds_per_call=4)
    assert len(staged._calls) == 1
    assert staged.num_timesteps == fresh.num_timesteps == 96
    for (path, a), (_, b) in zip(leaves(staged.seed_state(0)), leaves(fresh.seed_state(0))):
        np.testing.assert_array_equal(a, b, err_msg=path)
    # The schedules did read the new total: a run planned at 96 from the start decays slower over
    # its first 48 steps than one that thought it ended there.
    planned = make()
    planned.fit(96, rounds_per_call=4)
    assert not np.array_equal(planned.weights(0)[0], staged.weights(0)[0])


def test_unsupported_settings_are_named():
    with pytest.raises(ValueError, match="discrete actions"):
        CompiledDQN("Pendulum")
    with pytest.raises(ValueError, match="'0-15'"):
        parse_seeds("0:15")
    with pytest.raises(ValueError, match="distinct"):
        parse_seeds([1, 1])
    assert parse_seeds("2-4") == [2, 3, 4] and parse_seeds("0,5-6") == [0, 5, 6]
    with pytest.raises(ValueError, match="'0,3,7'"):
        parse_seeds("4-2")
    from kerasrl.compiled import CompiledOffPolicy

    with pytest.raises(ValueError, match="normalize_observations=True"):
        CompiledOffPolicy("Pendulum", "sac", normalize_observations=True)
    with pytest.raises(ValueError, match="one-dimensional Box"):
        CompiledOffPolicy("CartPole", "td3")


class PeekingCartPole(CartPole):
    """An ops env that reads a tensor's value in Python: it runs eagerly, but cannot compile."""

    name = "PeekingCartPole"

    def step_env(self, state, action, params):
        obs, state, reward, terminated, truncated = super().step_env(state, action, params)
        if keras.ops.sum(reward) > 100:  # the line the error names
            reward = reward * 2
        return obs, state, reward, terminated, truncated


@pytest.mark.backend
def test_an_ops_env_that_reads_values_into_python_is_named_with_its_line():
    with pytest.raises(ValueError, match=r"PeekingCartPole.step cannot be compiled at .*test_compiled_loop.py:\d+ "
                                         r"\(if keras.ops.sum\(reward\) > 100:.*keras.ops.where"):
        CompiledDQN(PeekingCartPole(), **TINY_DQN)
    with pytest.raises(ValueError, match="PeekingCartPole.step cannot be compiled"):
        CompiledPPO(PeekingCartPole(), n_envs=2, n_steps=8, batch_size=16)


@pytest.mark.slow
@pytest.mark.backend
def test_dqn_zoo_cartpole_two_of_three_seeds_reach_475():
    """The Python loop's protocol (tests/agents/test_value_slow.py, RL-Zoo's EvalCallback): a
    20-episode greedy evaluation about every 10,000 steps (calls of 39 rounds of 256 steps); a seed
    reaches 475 when one of its evaluations does."""
    agent = CompiledDQN("CartPole", seeds=[0, 1, 2], **ZOO_DQN)
    evaluations = []
    agent.fit(50_000, rounds_per_call=39,
              callback=lambda loop, record: evaluations.append([loop.evaluate(i, n_episodes=20)[0] for i in range(3)]))
    best = np.max(evaluations, axis=0)
    assert sum(score >= 475 for score in best) >= 2, evaluations


@pytest.mark.slow
@pytest.mark.backend
def test_ppo_zoo_cartpole_reaches_475_on_at_least_five_of_six_seeds():
    """Measured on JAX (this machine): all six seeds at a 20-episode mean of 500 after 100k
    steps. The bar sits below that ceiling, one seed's slack for other machines' floats."""
    agent = CompiledPPO("CartPole", seeds=list(range(6)), **ZOO_PPO)
    agent.fit(100_000)
    scores = [agent.evaluate(i, n_episodes=20)[0] for i in range(6)]
    assert sum(score >= 475 for score in scores) >= 5, (scores, backend.NAME)


@pytest.mark.slow  # 10 to 16 minutes on JAX on this shared 2-core machine (20,000 env steps, 10,000 gradient steps)
@pytest.mark.backend
def test_td3_zoo_pendulum_through_the_compiled_loop_reaches_minus_300():
    """`kerasrl.TD3("kerasrl/OpsPendulum-v1").fit` at TD3Config's defaults (RL-Zoo's Pendulum-v1
    settings and budget, 20,000 steps) runs the whole loop compiled (registry: compiled=) and
    learns: measured on JAX, a 10-episode mean of -149 on seed 0 (its worst episode -249) and -118
    on seed 1 (-227)."""
    import kerasrl

    agent = kerasrl.TD3("kerasrl/OpsPendulum-v1", seed=0)
    agent.fit(20_000, progress=False)
    assert agent.loop.compiled_streams is not None  # the compiled loop ran it
    result = agent.evaluate(episodes=10)
    assert result["mean_return"] >= -300, (result, backend.NAME)


@pytest.mark.slow  # about 40 s per seed on JAX on this shared 2-core machine (50,000 env steps)
@pytest.mark.backend
@pytest.mark.parametrize("seed", [0, 1])
def test_naf_keras_rl_pendulum_through_the_compiled_loop_reaches_minus_300(seed):
    """NAF with keras-rl's naf_pendulum.py settings (the `pendulum-naf` preset: NAFConfig's
    defaults, Ornstein-Uhlenbeck exploration, rewards scaled by 1/100, 50,000 steps) on the ops
    Pendulum runs the whole loop compiled and learns: measured on JAX, 10-episode means of -167
    (seed 0) and -126 (seed 1); the Python loop on Gymnasium's Pendulum-v1: -129 and -144."""
    import kerasrl

    agent = kerasrl.NAF("kerasrl/OpsPendulum-v1", reward_scale=0.01, seed=seed)
    agent.fit(50_000, progress=False)
    assert agent.loop.compiled_streams is not None  # the compiled loop ran it
    result = agent.evaluate(episodes=10)
    assert result["mean_return"] >= -300, (result, backend.NAME)
