"""Atari 2600 games through ale-py, preprocessed the standard way (Mnih et al. 2015, Machado et
al. 2018), frame for frame as Stable-Baselines3's `AtariWrapper` + `VecFrameStack`.

    env = make_atari_env("ALE/Breakout-v5", training=True)   # gymnasium.make("kerasrl/Breakout-v5")
    obs, info = env.reset(seed=0)                              # (84, 84, 4) uint8, channels last

One agent step is 4 emulator frames (the action repeated, rewards summed), the observation the
pixel-wise maximum of the last two RGB frames (Atari sprites flicker), converted to grayscale and
resized to 84x84 by OpenCV (INTER_AREA), the last 4 such frames stacked on the channel axis, oldest
first, zeros before an episode's first frame. Episodes start after 1 to 30 no-op frames, and with
FIRE where the game waits for it (Breakout). Training only (`training=True`): a lost life ends the
episode for the learner (`terminated`; the game goes on, the next reset is one no-op step) and
rewards are clipped to their sign. Evaluation (`training=False`): whole games, raw scores, and
sticky actions as ALE v5 (each frame repeats the previous action with probability 0.25, Machado et
al. 2018); training runs without them, as RL Baselines3 Zoo's `NoFrameskip-v4` envs. The minimal
action set (`full_action_space=False`).

Where this differs from SB3: when a game ends in the first frame of a 4-frame step, SB3's
MaxAndSkipEnv returns the maximum of two frames of the previous step (its buffer is not written);
here the maximum of the frames seen in this step. Only such final observations differ. And a
seeded `reset(seed=...)` always starts a new game (SB3's EpisodicLifeEnv goes on with the current
one unless its last life was lost, so the same seed gave different first observations).

Requires `pip install kerasrl[atari]` (ale-py, which bundles the ROMs, and OpenCV).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from kerasrl import registry

NOOP, FIRE = 0, 1
STICKY_ACTION_PROBABILITY = 0.25
"""ALE v5's repeat_action_probability (Machado et al. 2018), used for evaluation."""
def _require(module: str):
    try:
        return __import__(module)
    except ImportError:
        raise ImportError(f"Atari environments need {module}: pip install 'kerasrl[atari]' "
                          f"(ale-py with its ROMs, and opencv-python-headless).") from None


def make_atari_env(env_id: str = "ALE/Breakout-v5", *, training: bool = True,
                   frame_stack: int = 4, noop_max: int = 30, frame_skip: int = 4,
                   screen_size: int = 84, repeat_action_probability: float | None = None,
                   render_mode: str | None = None, **ale_kwargs) -> gym.Env:
    """An ALE game preprocessed as above: observations (screen_size, screen_size, frame_stack)
    uint8.

    `training` turns on episodic life and reward clipping and turns off sticky actions;
    `repeat_action_probability` overrides the sticky-action probability (default: 0 in training,
    0.25 in evaluation). `ale_kwargs` go to `gymnasium.make(env_id, ...)`.
    """
    ale_py = _require("ale_py")
    _require("cv2")
    gym.register_envs(ale_py)
    if repeat_action_probability is None:
        repeat_action_probability = 0.0 if training else STICKY_ACTION_PROBABILITY
    # The wrappers skip frames themselves: the emulator steps one frame at a time.
    env = gym.make(env_id, frameskip=1, repeat_action_probability=repeat_action_probability,
                   full_action_space=False, render_mode=render_mode, **ale_kwargs)
    meanings = env.unwrapped.get_action_meanings()
    if meanings[0] != "NOOP":
        raise ValueError(f"{env_id}: action 0 is {meanings[0]}, not NOOP; no-op starts need it.")
    if noop_max > 0:
        env = NoopStarts(env, noop_max)
    if frame_skip > 1:
        env = MaxAndSkip(env, frame_skip)
    if training:
        env = EpisodicLife(env)
    if "FIRE" in meanings:
        env = FireOnReset(env)
    env = WarpFrame(env, screen_size)
    if training:
        env = ClipReward(env)
    return FrameStack(env, frame_stack)


def register_atari_envs() -> None:
    """Registers kerasrl/<Game>-v5 (ids in `kerasrl.registry.ENV_IDS`: training preprocessing;
    `gymnasium.make(id, training=False)` for evaluation's); safe to call twice. Nothing is
    imported until one is made."""
    for env_id, keywords in registry.ENV_IDS.items():
        if keywords["entry_point"].startswith(__name__ + ":") and env_id not in gym.registry:
            gym.register(id=env_id, **keywords)


class NoopStarts(gym.Wrapper):
    """After reset, 1 to `noop_max` no-op frames, drawn from the env's own generator."""

    def __init__(self, env, noop_max: int = 30):
        super().__init__(env)
        self.noop_max = int(noop_max)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        for _ in range(int(self.unwrapped.np_random.integers(1, self.noop_max + 1))):
            obs, _, terminated, truncated, info = self.env.step(NOOP)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info


class MaxAndSkip(gym.Wrapper):
    """Each action for `skip` frames, rewards summed; the observation is the pixel-wise maximum
    of the last two frames seen."""

    def __init__(self, env, skip: int = 4):
        super().__init__(env)
        self.skip = int(skip)

    def step(self, action):
        total, last, before = 0.0, None, None
        for _ in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            before, last = last, obs
            total += float(reward)
            if terminated or truncated:
                break
        frame = last if before is None else np.maximum(before, last)
        return frame, total, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """A lost life is `terminated` for the learner; the game resets only when it is over (a reset
    after a lost life is one no-op step).

    The learner's episodes are lives with clipped rewards, which say little about how well it
    plays; so when a game ends, `info["game_score"]` is its whole raw score (every life, unclipped:
    what Stable-Baselines3's Monitor reports, `ep_rew_mean`, and papers call the score) and
    `info["game_steps"]` its length in steps of 4 frames (the resets' FIRE presses included). The
    agents log both with the episode that ended the game (History, episodes.csv, the progress
    bar's running means).
    """

    def __init__(self, env):
        super().__init__(env)
        self.lives = 0
        self.game_over = True
        self.game_score, self.game_steps = 0.0, 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_score += float(reward)
        self.game_steps += 1
        self.game_over = terminated or truncated
        if self.game_over:
            info = dict(info, game_score=self.game_score, game_steps=self.game_steps)
        lives = self.unwrapped.ale.lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        # A seeded reset asks for a new game (SB3's EpisodicLifeEnv goes on with the old one when
        # the last life was not lost, so that reset(seed=0) twice gave different games).
        if self.game_over or kwargs.get("seed") is not None:
            obs, info = self._new_game(**kwargs)
        else:
            obs, reward, terminated, truncated, info = self.env.step(NOOP)
            self.game_score += float(reward)
            if terminated or truncated:
                obs, info = self._new_game(**kwargs)
        self.lives = self.unwrapped.ale.lives()
        return obs, info

    def _new_game(self, **kwargs):
        self.game_score, self.game_steps = 0.0, 0
        return self.env.reset(**kwargs)


class FireOnReset(gym.Wrapper):
    """Presses FIRE (then action 2) after reset, for games that wait for it."""

    def reset(self, **kwargs):
        self.env.reset(**kwargs)
        obs = None
        for action in (FIRE, 2):
            obs, _, terminated, truncated, _ = self.env.step(action)
            if terminated or truncated:
                obs, _ = self.env.reset(**kwargs)
        return obs, {}


class WarpFrame(gym.ObservationWrapper):
    """RGB (210, 160, 3) to grayscale (size, size, 1) uint8, as OpenCV's RGB2GRAY and INTER_AREA."""

    def __init__(self, env, size: int = 84):
        super().__init__(env)
        self.size = int(size)
        self.observation_space = gym.spaces.Box(0, 255, (self.size, self.size, 1), np.uint8)

    def observation(self, frame):
        import cv2

        gray = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
        return cv2.resize(gray, (self.size, self.size), interpolation=cv2.INTER_AREA)[:, :, None]


class ClipReward(gym.RewardWrapper):
    """Rewards to their sign: -1, 0 or +1."""

    def reward(self, reward):
        return float(np.sign(float(reward)))


class FrameStack(gym.Wrapper):
    """The last `frame_stack` frames (H, W, 1) on the channel axis, oldest first: (H, W, k) uint8,
    zeros before an episode's first frame (SB3's VecFrameStack).

    `frame_stack` and `frame_stack_padding` are read by the agents (through the vector env) to
    store each frame once in replay (kerasrl.buffers.FrameStackReplayBuffer).
    """

    frame_stack_padding = "zeros"

    def __init__(self, env, frame_stack: int = 4):
        super().__init__(env)
        if frame_stack < 1:
            raise ValueError(f"frame_stack must be at least 1, got {frame_stack}.")
        self.frame_stack = int(frame_stack)
        h, w, _ = env.observation_space.shape
        self.observation_space = gym.spaces.Box(0, 255, (h, w, self.frame_stack), np.uint8)
        self._stack = np.zeros((h, w, self.frame_stack), np.uint8)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._stack[...] = 0
        self._stack[..., -1] = obs[..., 0]
        return self._stack.copy(), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._stack[..., :-1] = self._stack[..., 1:]
        self._stack[..., -1] = obs[..., 0]
        return self._stack.copy(), reward, terminated, truncated, info
