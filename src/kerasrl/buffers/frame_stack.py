"""Replay for stacked frames (Atari's 4 x 84 x 84) that stores each frame once.

A stacked observation (H, W, K) shares K - 1 frames with the one before it, and `next_obs` is the
next step's `obs`: storing both stacks (ReplayBuffer) keeps every frame 2K times. Here each env has
a ring of single frames (a stream: the frames of its episodes one after another), and each
transition keeps where its observation's newest frame is in that stream and how many of its K
frames belong to its episode (`depth`); stacks are rebuilt from these indices at sampling, the
frames before an episode's first one filled as the stacked env fills them at reset (zeros, or
repeats of the first frame). A transition adds one frame (its next observation's newest: the true
final one where an episode ended); an episode's first observation adds its own frames too.

The frame ring holds T + T/16 + K frames per env for T transitions per env: episodes of at least 16
steps on average never lose a transition to it; shorter ones drop their oldest transitions from
sampling (their frames were overwritten) until the ring catches up. About 1.07 x H x W bytes per
transition in all (docs/atari.md measures 1M Breakout transitions).

Every stored observation is checked: an observation that does not continue the previous one, or a
next observation that is not the observation shifted by one frame, starts a new run of frames or
raises, so that what is sampled is what was added.
"""

from __future__ import annotations

import numpy as np

from kerasrl.buffers.prioritized import PrioritizedReplayBuffer
from kerasrl.buffers.replay import ReplayBuffer

PADDINGS = ("zeros", "repeat")


def stacked_frames(env) -> tuple[int, str] | None:
    """(frame_stack, padding) of a (vector) env whose observations are stacked frames, or None.

    Read from the `frame_stack` and `frame_stack_padding` attributes that kerasrl's Atari
    `FrameStack` wrapper carries (any env or wrapper may declare them), and only for uint8
    channels-last observations (H, W, frame_stack).
    """
    space = getattr(env, "single_observation_space", getattr(env, "observation_space", None))
    if getattr(space, "dtype", None) != np.uint8 or len(space.shape) != 3 or space.shape[-1] < 2:
        return None  # not asked: querying every env of a vector env costs a round trip each
    read = env.get_attr if hasattr(env, "get_attr") else (
        lambda name: [env.get_wrapper_attr(name)])
    try:
        k, padding = int(read("frame_stack")[0]), str(read("frame_stack_padding")[0])
    except Exception:  # noqa: BLE001  (AttributeError here, re-raised differently by workers)
        return None
    if space.shape[-1] != k or padding not in PADDINGS:
        return None
    return k, padding


class FrameStackReplayBuffer(ReplayBuffer):
    """ReplayBuffer for observations (H, W, K) that stack the last K frames, oldest first.

    Args as ReplayBuffer's; `padding`: what the stacked env puts before an episode's first frame,
    "zeros" (SB3's VecFrameStack, kerasrl.envs.atari) or "repeat" (copies of the first frame,
    Gymnasium's FrameStackObservation with padding_type="reset").

    `frames_first` (an attribute, False by default): samples carry their stacks as gathered,
    (B, K, H, W) in the stored dtype, for a learner that puts the frames last and converts them
    on its device (DQN's `train(frames_first=True)`): a quarter of the bytes cross to a GPU, and
    the host skips a strided copy and a conversion. Sampling 32 Breakout stacks from a 30,000-
    transition buffer took 0.23 ms so against 0.7 ms (one AMD EPYC core, inside a DQN run; a
    standalone loop with fresh float32 allocations took 5.4 ms against 0.22). DQN's Breakout
    throughput on that core did not change beyond noise; on a GPU it was not measured.
    """

    def __init__(self, capacity, n_envs, obs_shape, obs_dtype=np.uint8, gamma=0.99, n_step=1,
                 *, padding: str = "zeros", **kwargs):
        if len(obs_shape) != 3:
            raise ValueError(f"FrameStackReplayBuffer stores (height, width, frames) observations, "
                             f"got shape {tuple(obs_shape)}.")
        if padding not in PADDINGS:
            raise ValueError(f"padding must be one of {PADDINGS}, got {padding!r}.")
        self.padding = padding
        super().__init__(capacity, n_envs, obs_shape, obs_dtype, gamma, n_step, **kwargs)

    def _allocate_observations(self, shape, obs_shape, obs_dtype) -> None:
        t, n = shape
        self.k = obs_shape[-1]
        self.n_frames = t + -(-t // 16) + self.k  # F, the frame ring per env
        self.frames = np.zeros((self.n_frames, n, *obs_shape[:2]), dtype=obs_dtype)  # (F, n, H, W)
        self.frame_pos = np.zeros(shape, dtype=np.int64)  # stream position of obs's newest frame
        self.depth = np.zeros(shape, dtype=np.uint8)  # frames of obs in its episode, 1..K
        self.heads = np.zeros(n, dtype=np.int64)  # frames pushed per env
        self.first_valid = np.zeros(n, dtype=np.int64)  # oldest sampleable transition (absolute)
        self.added = np.zeros((), dtype=np.int64)  # rows written, ever
        self.continues = np.zeros(n, dtype=bool)  # the next obs continues the last next_obs
        self.last_next_observations = np.zeros((n, *obs_shape), dtype=obs_dtype)

    def _observation_state(self) -> dict[str, np.ndarray]:
        return {key: getattr(self, key) for key in (
            "frames", "frame_pos", "depth", "heads", "first_valid", "added", "continues",
            "last_next_observations")}

    def _push(self, env: int, frame) -> int:
        position = int(self.heads[env])
        self.frames[position % self.n_frames, env] = frame
        self.heads[env] = position + 1
        return position

    def _episode_depth(self, obs) -> int:
        """Frames of `obs` (H, W, K) after the padding that a stacked env puts at reset: leading
        zero frames ("zeros"), or leading copies of the first real frame ("repeat")."""
        padded = 0
        while padded < self.k - 1:
            channel = obs[..., padded]
            if self.padding == "zeros" and channel.any():
                break
            if self.padding == "repeat" and not np.array_equal(channel, obs[..., padded + 1]):
                break
            padded += 1
        return self.k - padded

    def _store_observations(self, row, obs, next_obs, terminated, truncated) -> None:
        obs, next_obs = np.asarray(obs), np.asarray(next_obs)
        for env in range(self.n_envs):
            if not np.array_equal(next_obs[env][..., :-1], obs[env][..., 1:]):
                raise ValueError(
                    "FrameStackReplayBuffer: a next observation is not the observation shifted by "
                    "one frame, so these observations are not stacked frames (H, W, frames), "
                    "oldest first. An env that declares `frame_stack` (read by the agents to pick "
                    "this buffer) must return such stacks; otherwise do not declare it.")
            if self.continues[env] and np.array_equal(obs[env], self.last_next_observations[env]):
                position = int(self.heads[env]) - 1
                depth = min(self.k, int(self.depth[(row - 1) % self.capacity_per_env, env]) + 1)
            else:  # an episode's first observation: its own frames
                depth = self._episode_depth(obs[env])
                for i in range(self.k - depth, self.k):
                    position = self._push(env, obs[env][..., i])
            self.frame_pos[row, env] = position
            self.depth[row, env] = depth
            self._push(env, next_obs[env][..., -1])
        self.last_next_observations[...] = next_obs
        self.continues[...] = ~(np.asarray(terminated) | np.asarray(truncated))
        self.added[...] = self.added + 1
        self._drop_overwritten()

    def _drop_overwritten(self) -> None:
        """Advance each env's oldest sampleable transition past those whose frames are gone."""
        added, t = int(self.added), self.capacity_per_env
        for env in range(self.n_envs):
            oldest = max(int(self.first_valid[env]), added - t)
            alive_from = int(self.heads[env]) - self.n_frames
            start = oldest
            while oldest < added:
                row = oldest % t
                if int(self.frame_pos[row, env]) - int(self.depth[row, env]) + 1 >= alive_from:
                    break
                oldest += 1
            if oldest > start:
                self._dropped(np.arange(start, oldest) % t, env)
            self.first_valid[env] = oldest

    def _dropped(self, rows, env) -> None:
        """Transitions (rows of env) that can no longer be sampled."""

    def _counts(self):
        added, t = int(self.added), self.capacity_per_env
        starts = np.maximum(self.first_valid, added - t)
        return starts, added - starts

    def __len__(self) -> int:
        return int(self._counts()[1].sum())

    def sample_indices(self, n: int, rng: np.random.Generator):
        """`n` uniform (row, env) pairs of the sampleable transitions."""
        starts, counts = self._counts()
        flat = rng.integers(0, counts.sum(), size=n)
        edges = np.cumsum(counts)
        envs = np.searchsorted(edges, flat, side="right")
        offsets = flat - (edges[envs] - counts[envs])
        return (starts[envs] + offsets) % self.capacity_per_env, envs

    def _stacks(self, positions, depths, envs) -> np.ndarray:
        """Stacks (B, H, W, K) whose newest frames are at `positions`, `depths` of them real;
        (B, K, H, W) with `frames_first`."""
        k = np.arange(self.k)
        wanted = positions[:, None] - (self.k - 1) + k  # (B, K) stream positions, oldest first
        first = (positions - depths.astype(np.int64) + 1)[:, None]
        stack = self.frames[np.maximum(wanted, first) % self.n_frames, envs[:, None]]  # (B,K,H,W)
        if self.padding == "zeros":
            stack[wanted < first] = 0  # the frames before the episode's first: a few, in place
        return stack if self.frames_first else np.moveaxis(stack, 1, -1)

    def _sent(self, observations: np.ndarray) -> np.ndarray:
        return observations if self.frames_first else super()._sent(observations)

    def _observations(self, rows, envs) -> np.ndarray:
        return self._stacks(self.frame_pos[rows, envs], self.depth[rows, envs], envs)

    def _next_observations(self, rows, envs) -> np.ndarray:
        return self._stacks(self.frame_pos[rows, envs] + 1,
                            np.minimum(self.depth[rows, envs] + 1, self.k), envs)


def frames_last(observations: dict) -> dict:
    """Stacks of frames (..., K, H, W), as a `frames_first` buffer sends them, as models take
    them: (..., H, W, K) float32, in `keras.ops` (on the learner's device, `QLearner.train`)."""
    from keras import ops

    return {key: ops.cast(ops.moveaxis(x, -3, -1), "float32") for key, x in observations.items()}


def model_layout(observations: np.ndarray, frames_first: bool) -> np.ndarray:
    """Sampled observations on the host as models take them: float32, frames last."""
    return (np.moveaxis(observations, -3, -1) if frames_first else observations).astype(np.float32)


class PrioritizedFrameStackReplayBuffer(PrioritizedReplayBuffer, FrameStackReplayBuffer):
    """Prioritized replay (PrioritizedReplayBuffer) on frames stored once (FrameStackReplayBuffer):
    transitions whose frames are overwritten get priority 0."""

    def __init__(self, capacity, n_envs, obs_shape, obs_dtype=np.uint8, gamma=0.99, n_step=1,
                 alpha: float = 0.6, eps: float = 1e-6, *, padding: str = "zeros"):
        super().__init__(capacity, n_envs, obs_shape, obs_dtype, gamma, n_step, alpha, eps)
        if padding not in PADDINGS:
            raise ValueError(f"padding must be one of {PADDINGS}, got {padding!r}.")
        self.padding = padding  # PrioritizedReplayBuffer passes no padding on

    def _dropped(self, rows, env) -> None:
        self.tree.update(rows * self.n_envs + env, np.zeros(len(rows)))
