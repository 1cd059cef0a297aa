"""Hindsight replay's buffer: which goals replace which, the rewards they pay, episode boundaries,
the ring's overwrite, several envs, and saving (pure numpy)."""

import gymnasium as gym
import numpy as np
import pytest

import kerasrl

from kerasrl.buffers import GoalLayout, HindsightReplayBuffer
from kerasrl.envs.checker import goal_reward
from kerasrl.envs.goals import BitFlipping
from kerasrl.spaces import FlatObservations, FlattenLeaves

# Goals are one number that names the (env, episode, step) whose next observation achieved it, so
# that a replayed goal says where it came from. Flat order: achieved_goal, desired_goal, observation.
SPACE = FlatObservations(gym.spaces.Dict({
    "observation": gym.spaces.Box(-1e6, 1e6, (1,), np.float32),
    "achieved_goal": gym.spaces.Box(-1e6, 1e6, (1,), np.float32),
    "desired_goal": gym.spaces.Box(-1e6, 1e6, (1,), np.float32)}))
LAYOUT = GoalLayout.of(SPACE, "test env")
ORIGINAL_GOAL = -5.0  # every real transition's desired goal


def exact_rewards(achieved, desired):
    """0 where the goal is met, -1 elsewhere (the sparse reward of a goal env)."""
    return -(achieved[:, 0] != desired[:, 0]).astype(np.float32)


def goal_id(env, episode, step):
    return float(env * 10_000 + episode * 100 + step)


def make_buffer(capacity=1_000, n_envs=1, n_goals=4, strategy="future"):
    return HindsightReplayBuffer(capacity, n_envs, SPACE.shape, np.float32, gamma=0.9, layout=LAYOUT,
                                 rewards=exact_rewards, n_goals=n_goals, strategy=strategy)


def play(buffer, lengths_per_env, ended=True):
    """Add episodes of the given lengths to each env (all envs step together; an env whose
    episodes are used up pads with steps of a running episode 99). Returns the number of adds."""
    n_envs = buffer.n_envs
    plans = []
    for env, lengths in enumerate(lengths_per_env):
        plan = [(episode, step, step == length - 1 and (ended or episode < len(lengths) - 1))
                for episode, length in enumerate(lengths) for step in range(length)]
        plans.append(plan)
    n_adds = max(len(plan) for plan in plans)
    for t in range(n_adds):
        obs = np.zeros((n_envs, 3), np.float32)
        next_obs = np.zeros((n_envs, 3), np.float32)
        done = np.zeros(n_envs, bool)
        for env, plan in enumerate(plans):
            episode, step, last = plan[t] if t < len(plan) else (99, t, False)
            obs[env] = [goal_id(env, episode, step - 1), ORIGINAL_GOAL, t]
            next_obs[env] = [goal_id(env, episode, step), ORIGINAL_GOAL, t]
            done[env] = last
        rewards = exact_rewards(next_obs[:, :1], next_obs[:, 1:2])
        buffer.add(obs, np.zeros(n_envs, np.int32), rewards, next_obs, done & False, done)
    return n_adds


def decode(goal):
    goal = int(goal)
    return goal // 10_000, goal % 10_000 // 100, goal % 100  # env, episode, step


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_replayed_goals_come_from_the_same_episode_as_the_strategy_says(strategy):
    lengths = [7, 3, 12, 1, 5]
    buffer = make_buffer(strategy=strategy)
    play(buffer, [lengths])
    batch = buffer.sample(512, np.random.default_rng(0), n_batches=4)
    obs, next_obs = batch["observations"].reshape(-1, 3), batch["next_observations"].reshape(-1, 3)
    rewards = batch["rewards"].reshape(-1)
    replayed = obs[:, 1] != ORIGINAL_GOAL
    assert 0.75 < replayed.mean() < 0.85  # k / (k + 1) = 0.8 of a batch of ended episodes
    steps_seen = set()
    for o, n, r, again in zip(obs, next_obs, rewards, replayed):
        _, episode, step = decode(n[0])
        if not again:
            assert o[1] == n[1] == ORIGINAL_GOAL and r == -1.0
            continue
        goal_env, goal_episode, goal_step = decode(o[1])
        assert n[1] == o[1]  # the observation and the next one carry the same new goal
        assert (goal_env, goal_episode) == (0, episode)
        if strategy == "future":
            assert step <= goal_step < lengths[episode]
        elif strategy == "final":
            assert goal_step == lengths[episode] - 1
        else:
            assert 0 <= goal_step < lengths[episode]
        assert r == (0.0 if goal_step == step else -1.0)  # the reward the new goal pays
        steps_seen.add((episode, step, goal_step))
    if strategy != "final":  # every goal a step can take is drawn: e.g. episode 2's step 3 gets 3..11
        assert {g for e, s, g in steps_seen if (e, s) == (2, 3)} == set(
            range(3, 12) if strategy == "future" else range(12))


def test_a_running_episode_lends_no_goals_until_it_ends():
    buffer = make_buffer()
    play(buffer, [[4, 6]], ended=False)  # the second episode is still running
    batch = buffer.sample(2_000, np.random.default_rng(1))
    obs, next_obs = batch["observations"][0], batch["next_observations"][0]
    running = np.array([decode(n[0])[1] == 1 for n in next_obs])
    assert running.any() and (~running).any()
    assert np.all(obs[running, 1] == ORIGINAL_GOAL)
    assert np.mean(obs[~running, 1] != ORIGINAL_GOAL) > 0.7
    # Once it ends, it lends them.
    obs_row = np.array([[goal_id(0, 1, 5), ORIGINAL_GOAL, 0]], np.float32)
    next_row = np.array([[goal_id(0, 1, 6), ORIGINAL_GOAL, 0]], np.float32)
    buffer.add(obs_row, np.zeros(1, np.int32), np.array([-1.0]), next_row, np.zeros(1, bool), np.ones(1, bool))
    assert buffer.episode_length[4:11, 0].tolist() == [7] * 7


def test_an_episode_the_ring_begins_to_overwrite_lends_no_goals():
    buffer = make_buffer(capacity=10)
    play(buffer, [[6, 6]])  # 12 steps in a ring of 10: episode 0 loses its first two
    assert buffer.episode_length[:, 0].tolist() == [6, 6, 0, 0, 0, 0, 6, 6, 6, 6]
    batch = buffer.sample(2_000, np.random.default_rng(2))
    obs, next_obs = batch["observations"][0], batch["next_observations"][0]
    first = np.array([decode(n[0])[1] == 0 for n in next_obs])
    assert first.any() and np.all(obs[first, 1] == ORIGINAL_GOAL)
    replayed = obs[~first, 1] != ORIGINAL_GOAL
    assert replayed.mean() > 0.7
    assert all(decode(g)[1] == 1 for g in obs[~first, 1][replayed])


def test_an_episode_longer_than_the_ring_lends_goals_from_the_steps_it_kept():
    buffer = make_buffer(capacity=5)
    play(buffer, [[8]])
    assert buffer.episode_length[:, 0].tolist() == [5] * 5
    batch = buffer.sample(1_000, np.random.default_rng(3))
    obs, next_obs = batch["observations"][0], batch["next_observations"][0]
    replayed = obs[:, 1] != ORIGINAL_GOAL
    assert replayed.mean() > 0.7
    for o, n in zip(obs[replayed], next_obs[replayed]):
        assert 3 <= decode(n[0])[2] <= decode(o[1])[2] <= 7  # steps 3..7 were kept


def test_each_env_keeps_its_own_episodes():
    buffer = make_buffer(n_envs=3)
    play(buffer, [[3, 5, 2], [10], [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]])
    batch = buffer.sample(3_000, np.random.default_rng(4))
    obs, next_obs = batch["observations"][0], batch["next_observations"][0]
    replayed = obs[:, 1] != ORIGINAL_GOAL
    assert replayed.sum() > 2_000
    for o, n in zip(obs[replayed], next_obs[replayed]):
        env, episode, step = decode(n[0])
        assert decode(o[1])[:2] == (env, episode) and decode(o[1])[2] >= step


def test_n_goals_sets_the_share_replayed():
    for n_goals, share in ((1, 0.5), (8, 8 / 9)):
        buffer = make_buffer(n_goals=n_goals)
        play(buffer, [[10] * 10])
        obs = buffer.sample(4_000, np.random.default_rng(5))["observations"][0]
        assert abs(np.mean(obs[:, 1] != ORIGINAL_GOAL) - share) < 0.03


def test_saved_and_loaded_it_samples_the_same_batches():
    buffer = make_buffer(capacity=20, n_envs=2)
    play(buffer, [[4, 9, 3, 7], [11, 2, 6]])
    copy = make_buffer(capacity=20, n_envs=2)
    copy.load_state_dict({k: np.array(v) for k, v in buffer.state_dict().items()})
    for key in ("episode_start", "episode_length", "current_start", "current_length"):
        np.testing.assert_array_equal(getattr(copy, key), getattr(buffer, key))
    a = buffer.sample(64, np.random.default_rng(6), n_batches=3)
    b = copy.sample(64, np.random.default_rng(6), n_batches=3)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    # Adding on from the loaded state keeps the two equal.
    play(buffer, [[5], [5]])
    play(copy, [[5], [5]])
    for key, value in buffer.state_dict().items():
        np.testing.assert_array_equal(copy.state_dict()[key], value)


def test_a_buffer_saved_without_hindsight_is_refused_by_name():
    buffer = make_buffer()
    state = {k: v for k, v in buffer.state_dict().items() if not k.startswith(("episode", "current"))}
    with pytest.raises(ValueError, match="no 'episode_start'.*hindsight_goals=0"):
        make_buffer().load_state_dict(state)


def test_bit_flipping_goals_and_rewards_round_trip_through_flat_observations():
    env = FlattenLeaves(BitFlipping(n_bits=6))
    layout = GoalLayout.of(env.observation_space, "BitFlipping")
    rewards = goal_reward(env, "BitFlipping", seed=0)
    obs, _ = env.reset(seed=1)
    goals = layout.goals(obs[None], layout.desired)
    assert goals.dtype == np.int8 and goals.shape == (1, 6)
    np.testing.assert_array_equal(goals[0], env.unwrapped.goal)
    achieved = np.array([env.unwrapped.goal, 1 - env.unwrapped.goal])
    np.testing.assert_array_equal(rewards(achieved, np.repeat(goals, 2, axis=0)), [0.0, -1.0])


class _OneGoalAtATime(BitFlipping):
    def compute_reward(self, achieved_goal, desired_goal, info):
        return 0.0 if np.array_equal(achieved_goal, desired_goal) else -1.0  # not batched


class _WrongReward(BitFlipping):
    """Pays 10x in step what compute_reward says (a scale applied in one place only)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, 10.0 * reward, terminated, truncated, info


def test_a_compute_reward_written_for_one_goal_is_called_row_by_row():
    env = FlattenLeaves(_OneGoalAtATime(n_bits=4))
    rewards = goal_reward(env, "env", seed=0)
    goals = np.array([[0, 1, 0, 1], [1, 1, 1, 1]], np.int8)
    np.testing.assert_array_equal(rewards(goals, goals[::-1].copy()), [-1.0, -1.0])
    np.testing.assert_array_equal(rewards(goals, goals), [0.0, 0.0])


def test_a_compute_reward_that_disagrees_with_the_steps_rewards_is_refused():
    env = FlattenLeaves(_WrongReward(n_bits=4))
    with pytest.raises(ValueError, match=r"compute_reward\(achieved_goal, desired_goal, info\) gave -1.0 "
                                         r"at random step 0 where the step paid -10.0"):
        goal_reward(env, "MyEnv", seed=0)
    # check_env reports it too, for an env checked before any agent uses it.
    problems = kerasrl.check_env(_WrongReward(n_bits=4), warn=False)
    assert [p.kind for p in problems] == ["goal-reward"] and "step paid -10.0" in problems[0]


def test_goal_layout_refuses_observations_without_goals_naming_the_keys():
    plain = FlatObservations(gym.spaces.Dict({"observation": gym.spaces.Box(0, 1, (3,))}))
    for space in (gym.spaces.Box(0, 1, (3,)), plain):
        with pytest.raises(ValueError, match="goal-conditioned env.*'achieved_goal' and 'desired_goal'"):
            GoalLayout.of(space, "MyEnv")
    unequal = FlatObservations(gym.spaces.Dict({"achieved_goal": gym.spaces.Box(0, 1, (3,)),
                                                "desired_goal": gym.spaces.Box(0, 1, (2,))}))
    with pytest.raises(ValueError, match="spaces must be equal"):
        GoalLayout.of(unequal, "MyEnv")


def test_n_step_returns_and_unknown_strategies_are_refused():
    with pytest.raises(ValueError, match="n_step_return=3"):
        HindsightReplayBuffer(10, 1, SPACE.shape, n_step=3, layout=LAYOUT, rewards=exact_rewards)
    with pytest.raises(ValueError, match="hindsight_strategy must be one of 'future', 'final', 'episode'"):
        make_buffer(strategy="random")
