"""Hindsight experience replay in the agents (docs/hindsight.md): DQN learns the HER paper's bit
flipping, which it cannot learn without it; the continuous agents take it too; bad settings and
envs are refused where they are made; a paused and saved run continues as the same run."""

import json
import re
from math import comb

import keras
import numpy as np
import pytest

import kerasrl
from kerasrl.buffers import HindsightReplayBuffer
from kerasrl.files import CheckpointError
from kerasrl.envs.goals import BitFlipping
from kerasrl.presets import PRESETS

# The preset's settings. Measured on a 2-core Intel Xeon @ 2.50GHz (AVX-512), JAX: with hindsight, 2,000 steps
# evaluate at -4.27 to -4.47 over seeds 0 to 7 (a perfect policy: about -4.0 on 10 bits);
# without, -10.0 (no goal is ever reached, so no reward ever varies). 2,500 steps here, and a
# bound of -6, for margin.
DQN_SETTINGS = {k: v for k, v in PRESETS["bitflipping-dqn-her"].config.items() if not k.startswith("hindsight")}


def optimal_return(n_bits: int) -> float:
    """The mean return of a perfect policy: one step per differing bit (the reward is -1 before
    the goal, 0 on reaching it), over goals that differ from the start in at least one bit."""
    differing = np.arange(1, n_bits + 1)
    weights = np.array([comb(n_bits, d) for d in differing], float)
    return float(-np.sum(weights * (differing - 1)) / weights.sum())


def test_dqn_learns_bit_flipping_with_hindsight_and_not_without():
    returns = {}
    for goals in (4, 0):
        agent = kerasrl.DQN("kerasrl/BitFlipping-v0", seed=0, hindsight_goals=goals, **DQN_SETTINGS)
        assert isinstance(agent.buffer, HindsightReplayBuffer) == (goals > 0)
        agent.fit(2_500, progress=False)
        returns[goals] = agent.evaluate(episodes=100)
    assert optimal_return(10) == pytest.approx(-4.0, abs=0.01)
    assert returns[4]["mean_return"] > -6.0, returns
    assert returns[4]["mean_is_success"] >= 0.9, returns  # the env's info["is_success"], averaged
    assert returns[0]["mean_return"] < -9.5, returns  # hardly ever reaches a goal


@pytest.mark.parametrize("algorithm", ["DDPG", "TD3", "SAC", "TQC", "CrossQ"])
def test_continuous_agents_replay_goals_too(algorithm):
    small_critics = {"critic_hidden_sizes": (16,)} if algorithm == "CrossQ" else {}
    agent = getattr(kerasrl, algorithm)(lambda: BitFlipping(n_bits=6, continuous=True), seed=0,
                                        hindsight_goals=2, hindsight_strategy="final",
                                        learning_starts=64, batch_size=32, hidden_sizes=(16,),
                                        **small_critics)
    assert isinstance(agent.buffer, HindsightReplayBuffer)
    agent.fit(200, progress=False)
    rows, envs = agent.buffer.sample_indices(512, np.random.default_rng(0))  # what sample draws first
    batch = agent.buffer.sample(512, np.random.default_rng(0))
    goal = agent.buffer.layout.desired
    at = slice(goal.start, goal.start + goal.size)
    changed = np.any(batch["observations"][0][:, at] != agent.buffer.observations[rows, envs][:, at], axis=1)
    # 2/3 replayed with their episode's final goal, which differs from the goal given unless the
    # episode reached it (a random policy reaches a 6-bit goal in about 1 episode of 10).
    assert 0.45 < changed.mean() < 0.67


def test_envs_without_goals_and_settings_hindsight_cannot_take_are_refused_where_they_are_made():
    with pytest.raises(ValueError, match="goal-conditioned env.*CartPole-v1 observes Box"):
        kerasrl.DQN("CartPole-v1", hindsight_goals=4)
    with pytest.raises(ValueError, match="n_step_return must be 1 with hindsight replay"):
        kerasrl.DQN("kerasrl/BitFlipping-v0", hindsight_goals=4, n_step_return=3)
    with pytest.raises(ValueError, match="prioritized_replay must be False with hindsight replay"):
        kerasrl.DQN("kerasrl/BitFlipping-v0", hindsight_goals=4, prioritized_replay=True)
    with pytest.raises(ValueError, match="hindsight_strategy must be 'future', 'final' or 'episode'"):
        kerasrl.SAC("kerasrl/BitFlipping-v0", hindsight_goals=4, hindsight_strategy="random")
    with pytest.raises(ValueError, match="hindsight_goals must be a non-negative integer"):
        kerasrl.DQN("kerasrl/BitFlipping-v0", hindsight_goals=-1)


class _NoComputeReward(BitFlipping):
    compute_reward = None  # hides the method: an env written without one

    def step(self, action):
        obs, _, terminated, truncated, info = super().step(action)
        reward = 0.0 if np.array_equal(self.state, self.goal) else -1.0
        return obs, reward, terminated, truncated, info

    def __getattribute__(self, name):
        if name == "compute_reward":
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_an_env_without_compute_reward_is_refused_naming_what_to_add():
    with pytest.raises(ValueError, match="compute_reward.*has none.*or set hindsight_goals=0"):
        kerasrl.DQN(_NoComputeReward, hindsight_goals=4)


def test_a_paused_saved_and_loaded_run_continues_as_the_same_run(tmp_path):
    settings = dict(DQN_SETTINGS, learning_starts=100, hidden_sizes=(16,), batch_size=16)
    whole = kerasrl.DQN("kerasrl/BitFlipping-v0", seed=3, hindsight_goals=4, **settings)
    whole.fit(400, progress=False)
    paused = kerasrl.DQN("kerasrl/BitFlipping-v0", seed=3, hindsight_goals=4, **settings)
    paused.fit(400, stop_at=230, progress=False)
    paused.save(tmp_path / "run")
    resumed = kerasrl.DQN.load(tmp_path / "run")
    assert isinstance(resumed.buffer, HindsightReplayBuffer)
    resumed.fit(400, progress=False)
    arrays_whole, _ = whole.state_dict()
    arrays_resumed, _ = resumed.state_dict()
    assert sorted(arrays_whole) == sorted(arrays_resumed)
    assert any(key.endswith("episode_length") for key in arrays_whole)
    for key, value in arrays_whole.items():
        np.testing.assert_array_equal(arrays_resumed[key], value, err_msg=key)


def test_the_cli_trains_the_preset_and_evaluates_dict_observations_with_the_success_rate(tmp_path, capsys):
    from kerasrl.cli import main

    assert main(["train", "--preset", "bitflipping-dqn-her", "--steps", "700", "--no-progress",
                 "--eval-every", "350", "--eval-episodes", "5", "--out", str(tmp_path / "bits")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"step 700: evaluation over 5 episodes, mean return -?[\d.]+ \+/- [\d.]+, "
                     r"is_success [01]\.\d\d", out), out  # each evaluation, as it is made
    assert re.search(r"mean length [\d.]+, is_success [01]\.\d\d", out), out  # the final one
    assert main(["evaluate", str(tmp_path / "bits"), "--episodes", "4"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["episodes"] == 4 and 0.0 <= result["mean_is_success"] <= 1.0
    assert result["mean_return"] <= -0.0 and result["env"] == "kerasrl/BitFlipping-v0"


class GoalQNetwork(keras.Model):
    """A user's Q-network on a goal env: the state and the goal side by side (leaves by name)."""

    def __init__(self, n_actions=10):
        super().__init__()
        self.hidden = keras.layers.Dense(32, activation="relu")
        self.q = keras.layers.Dense(n_actions)

    def call(self, inputs):
        return self.q(self.hidden(keras.ops.concatenate([inputs["observation"], inputs["desired_goal"]], axis=-1)))


def test_a_users_subclassed_network_trains_and_its_saved_policy_names_its_class(tmp_path):
    with pytest.warns(UserWarning, match="GoalQNetwork will be saved as weights only"):
        agent = kerasrl.DQN("kerasrl/BitFlipping-v0", model=GoalQNetwork(), seed=0, hindsight_goals=4,
                            **dict(DQN_SETTINGS, learning_starts=100))
    agent.fit(300, progress=False)
    agent.save(tmp_path / "run")
    with pytest.raises(CheckpointError, match=r"weights only of model \(.*test_hindsight\.GoalQNetwork\)"):
        kerasrl.load_policy(tmp_path / "run")  # the user's class, not the functional model around it
    policy = kerasrl.load_policy(tmp_path / "run", model_factory=lambda o, a: GoalQNetwork())
    obs = [BitFlipping().reset(seed=seed)[0] for seed in range(8)]
    assert [int(policy.predict(o)) for o in obs] == [int(agent.predict(o)) for o in obs]


def test_ray_actors_are_refused_before_any_starts():
    pytest.importorskip("ray")
    from kerasrl.distributed import RayEngine

    agent = kerasrl.DQN("kerasrl/BitFlipping-v0", hindsight_goals=4, learning_starts=10,
                        target_update_interval=50)
    with pytest.raises(ValueError, match=r"engine='ray' cannot train this DQN: hindsight replay "
                                         r"\(hindsight_goals > 0\) needs each env's steps stored in order"):
        agent.fit(100, engine=RayEngine(workers=1), progress=False)


@pytest.mark.slow
def test_dqn_with_hindsight_nears_a_perfect_policy_on_15_bits():
    """15 bits: a random policy reaches the goal about once in 10,000 episodes."""
    agent = kerasrl.DQN(lambda: BitFlipping(n_bits=15), seed=0, hindsight_goals=4,
                        **dict(DQN_SETTINGS, hidden_sizes=(256, 256), batch_size=256))
    agent.fit(10_000, progress=False)
    assert agent.evaluate(episodes=100)["mean_return"] > optimal_return(15) - 2.0


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["TD3", "SAC", "TQC"])
def test_continuous_agents_with_hindsight_learn_bit_flipping(algorithm):
    agent = getattr(kerasrl, algorithm)(lambda: BitFlipping(n_bits=10, continuous=True), seed=0,
                                        hindsight_goals=4, learning_starts=1_000, batch_size=256,
                                        learning_rate=1e-3, gamma=0.95, hidden_sizes=(256, 256))
    agent.fit(5_000, progress=False)
    assert agent.evaluate(episodes=100)["mean_return"] > -6.0  # never reached: -10
