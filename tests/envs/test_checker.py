"""kerasrl.check_env: each problem provoked by a small broken env, and its message asserted."""

import gymnasium as gym
import numpy as np
import pytest

import kerasrl
from kerasrl.envs.checker import EnvCheckError, check_env


class Healthy(gym.Env):
    """A seeded random walk on a line: what a well-made env looks like."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = self.np_random.uniform(-1, 1, size=2).astype(np.float32)
        self.t = 0
        return self.position.copy(), {}

    def step(self, action):
        self.position = np.clip(self.position + (0.1 if action else -0.1), -10, 10).astype(np.float32)
        self.t += 1
        return self.position.copy(), 1.0, False, self.t >= 50, {}


def test_a_healthy_env_and_registered_envs_have_no_problems():
    assert check_env(Healthy()) == []
    for env_id in ("CartPole-v1", "Pendulum-v1", "kerasrl/Snake-v0"):
        assert check_env(env_id) == [], env_id


def broken(**overrides):
    """A Healthy env with some methods or spaces replaced."""
    return type("Broken", (Healthy,), overrides)()


def _old_reset(self, seed=None, options=None):
    return Healthy.reset(self, seed=seed)[0]


def _old_step(self, action):
    obs, reward, terminated, truncated, info = Healthy.step(self, action)
    return obs, reward, terminated or truncated, info


def _no_seed_reset(self):
    return Healthy.reset(self)


@pytest.mark.parametrize("overrides, message", [
    ({"reset": _old_reset}, r"returned ndarray, not \(observation, info\): this is the old Gym API"),
    ({"step": _old_step}, r"returned 4 values.*old Gym API"),
    ({"reset": _no_seed_reset}, r"takes no `seed` argument.*super\(\)\.reset\(seed=seed\)"),
    ({"observation_space": gym.spaces.Box(-1.0, 1.0, (3,), np.float32)},
     r"shape \(2,\), but observation_space has shape \(3,\)"),
    ({"step": lambda self, a: (np.array([np.nan, 0], np.float32), 0.0, False, False, {})},
     r"NaN or inf"),
    ({"step": lambda self, a: (np.zeros(2, np.float32), float("inf"), False, False, {})},
     r"reward of inf"),
    ({"step": lambda self, a: (np.zeros(2, np.float32), np.ones(2), False, False, {})},
     r"reward of type ndarray and shape \(2,\)"),
    ({"action_space": "discrete"}, r"action_space is str, not a gymnasium.spaces.Space"),
])
def test_what_makes_training_impossible_raises_with_the_fix(overrides, message):
    with pytest.raises(EnvCheckError, match=message):
        check_env(broken(**overrides), warn=False)


def _unseeded_reset(self, *, seed=None, options=None):
    super(type(self), self).reset(seed=None)  # ignores the seed
    self.position = np.random.default_rng().uniform(-1, 1, size=2).astype(np.float32)
    self.t = 0
    return self.position.copy(), {}


def _huge_step(self, action):
    obs, reward, terminated, truncated, info = Healthy.step(self, action)
    return obs * 1e6, reward * 1e5, terminated, truncated, info


@pytest.mark.parametrize("overrides, message", [
    ({"reset": _unseeded_reset}, r"ignores its seed.*self\.np_random"),
    ({"step": lambda self, a: (np.zeros(2), 0.0, False, False, {})},
     r"dtype float64, but observation_space has dtype float32"),
    ({"step": lambda self, a: (np.full(2, 20.0, np.float32), 0.0, False, False, {})},
     r"outside observation_space's bounds"),
    ({"step": lambda self, a: (np.zeros(2, np.float32), 0.0, 0, 0, {})},
     r"terminated as int, not bool"),
    ({"step": lambda self, a: (np.zeros(2, np.float32), 0.0, False, False, {})},
     r"never changed over 200 random steps"),
    ({"observation_space": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32), "step": _huge_step},
     r"observations reach 1\.\d+e\+0[56].*normalize_observations"),
    ({"step": _huge_step, "observation_space": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)},
     r"rewards reach 1e\+05.*divide by 100000\)"),
])
def test_problems_that_slow_or_spoil_training_are_reported_once_with_the_fix(overrides, message):
    with pytest.warns(UserWarning, match=message):
        problems = check_env(broken(**overrides))
    assert len(problems) == len(set(problems))
    assert sum(bool(__import__("re").search(message, p)) for p in problems) == 1, problems


def test_framework_tensors_are_reported():
    torch = pytest.importorskip("torch")

    def tensor_step(self, action):
        obs, reward, terminated, truncated, info = Healthy.step(self, action)
        return torch.from_numpy(obs), reward, terminated, truncated, info

    problems = check_env(broken(step=tensor_step), warn=False)
    assert any("returns a torch tensor, not a numpy array" in p and "np.asarray" in p
               for p in problems), problems


class DictHealthy(Healthy):
    """Healthy's walk observed as a Dict (what a goal env or an image-and-vector env returns)."""

    observation_space = gym.spaces.Dict({"position": Healthy.observation_space,
                                         "flag": gym.spaces.Discrete(2)})

    def reset(self, *, seed=None, options=None):
        position, info = super().reset(seed=seed, options=options)
        return {"position": position, "flag": 0}, info

    def step(self, action):
        position, *rest = super().step(action)
        return {"position": position, "flag": int(action)}, *rest


def test_dict_observations_are_checked_leaf_by_leaf():
    assert check_env(DictHealthy()) == []
    assert check_env("kerasrl/BitFlipping-v0") == []  # a Dict of MultiBinary leaves

    def unseeded(self, *, seed=None, options=None):
        super(DictHealthy, self).reset(seed=None)
        self.position = np.random.default_rng().uniform(-1, 1, size=2).astype(np.float32)
        self.t = 0
        return {"position": self.position.copy(), "flag": 0}, {}

    with pytest.warns(UserWarning, match=r"ignores its seed"):
        check_env(type("Unseeded", (DictHealthy,), {"reset": unseeded})())


def test_public_name_and_other_inputs():
    assert kerasrl.check_env is check_env
    assert check_env(lambda: Healthy(), warn=False) == []
    with pytest.raises(EnvCheckError, match="returned int, not a gymnasium.Env"):
        check_env(lambda: 3)
    with pytest.raises(EnvCheckError, match="takes a gymnasium.Env"):
        check_env(3.5)


def test_each_problem_has_a_kind_and_old_api_errors_are_type_errors():
    problems = check_env(broken(step=lambda self, a: (np.zeros(2), 0.0, False, False, {})),
                         warn=False)
    assert [p.kind for p in problems] == ["observation-dtype", "observations-constant"], problems
    with pytest.raises(TypeError, match=r"old Gym API.*shimmy"):  # EnvCheckError is one too
        check_env(broken(step=_old_step))
    with pytest.raises(TypeError, match=r"old Gym API.*shimmy"):
        check_env(broken(reset=_old_reset))


def test_the_env_action_space_stream_is_left_alone():
    env, expected = Healthy(), gym.spaces.Discrete(2)
    env.action_space = gym.spaces.Discrete(2)  # its own, not the class's shared one
    env.action_space.seed(5)
    expected.seed(5)
    check_env(env, warn=False)
    assert [env.action_space.sample() for _ in range(20)] == [
        expected.sample() for _ in range(20)]


def test_framework_tensor_rewards_are_reported():
    torch = pytest.importorskip("torch")

    def tensor_reward(self, action):
        obs, reward, terminated, truncated, info = Healthy.step(self, action)
        return obs, torch.tensor(reward), terminated, truncated, info

    problems = check_env(broken(step=tensor_reward), warn=False)
    assert [p.kind for p in problems] == ["framework-tensor-reward"], problems
    assert "returns the reward as a torch tensor: return float(reward)" in problems[0]


class StrictMasked(gym.Env):
    """Refuses (raises on) a masked action, as board-game envs do: only a checker that steps with
    allowed actions gets through it."""

    observation_space = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, via="info", shape=(3,), empty_at=None, space=None):
        self.via, self.shape, self.empty_at = via, shape, empty_at
        if space is not None:
            self.action_space = space

    def _mask(self):
        mask = (self.np_random.random(3) < 0.5).astype(np.int8)
        mask[self.np_random.integers(3)] = 1
        if self.empty_at is not None and self.t >= self.empty_at:
            mask[:] = 0
        self.mask = mask
        return np.resize(mask, self.shape)

    def action_masks(self):
        return np.resize(self.mask, self.shape) if self.via == "method" else self.mask

    def _info(self):
        mask = self._mask()
        return {"action_mask": mask} if self.via == "info" else {}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        info = self._info()
        return self.mask.astype(np.float32), info

    def step(self, action):
        if not self.mask[action]:
            raise RuntimeError(f"action {action} is not allowed here")
        self.t += 1
        info = self._info()
        return self.mask.astype(np.float32), 1.0, False, self.t >= 20, info


@pytest.mark.parametrize("via", ["info", "method"])
def test_masked_envs_are_stepped_with_allowed_actions_only(via):
    assert check_env(StrictMasked(via=via), steps=300) == []


@pytest.mark.parametrize("env, message", [
    (StrictMasked(shape=(4,)), r"info\['action_mask'\] after StrictMasked.reset\(\): the action mask has shape "
                               r"\(1, 4\); expected \(1, 3\)"),
    (StrictMasked(via="method", shape=(2,)), r"StrictMasked.action_masks\(\) after reset\(\): .*shape \(1, 2\)"),
    (StrictMasked(empty_at=5), r"after StrictMasked.step\(\) 5: the action mask of row 0 allows no action.*"
                               r"end the episode \(terminated=True\)"),
    (StrictMasked(space=gym.spaces.Box(-1, 1, (3,))), r"action masks need a Discrete or MultiDiscrete action space"),
])
def test_broken_masks_raise_naming_where(env, message):
    with pytest.raises(EnvCheckError, match=message):
        check_env(env)


def test_an_agent_on_a_broken_mask_env_is_refused_when_made():
    kerasrl.DQN(lambda: StrictMasked(), seed=0)  # the check at creation steps with allowed actions only
    with pytest.raises(EnvCheckError, match="allows no action"):
        kerasrl.DQN(lambda: StrictMasked(empty_at=3), seed=0)


def test_a_vector_env_given_as_the_env_names_the_id_and_n_envs():
    """kerasrl builds the vector env from one env; gym.make_vec's result is refused saying so."""
    envs = gym.make_vec("CartPole-v1", num_envs=4)
    with pytest.raises(TypeError, match=r"env is a vector env \(CartPoleVectorEnv, 4 envs\).*"
                                        r"pass 'CartPole-v1' with n_envs=4"):
        kerasrl.PPO(envs)
    envs.close()
