"""DQN on the active backend: learning on tiny envs with known answers, models, targets, errors."""

from __future__ import annotations

import warnings

import gymnasium as gym
import keras
import numpy as np
import pytest

import kerasrl
from kerasrl.envs.testing import ChainEnv, IdentityEnv

pytestmark = pytest.mark.backend

FAST = dict(learning_rate=1e-3, learning_starts=200, train_freq=1, batch_size=32,
            target_update_interval=100, exploration_fraction=0.3, gamma=0.9, buffer_size=5000)


@pytest.mark.slow_on_other_backends
def test_learns_identity_env_to_the_optimum():
    agent = kerasrl.DQN(lambda: IdentityEnv(4, 20), seed=0, **FAST)
    random_return = agent.evaluate(episodes=10)["mean_return"]
    agent.fit(2500, progress=False)
    result = agent.evaluate(episodes=10)
    # Random play names the state 1 time in 4 (5 of 20); the optimum is 20.
    assert result["mean_return"] == 20.0, (random_return, result)


@pytest.mark.slow_on_other_backends
def test_learns_to_walk_the_chain_by_bootstrapping():
    # Bailing pays 0.1 at once; walking 5 states pays 1 at the end (0.9**4 = 0.66 discounted).
    agent = kerasrl.DQN(lambda: ChainEnv(5), seed=0, n_envs=2, **FAST)
    agent.fit(3000, progress=False)
    assert agent.evaluate(episodes=4)["mean_return"] == 1.0
    q = agent.policy.q_values(np.eye(5, dtype=np.float32))
    assert np.all(q[:, 1] > q[:, 0])
    np.testing.assert_allclose(q[:, 1], 0.9 ** np.arange(4, -1, -1), rtol=0.2)


class Subclassed(keras.Model):
    def __init__(self, n_actions, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(32, activation="relu")
        self.head = keras.layers.Dense(n_actions)

    def call(self, x, training=False):
        return self.head(self.hidden(x))


@pytest.mark.slow_on_other_backends
@pytest.mark.parametrize("kind", ["sequential", "functional", "subclassed", "builder"])
def test_any_keras_model_is_a_q_network(kind):
    if kind == "sequential":
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(4)])
    elif kind == "functional":
        model = kerasrl.networks.mlp((4,), 4, (16,))
    elif kind == "subclassed":
        model = Subclassed(4)
    else:
        model = lambda obs_space, act_space: kerasrl.networks.mlp(obs_space.shape, act_space.n, (16,))
    agent = kerasrl.DQN(lambda: IdentityEnv(4, 20), model=model, seed=0, **FAST)
    agent.fit(1500, progress=False)
    assert agent.evaluate(episodes=5)["mean_return"] > 15
    if not callable(model) or isinstance(model, keras.Model):
        assert agent.model is model  # the agent owns the user's one copy and trains it


@pytest.mark.slow_on_other_backends
def test_default_network_is_a_cnn_for_image_observations():
    """Without model=, image-like observations (H, W, C) get the default CNN, with the 1/255
    scaling inside the network for uint8 images (so saved and exported policies take raw pixels);
    float images are not rescaled, and vector observations get the MLP."""
    from image_env import QuadrantEnv

    def kinds(agent):
        return [type(layer).__name__ for layer in agent.model.layers]

    pixels = kerasrl.DQN(QuadrantEnv, seed=0, learning_starts=32, buffer_size=200, batch_size=8,
                         train_freq=4)
    assert kinds(pixels)[1:4] == ["Rescaling", "Conv2D", "Conv2D"], kinds(pixels)
    rescaling = pixels.model.layers[1]
    assert rescaling.scale == pytest.approx(1 / 255)
    assert pixels.buffer.observations.dtype == np.uint8  # stored as the env gives them
    pixels.fit(total_steps=96, progress=False)
    obs = np.stack([QuadrantEnv()._obs() for _ in range(2)])
    np.testing.assert_allclose(pixels.policy.q_values(obs), keras.ops.convert_to_numpy(
        pixels.model(obs.astype(np.float32))), rtol=1e-5, atol=1e-6)

    floats = kerasrl.DQN(lambda: QuadrantEnv(np.float32), seed=0)
    assert "Rescaling" not in kinds(floats) and kinds(floats).count("Conv2D") == 2
    vectors = kerasrl.DQN(lambda: IdentityEnv(4, 20), seed=0)
    assert "Conv2D" not in kinds(vectors) and "Dense" in kinds(vectors)


def test_target_starts_equal_and_hard_sync_copies():
    agent = kerasrl.DQN(lambda: IdentityEnv(4, 20), seed=0, learning_starts=50, train_freq=1,
                        target_update_interval=10_000, batch_size=8)
    online = [np.asarray(w) for w in agent.model.get_weights()]
    for t, o in zip(agent.target_weights, online):
        np.testing.assert_array_equal(t, o)
    agent.fit(300, progress=False)
    moved = [np.asarray(w) for w in agent.model.get_weights()]
    assert any(not np.array_equal(a, b) for a, b in zip(moved, online))
    # No sync was due: the target is still the initial weights.
    for t, o in zip(agent.target_weights, online):
        np.testing.assert_array_equal(t, o)


def test_soft_sync_is_polyak_averaging():
    tau = 0.25
    agent = kerasrl.DQN(lambda: IdentityEnv(4, 20), seed=0, learning_starts=10, train_freq=2,
                        target_update_interval=1, tau=tau, batch_size=8)
    agent.fit(12, progress=False)  # the first training round syncs nothing new: online == target
    before_online = [np.asarray(w) for w in agent.model.get_weights()]
    before_target = agent.target_weights
    agent.fit(14, progress=False)  # two env steps -> two syncs due, then one round
    # Two syncs with unchanged online weights are one step of 1 - (1 - tau)^2.
    effective = 1 - (1 - tau) ** 2
    for t, o, old in zip(agent.target_weights, before_online, before_target):
        np.testing.assert_allclose(t, effective * o + (1 - effective) * old, rtol=1e-5, atol=1e-7)


def test_nan_loss_stops_training_naming_the_update():
    class NaNReward(IdentityEnv):
        def step(self, action):
            obs, _, term, trunc, info = super().step(action)
            return obs, float("nan"), term, trunc, info

    # check_env=False: the env check would refuse the NaN rewards when the agent is made
    agent = kerasrl.DQN(lambda: NaNReward(), seed=0, learning_starts=20, train_freq=1, batch_size=4,
                        check_env=False)
    with pytest.raises(FloatingPointError, match=r"loss became nan at update 1 "):
        agent.fit(100, progress=False)


def test_continuous_action_space_is_refused():
    with pytest.raises(ValueError, match="discrete action space.*kerasrl.PPO"):
        kerasrl.DQN("Pendulum-v1")


def test_model_with_wrong_output_size_is_refused():
    with pytest.raises(ValueError, match=r"must output \(batch, 2\).*outputs \(2, 3\).*Dense\(2\)"):
        kerasrl.DQN("CartPole-v1", model=kerasrl.networks.mlp((4,), 3, (8,)))


def test_a_model_cannot_belong_to_two_agents():
    model = kerasrl.networks.mlp((4,), 2, (8,))
    kerasrl.DQN("CartPole-v1", model=model)
    with pytest.raises(ValueError, match="already belongs to another kerasrl agent"):
        kerasrl.DQN("CartPole-v1", model=model)


class OldGymEnv:
    """The pre-Gymnasium API: reset returns obs, step returns a 4-tuple."""

    observation_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, {}


def test_old_gym_step_api_is_refused_with_the_fix():
    with pytest.raises(TypeError, match="old Gym API.*shimmy"):
        agent = kerasrl.DQN(OldGymEnv, learning_starts=0)
        agent.fit(10, progress=False)


def test_framework_tensor_observations_are_converted_once_with_a_warning():
    class TensorEnv(IdentityEnv):
        def _obs(self):
            return keras.ops.convert_to_tensor(super()._obs())

    import kerasrl.envs.wrappers as wrappers

    wrappers._warned_framework = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent = kerasrl.DQN(TensorEnv, seed=0, **FAST)
        agent.fit(600, progress=False)
    messages = [str(w.message) for w in caught if "converts them to numpy" in str(w.message)]
    if type(keras.ops.convert_to_tensor(np.zeros(1))).__module__.startswith("numpy"):
        pytest.fail("backend returned numpy; the test would not exercise the conversion")
    assert len(messages) == 1
    assert agent.buffer.observations.dtype == np.float32


@pytest.mark.slow_on_other_backends
def test_predict_and_policy_share_the_learned_weights():
    agent = kerasrl.DQN(lambda: IdentityEnv(4, 20), seed=0, **FAST)
    agent.fit(1500, progress=False)
    obs = np.eye(4, dtype=np.float32)
    np.testing.assert_array_equal(agent.predict(obs), np.arange(4))
    np.testing.assert_array_equal(agent.policy(obs[2]), 2)
    np.testing.assert_allclose(agent.policy.q_values(obs), keras.ops.convert_to_numpy(agent.model(obs)),
                               rtol=1e-5, atol=1e-6)


def test_predict_refuses_observations_that_are_not_finite():
    """A NaN observation got action 0 (the argmax of NaN values) without a word."""
    agent = kerasrl.DQN(lambda: IdentityEnv(4, 20), seed=0, **FAST)
    obs = np.eye(4, dtype=np.float32)
    obs[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"Observation 2 holds nan at \(1,\): a policy acts on finite"):
        agent.predict(obs)
    with pytest.raises(ValueError, match=r"Observation 0 holds inf at \(3,\)"):
        agent.policy(np.array([0, 0, 0, np.inf], np.float32))  # one observation: row 0
    np.testing.assert_array_equal(agent.predict(np.eye(4, dtype=np.float32)).shape, (4,))


def test_fit_counts_the_whole_run_and_pauses_with_stop_at():
    agent = kerasrl.DQN(lambda: IdentityEnv(4, 20), seed=0, **FAST)
    agent.fit(1000, stop_at=400, progress=False)
    assert agent.num_timesteps == 400
    agent.fit(1000, progress=False)
    assert agent.num_timesteps == 1000
    with pytest.warns(UserWarning, match="already taken 1000 env steps"):
        agent.fit(1000, progress=False)
    assert len(agent.history.episodes) == 1000 // 20


def test_unknown_hyperparameter_lists_the_known_ones():
    with pytest.raises(TypeError, match="no field 'learnin_rate'.*learning_rate"):
        kerasrl.DQN("CartPole-v1", learnin_rate=1e-3)


@pytest.mark.slow_on_other_backends  # tests/test_parity.py: these updates agree across backends
def test_double_dueling_n_step_prioritized_learns_the_chain():
    agent = kerasrl.DQN(lambda: ChainEnv(5), seed=0, n_envs=2, double_q=True, dueling=True,
                        n_step_return=3, prioritized_replay=True, **FAST)
    agent.fit(3000, progress=False)
    assert agent.evaluate(episodes=4)["mean_return"] == 1.0
    assert agent.buffer.beta > 0.9  # annealed toward 1 over the run
    assert any(layer.__class__.__name__ == "DuelingCombine" for layer in agent.model.layers)


@pytest.mark.parametrize("option, value, message", [
    ("n_step_return", 0, "n_step_return must be an integer of at least 1"),
    ("prioritized_replay_alpha", 1.5, r"prioritized_replay_alpha must be in \[0, 1\]"),
    ("prioritized_replay_alpha", -0.1, r"prioritized_replay_alpha must be in \[0, 1\]"),
])
def test_invalid_variant_settings_are_refused(option, value, message):
    with pytest.raises(ValueError, match=message):
        kerasrl.DQN("CartPole-v1", **{option: value})


def test_one_update_runs_through_three_agent_modules():
    """docs/architecture.md ("One DQN update, file by file"): an env step with its training round
    and target sync runs in agents/dqn.py, agents/q_learner.py, agents/base.py and
    agents/learner.py, and no other
    module of kerasrl.agents (the rest it calls is the math and storage library)."""
    import sys

    from kerasrl.logger import RunLogger

    agent = kerasrl.DQN(ChainEnv, seed=0, learning_starts=16, train_freq=1, batch_size=8,
                        buffer_size=100, target_update_interval=1)
    agent.fit(40, progress=False)
    called = set()

    def record(frame, event, arg):
        if event == "call" and "/kerasrl/" in frame.f_code.co_filename:
            called.add(frame.f_code.co_filename.replace("\\", "/").split("/kerasrl/")[-1])

    n_updates, steps = agent.n_updates, agent.num_timesteps
    sys.settrace(record)
    try:
        agent.learn_python_loop(80, steps + 1, RunLogger(80, progress=False), None)
    finally:
        sys.settrace(None)
    assert (agent.num_timesteps, agent.n_updates) == (steps + 1, n_updates + 1)
    assert {f for f in called if f.startswith("agents/")} == {
        "agents/dqn.py", "agents/q_learner.py", "agents/base.py", "agents/learner.py"}
    assert "buffers/replay.py" in called  # the trace saw the step's storage: it is not empty


def test_epsilon_greedy_runs_the_network_only_when_some_env_acts_greedily(monkeypatch):
    """Random actions are drawn first; the network runs on a step only if an env acts greedily
    (SB3's DQN skips it likewise), and the actions are those of running it every step."""
    from kerasrl.policies import epsilon_greedy

    greedy = np.array([1, 0, 1, 1])
    for epsilon in (0.0, 0.5, 1.0):
        calls = []
        lazy = epsilon_greedy(lambda: calls.append(1) or greedy, 2, epsilon,
                              np.random.default_rng(7), size=4)
        eager = epsilon_greedy(greedy, 2, epsilon, np.random.default_rng(7))
        np.testing.assert_array_equal(lazy, eager)
        assert len(calls) == (0 if epsilon == 1.0 else 1)

    for epsilon, expected in ((1.0, []), (0.0, [2] * 50)):
        agent = kerasrl.DQN(lambda: IdentityEnv(4, 20), seed=0, learning_starts=0, n_envs=2,
                            exploration_initial_eps=epsilon, exploration_final_eps=epsilon)
        forwards = []
        original = agent.learner.greedy_actions
        monkeypatch.setattr(agent.learner, "greedy_actions",
                            lambda obs, noise=None: forwards.append(len(obs)) or original(obs, noise))
        agent.fit(100, progress=False)
        # epsilon 1: every env explores at every step; 0: once per vector step, for both envs
        assert forwards == expected


def test_a_saved_q_policy_acts_epsilon_greedily_running_its_network_only_when_needed(monkeypatch):
    """QPolicy.predict (a loaded policy, Ray's remote actors) draws first as the agent's loop does:
    epsilon 1 never runs the network; otherwise the actions are the eager formula's from the same
    draws, action masks included."""
    from kerasrl.masks import masked_argmax
    from kerasrl.policies import epsilon_greedy

    agent = kerasrl.DQN(lambda: IdentityEnv(4, 20), seed=0, hidden_sizes=(8,), check_env=False)
    policy = agent.policy
    obs = np.eye(4, dtype=np.float32)[[0, 1, 2, 3, 1, 2]]
    masks = np.ones((6, 4), bool)
    masks[:, 0] = False
    forwards = []
    original = policy._batch_q_values
    monkeypatch.setattr(policy, "_batch_q_values", lambda o: forwards.append(len(o)) or original(o))
    for epsilon, mask in ((1.0, None), (1.0, masks), (0.3, None), (0.3, masks), (0.0, masks)):
        forwards.clear()
        actions = policy.predict(obs, deterministic=False, epsilon=epsilon, rng=np.random.default_rng(5),
                                 action_mask=mask)
        assert forwards == ([] if epsilon == 1.0 else [6])
        greedy = masked_argmax(original(obs), mask)
        eager = epsilon_greedy(greedy, 4, epsilon, np.random.default_rng(5), mask)
        np.testing.assert_array_equal(actions, eager)
        if mask is not None:
            assert np.all(actions != 0)
    np.testing.assert_array_equal(policy.predict(obs[0]), masked_argmax(original(obs[:1]), None)[0])


def test_a_dueling_agent_loads_from_its_checkpoint(tmp_path):
    """The checkpoint's network is the whole dueling network: loading does not wrap it in a
    second pair of streams (it did, and the saved state then did not fit)."""
    agent = kerasrl.DQN(ChainEnv, seed=0, dueling=True, learning_starts=16, batch_size=8,
                        buffer_size=100)
    agent.fit(40, progress=False)
    loaded = kerasrl.DQN.load(agent.save(tmp_path / "ckpt"), env=ChainEnv)
    assert len(loaded.q_network.weights) == len(agent.q_network.weights)
    for a, b in zip(agent.learner.weights("q"), loaded.learner.weights("q")):
        np.testing.assert_array_equal(a, b)
