"""kerasrl.envs.atari against Stable-Baselines3's AtariWrapper + VecFrameStack, step for step."""

import gymnasium as gym
import numpy as np
import pytest

import kerasrl  # noqa: F401  (registers kerasrl/<Game>-v5)
from kerasrl.envs.atari import make_atari_env

ale_py = pytest.importorskip("ale_py", reason="pip install 'kerasrl[atari]'")


def sb3_env(env_id, training):  # no sticky actions (as ours with repeat_action_probability=0)
    # Imported here, not with the module: Stable-Baselines3 imports PyTorch (about 1.2 s), which
    # every pytest process of every backend would pay while collecting.
    atari_wrappers = pytest.importorskip("stable_baselines3.common.atari_wrappers")
    from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

    gym.register_envs(ale_py)

    def make():
        from stable_baselines3.common.monitor import Monitor

        base = Monitor(gym.make(env_id, frameskip=1, full_action_space=False,
                                repeat_action_probability=0.0))
        return atari_wrappers.AtariWrapper(base, terminal_on_life_loss=training,
                                           clip_reward=training)
    return VecFrameStack(DummyVecEnv([make]), n_stack=4)


def run_both(env_id, training, steps, seed):
    ours = make_atari_env(env_id, training=training, repeat_action_probability=0.0)
    theirs = sb3_env(env_id, training)
    theirs.seed(seed)
    obs_theirs = theirs.reset()
    obs, _ = ours.reset(seed=seed)
    assert obs.shape == (84, 84, 4) and obs.dtype == np.uint8
    np.testing.assert_array_equal(obs, obs_theirs[0])
    rng = np.random.default_rng(seed)
    episodes, scores = 0, []
    for t in range(steps):
        action = int(rng.integers(ours.action_space.n))
        obs, reward, terminated, truncated, info = ours.step(action)
        obs_theirs, rewards, dones, infos = theirs.step(np.array([action]))
        assert reward == rewards[0], t
        assert (terminated or truncated) == dones[0], t
        # A game's whole raw score where SB3's Monitor reports it (training: at the lost life
        # that ends the game; evaluation has no episodic life, so no game figures).
        game = infos[0].get("episode") if training else None
        assert ("game_score" in info) == (game is not None), t
        if game is not None:
            assert info["game_score"] == game["r"], (t, info, game)
            scores.append(info["game_score"])
        if dones[0]:
            episodes += 1
            np.testing.assert_array_equal(obs, infos[0]["terminal_observation"], err_msg=str(t))
            obs, _ = ours.reset()
        np.testing.assert_array_equal(obs, obs_theirs[0], err_msg=f"step {t}")
    return episodes, scores


@pytest.mark.slow  # about 8 s
def test_breakout_training_equals_sb3_step_for_step():
    # Random play loses Breakout's lives within these steps: episodic-life resets (one no-op
    # step, then FIRE) and a full game-over reset (no-op starts, FIRE) are both crossed.
    episodes, scores = run_both("ALE/Breakout-v5", training=True, steps=700, seed=3)
    assert episodes >= 5
    # Three games end in these steps (scores 2, 0 and 2 here): each whole game's raw score
    # was checked equal to SB3's Monitor's at the step the game ended.
    assert len(scores) >= 2 and max(scores) > 0, scores


@pytest.mark.slow  # about 5 s
def test_pong_evaluation_equals_sb3_without_sticky_randomness():
    # Evaluation preprocessing (no episodic life, raw rewards); with sticky actions the two draw
    # their repeats from different generators (ALE's, SB3's wrapper's), so compared without them.
    _, scores = run_both("ALE/Pong-v5", training=False, steps=300, seed=1)
    assert scores == []  # whole games are the episodes here: nothing extra to report


class ScriptedLives(gym.Env):
    """An ALE stand-in: three lives lost at steps 2, 4 and 7, the game over at the third, a
    reward of 4 at every step (raw; Breakout's upper bricks give 4 and 7)."""

    observation_space = gym.spaces.Box(0, 255, (1,), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.ale = self
        self.t, self.resets = 0, 0

    @property
    def unwrapped(self):
        return self

    def lives(self):
        return 3 - (self.t >= 2) - (self.t >= 4) - (self.t >= 7)

    def reset(self, seed=None, options=None):
        self.t, self.resets = 0, self.resets + 1
        return np.zeros(1, np.uint8), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.uint8), 4.0, self.lives() == 0, False, {}


def test_a_game_reports_its_whole_raw_score_when_it_ends():
    from kerasrl.envs.atari import EpisodicLife

    env = EpisodicLife(ScriptedLives())
    env.reset(seed=0)
    ends, reported = [], []
    for _ in range(20):
        _, reward, terminated, _, info = env.step(0)
        assert reward == 4.0  # the learner's reward is untouched here (ClipReward clips it later)
        if "game_score" in info:
            reported.append((info["game_score"], info["game_steps"]))
        if terminated:
            ends.append(env.unwrapped.t)
            env.reset()
    # Lives end at steps 2 and 4 (the reset after each is one no-op step: 3 and 5), the game at
    # 7: seven rewards of 4 in seven steps, five taken by the agent, two by the resets.
    assert ends[:3] == [2, 4, 7]
    assert reported[0] == (28.0, 5)
    assert len(reported) == len([t for t in ends if t == 7]) and reported[1] == reported[0]


def test_a_seeded_reset_starts_the_same_game():
    env = make_atari_env("ALE/Breakout-v5", training=True)
    first, _ = env.reset(seed=5)
    for _ in range(3):
        env.step(1)
    again, _ = env.reset(seed=5)  # mid-game: episodic life would go on with the old game
    np.testing.assert_array_equal(first, again)
    env.close()


def test_registered_ids_and_training_flag():
    env = gym.make("kerasrl/Breakout-v5")
    assert env.observation_space.shape == (84, 84, 4)
    assert env.unwrapped.get_action_meanings() == ["NOOP", "FIRE", "RIGHT", "LEFT"]
    assert env.get_wrapper_attr("frame_stack") == 4
    env.close()
    evaluation = gym.make("kerasrl/Breakout-v5", training=False)
    assert evaluation.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    evaluation.close()
    # What agent.evaluate(), fit(eval_every=...) and `kerasrl evaluate` play by default: that form.
    from kerasrl import registry
    from kerasrl.envs import evaluation_env

    form = evaluation_env("kerasrl/Breakout-v5", registry.evaluation_kwargs("kerasrl/Breakout-v5"))()
    assert form.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    assert not any(type(w).__name__ in ("EpisodicLife", "ClipReward") for w in _wrappers(form))
    form.close()
    training = gym.make("kerasrl/Breakout-v5")
    assert {"EpisodicLife", "ClipReward"} <= {type(w).__name__ for w in _wrappers(training)}
    training.close()


def _wrappers(env) -> list:
    chain = []
    while hasattr(env, "env"):
        chain.append(env)
        env = env.env
    return chain


@pytest.mark.slow  # about a minute: the Nature CNN compiled, a few updates on Breakout
def test_dqn_on_breakout_stores_frames_once_and_resumes_exactly(tmp_path):
    from kerasrl.buffers import FrameStackReplayBuffer

    settings = dict(buffer_size=300, learning_starts=64, batch_size=8, train_freq=16,
                    target_update_interval=64, seed=0)
    agent = kerasrl.DQN("kerasrl/Breakout-v5", **settings)
    assert type(agent.buffer) is FrameStackReplayBuffer
    agent.fit(200, progress=False)
    path = agent.save(tmp_path / "breakout")
    with pytest.warns(UserWarning, match="could not be restored.*NOT exact"):  # the emulator
        resumed = kerasrl.DQN.load(path)
    assert type(resumed.buffer) is FrameStackReplayBuffer
    for key, value in agent.buffer.state_dict().items():
        np.testing.assert_array_equal(value, resumed.buffer.state_dict()[key], err_msg=key)
    batch = resumed.buffer.sample(8, np.random.default_rng(0))
    assert batch["observations"].shape == (1, 8, 84, 84, 4)
    # The resumed run goes on from a new game, its buffer from where it was.
    resumed.fit(300, progress=False)
    assert len(resumed.buffer) == 300
    assert resumed.buffer.sample(8, np.random.default_rng(0))["next_observations"].max() > 0
