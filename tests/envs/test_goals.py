"""kerasrl/BitFlipping-v0 (kerasrl.envs.goals): the HER paper's bit flipping as a Gymnasium
GoalEnv, discrete and continuous."""

import gymnasium as gym
import numpy as np
import pytest

import kerasrl
from kerasrl.envs.goals import BitFlipping


def test_each_action_flips_one_bit_and_the_goal_ends_the_episode_with_reward_0():
    env = gym.make("kerasrl/BitFlipping-v0")
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"observation", "achieved_goal", "desired_goal"}
    assert obs["observation"].shape == (10,) and obs["observation"].dtype == np.int8
    assert not np.array_equal(obs["achieved_goal"], obs["desired_goal"])  # never a task done at reset
    differing = np.flatnonzero(obs["achieved_goal"] != obs["desired_goal"])
    for k, bit in enumerate(differing):
        before = obs["observation"].copy()
        obs, reward, terminated, truncated, info = env.step(int(bit))
        changed = np.flatnonzero(obs["observation"] != before)
        assert changed.tolist() == [bit]
        np.testing.assert_array_equal(obs["achieved_goal"], obs["observation"])
        last = k == len(differing) - 1
        assert (reward, terminated, truncated, info["is_success"]) == ((0.0, True, False, True) if last
                                                                       else (-1.0, False, False, False))


def test_an_episode_is_cut_after_max_steps_and_a_bad_action_is_named():
    env = BitFlipping(n_bits=4, max_steps=3)
    env.reset(seed=1)
    env.state, env.goal = np.zeros(4, np.int8), np.ones(4, np.int8)
    outcomes = [env.step(0)[1:4] for _ in range(3)]  # bit 0 on, off, on: never the goal
    assert outcomes == [(-1.0, False, False), (-1.0, False, False), (-1.0, False, True)]
    with pytest.raises(ValueError, match=r"action in 0..3, got 7"):
        env.step(7)
    assert BitFlipping(n_bits=7).max_steps == 7  # n_bits steps by default: enough for any goal


def test_compute_reward_is_batched_and_agrees_with_step():
    env = BitFlipping(n_bits=5)
    goals = np.array([[0, 1, 0, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], np.int8)
    np.testing.assert_array_equal(env.compute_reward(goals, goals, [{}] * 3), [0, 0, 0])
    np.testing.assert_array_equal(env.compute_reward(goals, goals[::-1], [{}] * 3), [-1, 0, -1])
    assert env.compute_reward(goals[0], goals[0], {}).shape == ()


def test_continuous_actions_flip_every_bit_with_a_positive_component():
    env = BitFlipping(n_bits=6, continuous=True)
    obs, _ = env.reset(seed=3)
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (6,), np.float32)
    action = np.where(obs["achieved_goal"] != obs["desired_goal"], 0.5, -0.5).astype(np.float32)
    obs, reward, terminated, _, _ = env.step(action)
    assert (reward, terminated) == (0.0, True)


def test_the_same_seed_gives_the_same_tasks_and_check_env_passes():
    a, b = BitFlipping(n_bits=8), BitFlipping(n_bits=8)
    for seed in range(3):
        oa, ob = a.reset(seed=seed)[0], b.reset(seed=seed)[0]
        for key in oa:
            np.testing.assert_array_equal(oa[key], ob[key])
    kerasrl.check_env(BitFlipping(n_bits=8))
    kerasrl.check_env(BitFlipping(n_bits=8, continuous=True))


def test_frames_show_the_state_above_the_goal():
    env = BitFlipping(n_bits=3, render_mode="rgb_array")
    env.reset(seed=0)
    env.state, env.goal = np.array([1, 0, 1], np.int8), np.array([1, 1, 0], np.int8)
    frame = env.render()
    cell = BitFlipping.CELL
    assert frame.shape == (2 * cell, 3 * cell, 3) and frame.dtype == np.uint8
    centre = frame[cell // 2::cell, cell // 2::cell]  # (2, 3, 3): each bit's colour
    assert centre[0, 0].tolist() == [60, 200, 90]  # lit, matching: green
    assert centre[0, 1].tolist() == [55, 17, 15]  # dark, not matching: dim red
    assert centre[1, 1].tolist() == [220, 70, 60]  # the goal's lit bit that the state lacks
    text = BitFlipping(n_bits=3, render_mode="ansi")
    text.state, text.goal = env.state, env.goal
    assert text.render() == "state 101\ngoal  110"
