"""GAE against a plain reference written differently: per env, per step, a forward sum of TD errors."""

from __future__ import annotations

import numpy as np
import pytest

from kerasrl.returns import gae


def reference_gae(rewards, values, next_values, terminated, truncated, gamma, lam):
    """A_t = sum_k (gamma * lam)^k delta_{t+k}, summed forward until the episode or rollout ends."""
    T, N = rewards.shape
    advantages = np.zeros((T, N))
    for env in range(N):
        for t in range(T):
            total, weight = 0.0, 1.0
            for k in range(t, T):
                next_value = 0.0 if terminated[k, env] else next_values[k, env]
                delta = rewards[k, env] + gamma * next_value - values[k, env]
                total += weight * delta
                if terminated[k, env] or truncated[k, env]:
                    break
                weight *= gamma * lam
            advantages[t, env] = total
    return advantages, advantages + values


def random_rollout(rng, T=40, N=5, p_end=0.1):
    rewards = rng.standard_normal((T, N))
    values = rng.standard_normal((T, N))
    next_values = rng.standard_normal((T, N))
    ends = rng.random((T, N)) < p_end
    terminated = ends & (rng.random((T, N)) < 0.5)
    truncated = ends & ~terminated
    return rewards, values, next_values, terminated, truncated


@pytest.mark.parametrize("gamma, lam", [(0.99, 0.95), (0.98, 0.8), (0.9, 0.0), (1.0, 1.0)])
def test_gae_matches_per_step_reference(gamma, lam):
    rng = np.random.default_rng(0)
    r, v, nv, term, trunc = random_rollout(rng)
    assert term.any() and trunc.any()
    adv, ret = gae(r, v, nv, term, term | trunc, gamma, lam)
    ref_adv, ref_ret = reference_gae(r, v, nv, term, trunc, gamma, lam)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-5)
    assert adv.dtype == np.float32 and ret.dtype == np.float32


def test_truncation_bootstraps_from_final_value_and_termination_does_not():
    # One env, three steps; the episode ends after step 1, the next begins at step 2.
    r = np.array([[1.0], [1.0], [1.0]])
    v = np.zeros((3, 1))
    nv = np.array([[0.0], [10.0], [5.0]])  # V(final obs) = 10 after step 1; V(after rollout) = 5
    ends = np.array([[False], [True], [False]])
    gamma = 0.5
    adv_trunc, _ = gae(r, v, nv, np.zeros_like(ends), ends, gamma, 1.0)
    adv_term, _ = gae(r, v, nv, ends, ends, gamma, 1.0)
    # Truncated: step 1 bootstraps 1 + 0.5 * 10; step 0 adds its own reward; step 2 bootstraps 5.
    np.testing.assert_allclose(adv_trunc[:, 0], [1 + 0.5 * 6.0, 6.0, 1 + 0.5 * 5.0])
    # Terminated: nothing after the last reward, and nothing crosses into the next episode.
    np.testing.assert_allclose(adv_term[:, 0], [1.5, 1.0, 3.5])


def test_lambda_one_gives_monte_carlo_returns_and_zero_gives_td_errors():
    rng = np.random.default_rng(1)
    r, v, nv, term, trunc = random_rollout(rng, T=10, N=2, p_end=0.0)
    nv[:-1] = v[1:]  # within an episode, V(s_{t+1}) is the next row's value
    _, ret = gae(r, v, nv, term, term | trunc, 0.9, 1.0)
    mc = np.zeros_like(r)
    running = nv[-1]
    for t in range(9, -1, -1):
        running = r[t] + 0.9 * running
        mc[t] = running
    np.testing.assert_allclose(ret, mc, rtol=1e-5, atol=1e-5)
    adv0, _ = gae(r, v, nv, term, term | trunc, 0.9, 0.0)
    np.testing.assert_allclose(adv0, r + 0.9 * nv - v, rtol=1e-5, atol=1e-5)


@pytest.mark.backend
def test_the_compiled_loops_gae_in_keras_ops_is_the_numpy_gae():
    """The compiled loop's GAE (keras.ops, float32) and the Python loop's (numpy, float64) are
    one definition written twice: held together on random rollouts with every kind of ending."""
    from kerasrl import backend
    from kerasrl.returns import gae_ops

    rng = np.random.default_rng(0)
    shape = (64, 8)
    rewards, values, next_values = (rng.normal(size=shape).astype(np.float32) for _ in range(3))
    episode_ends = (rng.random(shape) < 0.1).astype(np.float32)
    terminated = episode_ends * (rng.random(shape) < 0.5)
    expected = gae(rewards, values, next_values, terminated, episode_ends, 0.99, 0.95)
    got = backend.to_numpy(backend.compile(
        lambda *a: gae_ops(*a, 0.99, 0.95))(*backend.to_tensors(
            [rewards, values, next_values, terminated.astype(np.float32), episode_ends])))
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert np.abs(expected[0]).max() > 1.0  # advantages that accumulate over many steps


@pytest.mark.backend
def test_the_compiled_loops_n_step_returns_in_keras_ops_are_the_replay_buffers():
    """The compiled DQN loop's n-step returns (keras.ops, float32) and the replay buffer's (numpy,
    float64) on the same ring: sums cut by terminations (no bootstrap) and truncations (bootstrap
    from their own final observation), and at the newest row, in a full ring and a wrapped one."""
    from kerasrl import backend
    from kerasrl.returns import n_step_returns, n_step_returns_ops

    rng = np.random.default_rng(0)
    T, N, B, gamma = 40, 3, 600, 0.9
    rewards = rng.normal(size=(T, N)).astype(np.float32)
    ends = rng.random((T, N)) < 0.2
    terminated = ends & (rng.random((T, N)) < 0.5)
    truncated = ends & ~terminated
    rows, envs = rng.integers(0, T, B), rng.integers(0, N, B)
    flags = [x.astype(np.float32) for x in (terminated, truncated)]
    for n_step in (3, 5):
        ops_returns = backend.compile(lambda *a: n_step_returns_ops(*a, n_step, gamma))
        for newest in (T - 1, 17):  # rows in order; a wrapped ring whose newest row is row 17
            expected = n_step_returns(rewards, terminated, truncated, rows, envs, newest, n_step, gamma)
            got = backend.to_numpy(ops_returns(*backend.to_tensors(
                [rewards, *flags, rows.astype(np.int32), envs.astype(np.int32), np.int32(newest)])))
            np.testing.assert_array_equal(got[0], expected[0])
            np.testing.assert_allclose(got[1], expected[1], rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(got[2], expected[2], rtol=1e-6)
            discounts = expected[2]
            assert (discounts == 0).any() and np.isclose(discounts, gamma ** n_step).any()
            assert ((discounts > 0) & ~np.isclose(discounts, gamma ** n_step)).any()  # cut short
