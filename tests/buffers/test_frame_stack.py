"""FrameStackReplayBuffer (each frame stored once) against ReplayBuffer (whole stacks) on the same
stacked-frame data: episode boundaries, n-step returns, prioritized replay, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest

from kerasrl.buffers import (FrameStackReplayBuffer, PrioritizedFrameStackReplayBuffer,
                             PrioritizedReplayBuffer, ReplayBuffer)
from kerasrl.buffers.frame_stack import stacked_frames

K, H, W = 4, 6, 5


def stacked_steps(n_envs, steps, rng, padding="zeros", mean_length=12):
    """Transitions of `n_envs` frame-stacking envs with SAME_STEP auto-reset: per step (obs,
    actions, rewards, next_obs (the true final one at an episode end), terminated, truncated)."""
    def reset_stack(frame):
        stack = np.zeros((H, W, K), np.uint8) if padding == "zeros" else np.repeat(
            frame[..., None], K, axis=-1)
        stack[..., -1] = frame
        return stack

    def frame():
        return rng.integers(1, 256, (H, W), dtype=np.uint8)

    stacks = [reset_stack(frame()) for _ in range(n_envs)]
    for _ in range(steps):
        obs = np.stack(stacks)
        next_obs = np.empty_like(obs)
        terminated = rng.random(n_envs) < 0.7 / mean_length
        truncated = ~terminated & (rng.random(n_envs) < 0.3 / mean_length)
        for e in range(n_envs):
            shifted = np.concatenate([stacks[e][..., 1:], frame()[..., None]], axis=-1)
            next_obs[e] = shifted
            stacks[e] = reset_stack(frame()) if terminated[e] or truncated[e] else shifted
        yield (obs, rng.integers(0, 3, n_envs), rng.standard_normal(n_envs).astype(np.float32),
               next_obs, terminated, truncated)


def filled(buffers, n_envs, steps, seed, **kwargs):
    for step in stacked_steps(n_envs, steps, np.random.default_rng(seed), **kwargs):
        for buffer in buffers:
            buffer.add(*step)
    return buffers


def assert_same_batches(naive, stacked, rows, envs):
    a, b = naive.gather(rows, envs), stacked.gather(rows, envs)
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.parametrize("padding", ["zeros", "repeat"])
@pytest.mark.parametrize("n_step", [1, 3])
def test_every_stored_transition_equals_the_naive_buffer(padding, n_step):
    # 20 transitions per env, wrapped three times, episodes of about 12 steps: many episode
    # starts (padding rebuilt) and ends (true final frames) inside the stacks.
    naive = ReplayBuffer(60, 3, (H, W, K), np.uint8, 0.9, n_step)
    stacked = FrameStackReplayBuffer(60, 3, (H, W, K), np.uint8, 0.9, n_step, padding=padding)
    filled([naive, stacked], 3, 70, seed=0, padding=padding)
    assert len(stacked) == len(naive) == 60
    rows, envs = np.divmod(np.arange(60), 3)
    assert_same_batches(naive, stacked, rows, envs)
    rng = np.random.default_rng(1)
    assert_same_batches(naive, stacked, *stacked.sample_indices(64, rng))


def test_short_episodes_drop_the_oldest_transitions_never_wrong_ones():
    # Episodes of about 2 steps add a frame per transition and one per episode: more than the
    # frame ring's 1/16 margin, so the oldest transitions' frames are overwritten. They leave
    # sampling; every one still sampleable is exact.
    naive = ReplayBuffer(64, 2, (H, W, K), np.uint8, 0.9, 2)
    stacked = FrameStackReplayBuffer(64, 2, (H, W, K), np.uint8, 0.9, 2)
    filled([naive, stacked], 2, 100, seed=2, mean_length=2)
    assert 0 < len(stacked) < len(naive)
    rows, envs = stacked.sample_indices(500, np.random.default_rng(0))
    assert_same_batches(naive, stacked, rows, envs)
    prioritized = PrioritizedFrameStackReplayBuffer(64, 2, (H, W, K), np.uint8, 0.9, 2)
    filled([prioritized], 2, 100, seed=2, mean_length=2)
    assert len(prioritized) == len(stacked)
    # drawn only from the live transitions:
    sampled = prioritized.sample(500, np.random.default_rng(0))["indices"].ravel()
    flat_rows, flat_envs = np.divmod(sampled, 2)
    starts, counts = prioritized._counts()
    age = (flat_rows - starts[flat_envs]) % prioritized.capacity_per_env
    assert (age < counts[flat_envs]).all()
    starts, counts = stacked._counts()
    oldest = {int(r) for r in (starts % stacked.capacity_per_env)}
    assert oldest & set(rows.tolist())  # the oldest sampleable ones are drawn too


def test_prioritized_samples_equal_the_naive_prioritized_buffer():
    naive = PrioritizedReplayBuffer(48, 2, (H, W, K), np.uint8, 0.9, 3)
    stacked = PrioritizedFrameStackReplayBuffer(48, 2, (H, W, K), np.uint8, 0.9, 3)
    rng = np.random.default_rng(3)
    for step in stacked_steps(2, 60, rng, mean_length=40):  # no frame overwritten too early
        naive.add(*step)
        stacked.add(*step)
        assert len(stacked) == len(naive)
        if len(naive) >= 8:
            a = naive.sample(8, np.random.default_rng(len(naive)))
            b = stacked.sample(8, np.random.default_rng(len(naive)))
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
            errors = rng.standard_normal(8)
            naive.update_priorities(a["indices"], errors)
            stacked.update_priorities(b["indices"], errors)


@pytest.mark.parametrize("prioritized", [False, True])
def test_saved_and_resumed_exactly(prioritized):
    make = (lambda: PrioritizedFrameStackReplayBuffer(40, 2, (H, W, K), np.uint8, 0.9, 2)) \
        if prioritized else (lambda: FrameStackReplayBuffer(40, 2, (H, W, K), np.uint8, 0.9, 2))
    steps = list(stacked_steps(2, 70, np.random.default_rng(4)))
    whole, first = make(), make()
    for step in steps:
        whole.add(*step)
    for step in steps[:33]:  # stopped mid-episode
        first.add(*step)
    state = {k: np.array(v) for k, v in first.state_dict().items()}  # as through an .npz
    resumed = make()
    resumed.load_state_dict(state)
    for step in steps[33:]:
        resumed.add(*step)
    for key, value in whole.state_dict().items():
        np.testing.assert_array_equal(value, resumed.state_dict()[key], err_msg=key)
    a = whole.sample(16, np.random.default_rng(5))
    b = resumed.sample(16, np.random.default_rng(5))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_observations_that_are_not_stacked_frames_are_refused():
    buffer = FrameStackReplayBuffer(10, 1, (H, W, 3), np.uint8)
    rgb = np.random.default_rng(0).integers(0, 256, (2, 1, H, W, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="not stacked frames.*declares `frame_stack`"):
        buffer.add(rgb[0], [0], [0.0], rgb[1], [False], [False])


def test_one_million_breakout_transitions_take_at_most_1_1_bytes_per_pixel():
    # Allocated for 1/64 of 1M and scaled: every array grows linearly with capacity (the frame
    # ring by T + T/16 + 4 per env); measured from the arrays (nbytes), not estimated.
    capacity = 1_000_000 // 64
    buffer = FrameStackReplayBuffer(capacity, 8, (84, 84, 4), np.uint8)
    arrays = [v for v in vars(buffer).values() if isinstance(v, np.ndarray)]
    per_transition = sum(a.nbytes for a in arrays) / capacity
    assert per_transition <= 1.1 * 84 * 84, per_transition
    naive_per_transition = 2 * 84 * 84 * 4 + 10
    assert per_transition < naive_per_transition / 7


def test_frame_stacks_are_detected_where_the_env_declares_them_only():
    import gymnasium as gym

    from kerasrl.envs.atari import FrameStack

    class Frames(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (H, W, 1), np.uint8)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return np.zeros((H, W, 1), np.uint8), {}

        def step(self, action):
            return np.full((H, W, 1), 7, np.uint8), 1.0, False, False, {}

    stacked = gym.vector.SyncVectorEnv([lambda: FrameStack(Frames(), K)])
    assert stacked_frames(stacked) == (K, "zeros")
    plain = gym.vector.SyncVectorEnv([lambda: gym.wrappers.TransformObservation(
        Frames(), lambda o: np.repeat(o, K, -1), gym.spaces.Box(0, 255, (H, W, K), np.uint8))])
    assert stacked_frames(plain) is None


@pytest.mark.parametrize("padding", ["zeros", "repeat"])
def test_frames_first_samples_are_the_stacks_as_gathered(padding):
    """With `frames_first` the batch carries each stack frames first, (B, K, H, W), uint8 as
    stored: the naive buffer's stacks, transposed, episode starts (padding) included."""
    naive = ReplayBuffer(60, 3, (H, W, K), np.uint8, 0.9, 3)
    stacked = FrameStackReplayBuffer(60, 3, (H, W, K), np.uint8, 0.9, 3, padding=padding)
    filled([naive, stacked], 3, 70, seed=0, padding=padding)
    assert len(stacked) == 60  # every row sampleable (no frames overwritten)
    stacked.frames_first = True
    rows, envs = np.divmod(np.arange(60), 3)
    a, b = naive.gather(rows, envs), stacked.gather(rows, envs)
    for key in ("observations", "next_observations"):
        assert b[key].dtype == np.uint8 and b[key].shape == (60, K, H, W) and b[key].flags.c_contiguous
        np.testing.assert_array_equal(np.moveaxis(b[key], 1, -1).astype(np.float32), a[key], err_msg=key)
    for key in ("actions", "rewards", "discounts", "weights"):
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.backend
def test_dqn_on_stacked_frames_trains_the_same_with_its_frames_put_last_on_the_device():
    """DQN sends its frame buffer's stacks as gathered and its learner puts the frames last and
    makes them float32 on its device: the losses and weights are those of the host conversion."""
    import gymnasium as gym

    import kerasrl
    from kerasrl.envs.atari import FrameStack

    class Frames(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (12, 12, 1), np.uint8)
        action_space = gym.spaces.Discrete(3)

        def reset(self, *, seed=None, options=None):
            if seed is not None or not hasattr(self, "rng"):  # auto-resets go on with the stream
                self.rng = np.random.default_rng(seed)
            self.t = 0
            return self.rng.integers(0, 256, (12, 12, 1), dtype=np.uint8), {}

        def step(self, action):
            self.t += 1
            frame = self.rng.integers(0, 256, (12, 12, 1), dtype=np.uint8)
            return frame, float(action == frame[0, 0, 0] % 3), self.t >= 15, False, {}

    runs = []
    for host_conversion in (False, True):
        agent = kerasrl.DQN(lambda: FrameStack(Frames(), K), seed=0, learning_starts=40, train_freq=4,
                            batch_size=16, buffer_size=500, target_update_interval=40, check_env=False)
        assert agent.buffer.frames_first  # picked for a frame buffer
        agent.buffer.frames_first = not host_conversion
        agent.fit(200, progress=False)
        runs.append((np.asarray(agent.history.losses), agent.model.get_weights()))
    (losses, weights), (host_losses, host_weights) = runs
    assert len(losses) == len(host_losses) >= 35
    np.testing.assert_array_equal(losses, host_losses)
    for a, b in zip(weights, host_weights):
        np.testing.assert_array_equal(a, b)
