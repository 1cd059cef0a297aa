"""n-step returns and prioritized replay against plain references (pure numpy)."""

from __future__ import annotations

import numpy as np
import pytest

from kerasrl.buffers import PrioritizedReplayBuffer, ReplayBuffer, SumTree


def fill(buffer, steps, n_envs, rng):
    """Random transitions with frequent terminations and truncations; returns what was added."""
    log = []
    for t in range(steps):
        obs = rng.standard_normal((n_envs, 2)).astype(np.float32)
        next_obs = rng.standard_normal((n_envs, 2)).astype(np.float32)
        rewards = rng.standard_normal(n_envs).astype(np.float32)
        terminated = rng.random(n_envs) < 0.15
        truncated = ~terminated & (rng.random(n_envs) < 0.1)
        buffer.add(obs, rng.integers(0, 3, n_envs), rewards, next_obs, terminated, truncated)
        log.append((obs, rewards, next_obs, terminated, truncated))
    return log


def reference_n_step(log, t, e, n, gamma):
    """Plain loop: up to n rewards of env e from step t, stopping at an episode end or the newest
    step. Returns (return, bootstrap observation, discount)."""
    total, scale = 0.0, 1.0
    for k in range(n):
        if t + k >= len(log):
            break
        _, rewards, next_obs, terminated, truncated = log[t + k]
        total += scale * float(rewards[e])
        scale *= gamma
        last_next = next_obs[e]
        if terminated[e]:
            return total, last_next, 0.0
        if truncated[e]:
            break
    return total, last_next, scale


@pytest.mark.parametrize("n_step", [1, 3, 5])
def test_n_step_returns_match_a_plain_loop(n_step):
    rng = np.random.default_rng(n_step)
    buffer = ReplayBuffer(capacity=3 * 400, n_envs=3, obs_shape=(2,), gamma=0.9, n_step=n_step)
    log = fill(buffer, 300, 3, rng)  # not yet wrapped: every row is the step of the same index
    rows = rng.integers(0, 300, 500)
    envs = rng.integers(0, 3, 500)
    batch = buffer.gather(rows, envs)
    for i, (t, e) in enumerate(zip(rows, envs)):
        ret, bootstrap, discount = reference_n_step(log, t, e, n_step, 0.9)
        assert batch["rewards"][i] == pytest.approx(ret, rel=1e-5, abs=1e-5)
        assert batch["discounts"][i] == pytest.approx(discount, rel=1e-6)
        np.testing.assert_array_equal(batch["next_observations"][i], bootstrap)


def test_n_step_window_stops_at_the_newest_step_after_wrapping():
    rng = np.random.default_rng(0)
    buffer = ReplayBuffer(capacity=50, n_envs=1, obs_shape=(2,), gamma=0.9, n_step=4)
    log = fill(buffer, 130, 1, rng)  # wrapped: rows hold steps 100..129
    newest_row = (buffer.position - 1) % buffer.capacity_per_env
    batch = buffer.gather(np.array([newest_row]), np.array([0]))
    ret, bootstrap, discount = reference_n_step(log, 129, 0, 4, 0.9)
    assert batch["rewards"][0] == pytest.approx(ret)
    assert batch["discounts"][0] == pytest.approx(discount)
    np.testing.assert_array_equal(batch["next_observations"][0], bootstrap)


def test_sum_tree_samples_in_proportion_to_priority():
    tree = SumTree(5)
    priorities = np.array([1.0, 0.0, 3.0, 6.0, 0.0])
    tree.update(np.arange(5), priorities)
    assert tree.total == pytest.approx(10.0)
    masses = np.random.default_rng(0).uniform(0, tree.total, 100_000)
    counts = np.bincount(tree.find(masses), minlength=5) / len(masses)
    np.testing.assert_allclose(counts, priorities / priorities.sum(), atol=0.01)
    tree.update(np.array([3, 3]), np.array([2.0, 0.0]))  # duplicates: the last value wins
    assert tree.total == pytest.approx(4.0)


def test_prioritized_sampling_weights_and_updates():
    rng = np.random.default_rng(0)
    buffer = PrioritizedReplayBuffer(capacity=8, n_envs=2, obs_shape=(2,), alpha=0.5)
    fill(buffer, 4, 2, rng)
    flat = np.arange(8)
    td = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    buffer.update_priorities(flat, td)
    buffer.beta = 0.4
    p = (np.abs(td) + buffer.eps) ** 0.5
    probabilities = p / p.sum()
    rows, envs = buffer.sample_indices(200_000, rng)
    freq = np.bincount(rows * 2 + envs, minlength=8) / 200_000
    np.testing.assert_allclose(freq, probabilities, atol=0.005)
    batch = buffer.gather(np.array([0, 3]), np.array([1, 1]))  # flat 1 and 7
    expected = (8 * probabilities[[1, 7]]) ** -0.4
    np.testing.assert_allclose(batch["weights"], expected / expected.max(), rtol=1e-5)
    assert buffer.max_priority == pytest.approx(7.0 + buffer.eps)


def test_new_transitions_get_the_highest_priority_seen():
    rng = np.random.default_rng(0)
    buffer = PrioritizedReplayBuffer(capacity=8, n_envs=1, obs_shape=(2,), alpha=1.0)
    fill(buffer, 2, 1, rng)
    buffer.update_priorities(np.array([0, 1]), np.array([0.5, 9.0]))
    fill(buffer, 1, 1, rng)
    assert buffer.tree.leaves(np.array([2]))[0] == pytest.approx(9.0 + buffer.eps)


def test_invalid_settings_are_refused():
    with pytest.raises(ValueError, match="alpha must be in"):
        PrioritizedReplayBuffer(capacity=8, n_envs=1, obs_shape=(2,), alpha=1.5)
    with pytest.raises(ValueError, match="n_step must be at least 1"):
        ReplayBuffer(capacity=8, n_envs=1, obs_shape=(2,), n_step=0)
