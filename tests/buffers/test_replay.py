"""The numpy replay ring: storage, wrap-around, sampling, discounts and saving (pure numpy)."""

import numpy as np
import pytest

from kerasrl.buffers.replay import ReplayBuffer

GAMMA = 0.9


def step_arrays(t, n_envs, obs_shape=(2,)):
    """Transition t of every env, with values that say which (t, env) they came from."""
    ids = t * 100 + np.arange(n_envs)
    obs = np.broadcast_to(ids.reshape(n_envs, *([1] * len(obs_shape))), (n_envs, *obs_shape))
    return dict(obs=obs.astype(np.float64), actions=ids % 3,
                rewards=ids.astype(np.float64), next_obs=obs + 0.5,
                terminated=np.zeros(n_envs, bool), truncated=np.zeros(n_envs, bool))


def fill(buffer, n_steps, start=0):
    for t in range(start, start + n_steps):
        buffer.add(**step_arrays(t, buffer.n_envs))


def test_add_and_len():
    buffer = ReplayBuffer(capacity=10, n_envs=2, obs_shape=(2,), gamma=GAMMA)
    assert len(buffer) == 0
    fill(buffer, 3)
    assert len(buffer) == 6
    np.testing.assert_array_equal(buffer.rewards[:3], [[0, 1], [100, 101], [200, 201]])
    np.testing.assert_array_equal(buffer.next_observations[1, 1], [101.5, 101.5])


def test_capacity_rounds_up_to_a_multiple_of_n_envs():
    buffer = ReplayBuffer(capacity=7, n_envs=2, obs_shape=(1,))
    assert buffer.capacity_per_env == 4
    with pytest.raises(ValueError, match="buffer_size"):
        ReplayBuffer(capacity=0, n_envs=1, obs_shape=(1,))


def test_ring_wraps_and_overwrites_the_oldest():
    buffer = ReplayBuffer(capacity=6, n_envs=2, obs_shape=(2,))
    fill(buffer, 3)
    assert buffer.full and buffer.position == 0 and len(buffer) == 6
    fill(buffer, 2, start=3)
    assert len(buffer) == 6  # never more than the capacity
    # Rows 0 and 1 now hold steps 3 and 4; row 2 still holds step 2 (the oldest kept).
    np.testing.assert_array_equal(buffer.rewards[:, 0], [300, 400, 200])
    stored = set(buffer.sample(500, np.random.default_rng(0))["rewards"].ravel().tolist())
    assert stored == {200, 201, 300, 301, 400, 401}


def test_sampling_before_wrap_returns_only_stored_rows():
    buffer = ReplayBuffer(capacity=100, n_envs=2, obs_shape=(2,))
    fill(buffer, 3)
    batch = buffer.sample(1000, np.random.default_rng(0))
    assert set(batch["rewards"].ravel().tolist()) == {0, 1, 100, 101, 200, 201}
    # Each sampled row is one whole transition: obs, next_obs and reward of the same (t, env).
    np.testing.assert_array_equal(batch["observations"][..., 0], batch["rewards"])
    np.testing.assert_array_equal(batch["next_observations"][..., 0], batch["rewards"] + 0.5)


def test_empty_buffer_cannot_be_sampled():
    buffer = ReplayBuffer(capacity=4, n_envs=1, obs_shape=(1,))
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(2, np.random.default_rng(0))


def test_discounts_zero_for_terminated_gamma_for_truncated():
    buffer = ReplayBuffer(capacity=6, n_envs=3, obs_shape=(1,), gamma=GAMMA)
    # env 0 dies, env 1 hits a time limit, env 2 goes on.
    buffer.add(np.zeros((3, 1)), np.zeros(3), np.array([0.0, 1.0, 2.0]), np.zeros((3, 1)),
               terminated=np.array([True, False, False]), truncated=np.array([False, True, False]))
    rows, envs = np.array([0, 0, 0]), np.array([0, 1, 2])
    batch = buffer.gather(rows, envs)
    np.testing.assert_array_equal(batch["discounts"], np.array([0.0, GAMMA, GAMMA], np.float32))
    sampled = buffer.sample(300, np.random.default_rng(1))
    by_env = dict(zip(sampled["rewards"].ravel().tolist(), sampled["discounts"].ravel().tolist()))
    assert by_env == {0.0: 0.0, 1.0: pytest.approx(GAMMA), 2.0: pytest.approx(GAMMA)}


def test_sample_dtypes():
    buffer = ReplayBuffer(capacity=8, n_envs=2, obs_shape=(3,), obs_dtype=np.uint8)
    for t in range(3):
        buffer.add(np.full((2, 3), t, np.uint8), np.array([1, 2]), np.array([0.5, 1.5]),
                   np.full((2, 3), t + 1, np.uint8), np.array([False, True]), np.array([False, False]))
    assert buffer.observations.dtype == np.uint8  # stored as given
    batch = buffer.sample(16, np.random.default_rng(0))
    assert batch["observations"].dtype == np.float32
    assert batch["next_observations"].dtype == np.float32
    assert batch["actions"].dtype == np.int32
    assert batch["rewards"].dtype == np.float32
    assert batch["discounts"].dtype == np.float32
    assert batch["weights"].dtype == np.float32
    np.testing.assert_array_equal(batch["weights"], 1.0)


def test_stacked_sampling_shape():
    buffer = ReplayBuffer(capacity=20, n_envs=2, obs_shape=(4, 3))
    for t in range(5):
        buffer.add(np.zeros((2, 4, 3)), np.zeros(2), np.zeros(2), np.zeros((2, 4, 3)),
                   np.zeros(2, bool), np.zeros(2, bool))
    batch = buffer.sample(8, np.random.default_rng(0), n_batches=3)
    assert batch["observations"].shape == (3, 8, 4, 3)
    assert batch["next_observations"].shape == (3, 8, 4, 3)
    for key in ("actions", "rewards", "discounts", "weights"):
        assert batch[key].shape == (3, 8), key


def test_state_dict_round_trip():
    buffer = ReplayBuffer(capacity=6, n_envs=2, obs_shape=(2,), gamma=GAMMA)
    fill(buffer, 4)  # wrapped: full, position 1
    state = {k: np.array(v) for k, v in buffer.state_dict().items()}
    assert all(isinstance(v, np.ndarray) for v in state.values())

    restored = ReplayBuffer(capacity=6, n_envs=2, obs_shape=(2,), gamma=GAMMA)
    restored.load_state_dict(state)
    assert len(restored) == len(buffer) and restored.position == 1 and restored.full
    a = buffer.sample(32, np.random.default_rng(5), n_batches=2)
    b = restored.sample(32, np.random.default_rng(5), n_batches=2)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    # The restored buffer goes on writing where the saved one would have.
    buffer.add(**step_arrays(9, 2))
    restored.add(**step_arrays(9, 2))
    np.testing.assert_array_equal(buffer.rewards, restored.rewards)


def test_load_state_dict_shape_mismatch():
    state = ReplayBuffer(capacity=6, n_envs=2, obs_shape=(2,)).state_dict()
    with pytest.raises(ValueError, match="observations"):
        ReplayBuffer(capacity=8, n_envs=2, obs_shape=(2,)).load_state_dict(state)
    with pytest.raises(ValueError, match="shape"):
        ReplayBuffer(capacity=6, n_envs=2, obs_shape=(3,)).load_state_dict(state)


def test_same_seed_same_samples():
    buffer = ReplayBuffer(capacity=50, n_envs=2, obs_shape=(2,))
    fill(buffer, 20)
    a = buffer.sample(16, np.random.default_rng(42))
    b = buffer.sample(16, np.random.default_rng(42))
    c = buffer.sample(16, np.random.default_rng(43))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["rewards"], c["rewards"])
