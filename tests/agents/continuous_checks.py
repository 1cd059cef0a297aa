"""Checks shared by the DDPG, TD3 and SAC tests: learning a known answer, saving, exporting,
exact resume and the errors at creation. Each agent's test file runs them on its class."""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np
import pytest

import kerasrl
from kerasrl import backend
from kerasrl.envs.testing import IdentityEnv, TargetEnv

def T(x):  # noqa: N802  (losses take backend tensors, as inside a compiled step)
    return keras.ops.convert_to_tensor(x)


def to_np(x):
    return np.asarray(keras.ops.convert_to_numpy(x), np.float64)


# Tiny networks, a bandit (gamma 0: the best action is 1.5 x now), a round of 8 steps per 8 env
# steps: a few seconds of CPU per agent.
FAST = dict(learning_starts=200, hidden_sizes=(32, 32), batch_size=64, gamma=0.0,
            buffer_size=5000, learning_rate=3e-3, train_freq=8, gradient_steps=8)
GRID = np.linspace(-1.0, 1.0, 21, dtype=np.float32)[:, None]


def target_error(policy_or_agent) -> np.ndarray:
    """|action - best action| over a grid of observations, (21, 1)."""
    return np.abs(policy_or_agent.predict(GRID) - 1.5 * GRID)


def trained_agent(cls, **overrides):
    agent = cls(lambda: TargetEnv(), seed=0, **{**FAST, **overrides})
    before = target_error(agent)
    agent.fit(1000, progress=False)
    return agent, before


def check_learns_the_target(agent, before) -> None:
    """The actor went from a guess to the best action within 0.15 on average (the action range is
    [-2, 2] and an untrained actor is off by about 0.75 on average)."""
    after = target_error(agent)
    assert before.mean() > 0.5, before.mean()
    assert after.mean() < 0.15, (before.mean(), after.mean(), after.max())
    assert after.max() < 0.4, after.max()
    result = agent.evaluate(episodes=4)
    # 10 steps of -(error^2): -0.5 is a typical error below 0.25 on evaluation's own draws; an
    # untrained actor (actions near 0) gets about -7.5, uniform random actions about -21.
    assert result["mean_return"] > -0.5, result


def check_policy_saves_loads_and_exports(agent, tmp_path, formats=("onnx",)) -> None:
    """agent.policy -> save -> kerasrl.load_policy gives the same actions, within the bounds; the
    exports (scaling and clipping inside the graph) check themselves against the policy."""
    policy = agent.policy
    actions = policy.predict(GRID)
    assert actions.dtype == np.float32 and actions.shape == (21, 1)
    np.testing.assert_array_equal(actions, agent.predict(GRID))
    assert np.all(np.abs(actions) <= 2.0)
    # Out-of-range observations push a tanh actor to its limits: the actions stay in the bounds.
    far = policy.predict(GRID * 50.0)
    assert np.all(far >= -2.0) and np.all(far <= 2.0)
    stochastic = policy.predict(GRID, deterministic=False, rng=np.random.default_rng(0))
    assert stochastic.shape == actions.shape and not np.array_equal(stochastic, actions)
    loaded = kerasrl.load_policy(policy.save(tmp_path / "policy"))
    assert type(loaded) is type(policy)
    np.testing.assert_allclose(loaded.predict(GRID), actions, rtol=0, atol=1e-6)
    if "onnx" in formats:
        from kerasrl.export import compare_export

        path = policy.export(tmp_path / "policy.onnx", include_values=True)
        figures = compare_export(policy, path, "onnx")
        assert figures["max_action_diff"] <= 1e-5 and figures["max_value_diff"] <= 1e-5
    if "saved_model" in formats and backend.NAME != "torch":
        policy.export(tmp_path / "saved_model", format="saved_model")


def check_exact_resume(cls, tmp_path, **overrides) -> None:
    """Save halfway, load, continue: the same weights, optimizer state, buffer and episodes as one
    uninterrupted run."""
    config = dict(FAST, learning_starts=60, train_freq=4, gradient_steps=4, hidden_sizes=(16,),
                  batch_size=16, **overrides)
    straight = cls("Pendulum-v1", seed=3, **config)
    straight.fit(160, progress=False)
    first = cls("Pendulum-v1", seed=3, **config)
    first.fit(160, stop_at=100, progress=False)
    resumed = cls.load(first.save(tmp_path / "ckpt"))
    resumed.fit(160, progress=False)
    a, b = straight.learner.arrays(), resumed.learner.arrays()
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    np.testing.assert_array_equal(straight.buffer.actions, resumed.buffer.actions)
    assert straight.buffer.actions.dtype == np.float32 and straight.buffer.actions.shape[-1] == 1
    assert straight.history.updates == resumed.history.updates
    assert straight.n_updates == resumed.n_updates > 0
    if straight.obs_rms is not None:  # normalize_observations: the statistics went on exactly
        for key, value in straight.obs_rms.state_dict().items():
            np.testing.assert_array_equal(value, resumed.obs_rms.state_dict()[key], err_msg=key)
        assert straight.obs_rms.count > 100


class SmallCritic(keras.Model):
    """A user's subclassed critic, not registered with Keras: saved as weights only."""

    def __init__(self, outputs=1):
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(outputs)

    def call(self, inputs):
        observations, actions = inputs
        return self.out(self.hidden(keras.ops.concatenate([observations, actions], axis=-1)))


def check_user_critics_resume(cls, tmp_path, critic_outputs: int = 1) -> None:
    """A checkpoint keeps the user's critics' architecture beside the policy's (the default ones
    are built again from the config): a load without help resumes exactly; subclassed critics
    come back from model_factory, by name (it failed on the default critics' shapes before)."""
    from kerasrl.files import CheckpointError
    from kerasrl.networks import critic_network

    config = dict(FAST, learning_starts=60, train_freq=4, gradient_steps=4, hidden_sizes=(16,),
                  batch_size=16)
    functional = lambda o, a: critic_network(o, 1, (8,), n_outputs=critic_outputs)  # noqa: E731
    straight = cls("Pendulum-v1", critic=functional, seed=3, **config)
    straight.fit(160, progress=False)
    first = cls("Pendulum-v1", critic=functional, seed=3, **config)
    first.fit(160, stop_at=100, progress=False)
    resumed = cls.load(first.save(tmp_path / "functional"))
    assert [c.count_params() for c in resumed.critics] == [c.count_params() for c in first.critics]
    resumed.fit(160, progress=False)
    a, b = straight.learner.arrays(), resumed.learner.arrays()
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)

    with pytest.warns(UserWarning, match=r"SmallCritic will be saved as weights only.*needs the "
                                         r"model: Agent.load\(path, model_factory=f\) \(a saved "
                                         r"policy does not hold it\).*"
                                         r'\{"critic_0": \.\.\., "critic_1": \.\.\., "model": \.\.\.\}'):
        subclassed = cls("Pendulum-v1", critic=lambda o, a: SmallCritic(critic_outputs), seed=3,
                         **config)
    subclassed.fit(100, progress=False)
    path = subclassed.save(tmp_path / "subclassed")
    with pytest.raises(CheckpointError, match=r"weights only of critic_0 \(.*SmallCritic\), "
                                              r"critic_1 .*model_factory="):
        cls.load(path)
    loaded = cls.load(path, model_factory=lambda o, a: {
        "critic_0": SmallCritic(critic_outputs), "critic_1": SmallCritic(critic_outputs)})
    assert all(isinstance(critic, SmallCritic) for critic in loaded.critics)
    for key, value in subclassed.learner.arrays().items():
        np.testing.assert_array_equal(loaded.learner.arrays()[key], value, err_msg=key)


class Box3(gym.Env):
    """Pendulum-like observations with a chosen action space."""

    def __init__(self, action_space):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = action_space

    def reset(self, *, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {}


def check_bad_input_is_refused_at_creation(cls, critic_outputs: int = 1) -> None:
    """`critic_outputs`: what each critic outputs per (s, a) (TQC: its quantiles)."""
    name = cls.__name__
    with pytest.raises(ValueError, match=f"{name} needs a continuous \\(Box\\) action space.*DQN"):
        cls(lambda: IdentityEnv(3), **FAST)
    unbounded = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    with pytest.raises(ValueError, match=r"unbounded.*Declare the range.*TransformAction\(env, lambda a: a, "
                                         r"gymnasium\.spaces\.Box\(LOW, HIGH, \(1,\)\)\).*ClipAction declares"):
        cls(lambda: Box3(unbounded), **FAST)
    box = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def obs_only_critic(observation_space, action_space):  # forgot the action input
        inputs = keras.Input((3,))
        return keras.Model(inputs, keras.layers.Dense(1)(inputs))

    with pytest.raises(ValueError, match=r"critic 0 \(Functional\) must take two inputs, "
                                         r"\[observations \(batch, 3\), actions \(batch, 1\)\]"):
        cls(lambda: Box3(box), critic=obs_only_critic, **FAST)

    def wide_critic(observation_space, action_space):
        obs, act = keras.Input((3,)), keras.Input((1,))
        return keras.Model([obs, act], keras.layers.Dense(2)(keras.layers.Concatenate()([obs, act])))

    what = "Q-values" if critic_outputs == 1 else f"{critic_outputs} quantiles of the return"
    with pytest.raises(ValueError, match=fr"{what} of shape \(batch, {critic_outputs}\).*outputs "
                                         fr"\(2, 2\).*Dense\({critic_outputs}\)"):
        cls(lambda: Box3(box), critic=wide_critic, **FAST)


def check_user_models_are_used(cls, actor_outputs: int, critic_outputs: int = 1) -> None:
    """A user's actor and critic (models, the critic cloned per extra critic) drive the agent."""
    from kerasrl.networks import actor_network, critic_network

    env = lambda: TargetEnv()  # noqa: E731
    space = TargetEnv().observation_space
    actor = actor_network(space, actor_outputs, (8,), None if actor_outputs == 2 else "tanh")
    critic = critic_network(space, 1, (8,), n_outputs=critic_outputs)
    agent = cls(env, model=actor, critic=critic, **FAST)
    assert agent.actor is actor and agent.critics[0] is critic
    assert all(c is not critic for c in agent.critics[1:])
    assert [w.shape for w in agent.critics[-1].get_weights()] == [w.shape for w in critic.get_weights()]
    before = actor.get_weights()[0].copy()
    agent.fit(FAST["learning_starts"] + 16, progress=False)
    assert not np.array_equal(actor.get_weights()[0], before)  # fit's end writes the weights in


# -- driving Stable-Baselines3(-contrib)'s `train` with kerasrl's batches (SAC's family) -----------
class TwoJoints(gym.Env):
    """Four numbers observed, two actions in [-1, 1]: only the spaces matter to the update checks
    (their updates are driven with batches made up by `made_up_batch`)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), {}

    def step(self, action):
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), 0.0, False, True, {}


def made_up_batch(rng, batch_size: int) -> dict[str, np.ndarray]:
    """One gradient step's batch for TwoJoints, (1, B, ...) as `agent.update` takes it, with
    "dones" (B,) beside for SB3 (kerasrl reads the discounts) and both Gaussian draws."""
    dones = (rng.random(batch_size) < 0.2).astype(np.float32)
    shape = (1, batch_size)
    return dict(observations=rng.uniform(-1, 1, (*shape, 4)).astype(np.float32),
                actions=rng.uniform(-1, 1, (*shape, 2)).astype(np.float32),
                next_observations=rng.uniform(-1, 1, (*shape, 4)).astype(np.float32),
                rewards=rng.standard_normal(shape).astype(np.float32), dones=dones,
                discounts=(0.99 * (1.0 - dones))[None], weights=np.ones(shape, np.float32),
                noise=rng.standard_normal((*shape, 2)).astype(np.float32),
                next_noise=rng.standard_normal((*shape, 2)).astype(np.float32))


def feed_sb3(model, batch: dict, draws: list, patch) -> None:
    """Make SB3's `model` train on `batch` (the dict's current contents at each `train`) and draw
    its actions' Gaussian noise from `draws`, in order (torch's Normal.rsample patched with
    `patch`, a pytest MonkeyPatch)."""
    import torch
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    def sample(batch_size, env=None):  # SB3's replay buffer, handing over this update's batch
        fields = dict(observations=torch.tensor(batch["observations"][0]),
                      actions=torch.tensor(batch["actions"][0]),
                      next_observations=torch.tensor(batch["next_observations"][0]),
                      dones=torch.tensor(batch["dones"][:, None]),
                      rewards=torch.tensor(batch["rewards"][0][:, None]))
        if "discounts" in ReplayBufferSamples._fields:  # SB3 2.6 and later (n-step replay)
            fields["discounts"] = None
        return ReplayBufferSamples(**fields)

    def rsample(self, sample_shape=torch.Size()):  # the actor's draws: kerasrl's noise, in order
        return self.loc + self.scale * torch.tensor(draws.pop(0))

    model.replay_buffer.sample = sample
    patch.setattr(torch.distributions.Normal, "rsample", rsample)
