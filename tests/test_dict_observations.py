"""Dict and Tuple observations (docs/dict_observations.md): the leaves and their flat form, the
env boundary (sync and subprocess vector envs), the default networks' per-leaf encoders, users'
models that take the leaves by name, learning on an image + vector task, checkpoints, saved
policies across backends, and ONNX exports with one named input per leaf."""

from __future__ import annotations

import functools

import gymnasium as gym
import keras
import numpy as np
import pytest

import kerasrl
from kerasrl.envs import make_vec_env
from kerasrl.envs.testing import ImageVectorEnv
from kerasrl.spaces import FlatObservations, flatten, leaves, split
from checkpoint_runs import BACKENDS, checkpoint_runs

FAST_DQN = dict(seed=0, learning_starts=200, train_freq=4, batch_size=32, learning_rate=1e-3,
                target_update_interval=100, exploration_fraction=0.3, gamma=0.5, check_env=False)
NESTED = ImageVectorEnv(layout="nested").observation_space


def nested_batch(n, seed=0):
    env = ImageVectorEnv(layout="nested")
    env.reset(seed=seed)
    obs = [env._draw() for _ in range(n)]
    return obs, {"image": np.stack([o["image"] for o in obs]),
                 "extra": {"flag": np.array([o["extra"]["flag"] for o in obs]),
                           "noise": np.stack([o["extra"]["noise"] for o in obs])}}


# -- the leaves, numpy side ----------------------------------------------------------------------
def test_leaves_are_named_by_path_in_the_spaces_order():
    found = leaves(NESTED)
    assert [(leaf.name, leaf.shape, leaf.start, leaf.size) for leaf in found] == [
        ("extra.flag", (2,), 0, 2), ("extra.noise", (3,), 2, 3), ("image", (7, 7, 1), 5, 49)]
    tuple_leaves = leaves(ImageVectorEnv(layout="tuple").observation_space)
    assert [leaf.name for leaf in tuple_leaves] == ["item_0", "item_1"]
    space = FlatObservations(NESTED)
    assert space.shape == (54,) and space.dtype == np.float32
    np.testing.assert_array_equal(space.high[5:], 255.0)


def test_flatten_one_observation_or_a_batch_and_split_back():
    space = FlatObservations(NESTED)
    single, batch = nested_batch(5)
    flat = flatten(space, batch)
    assert flat.shape == (5, 54) and flat.dtype == np.float32
    for i, obs in enumerate(single):  # a batch flattens as its observations one by one
        np.testing.assert_array_equal(flatten(space, obs), flat[i])
        np.testing.assert_array_equal(flat[i, :2], np.eye(2)[obs["extra"]["flag"]])  # one-hot
    leaves_back = split(space, flat)
    np.testing.assert_array_equal(leaves_back["image"], batch["image"].astype(np.float32))
    np.testing.assert_array_equal(leaves_back["extra.noise"], batch["extra"]["noise"])
    with pytest.raises(ValueError, match="has no key 'noise'"):
        flatten(space, {"image": batch["image"], "extra": {"flag": batch["extra"]["flag"]}})


def test_flatten_matches_gymnasiums_flatten_on_every_leaf_kind():
    space = gym.spaces.Dict({"b": gym.spaces.MultiBinary(3), "d": gym.spaces.MultiDiscrete([2, 3]),
                             "s": gym.spaces.Box(0, 1, ()), "m": gym.spaces.Box(-1, 1, (2, 2)),
                             "t": gym.spaces.Tuple((gym.spaces.Discrete(3, start=1),))})
    flat_space = FlatObservations(space)
    assert [leaf.name for leaf in flat_space.leaves] == ["b", "d", "m", "s", "t.item_0"]
    space.seed(0)
    samples = [space.sample() for _ in range(20)]
    expected = np.stack([gym.spaces.flatten(space, o) for o in samples]).astype(np.float32)
    np.testing.assert_array_equal(np.stack([flatten(flat_space, o) for o in samples]), expected)
    batch = {key: np.stack([o[key] for o in samples]) for key in ("b", "d", "m", "s")}
    batch["t"] = (np.array([o["t"][0] for o in samples]),)
    np.testing.assert_array_equal(flatten(flat_space, batch), expected)
    assert flat_space.contains(expected[0])


def test_a_leaf_kerasrl_cannot_carry_is_named():
    env = gym.spaces.Dict({"name": gym.spaces.Text(5), "x": gym.spaces.Box(0, 1, (2,))})
    with pytest.raises(ValueError, match="leaf 'name' is a Text space"):
        leaves(env)


@pytest.mark.parametrize("vectorization", ["sync", "subprocess"])
def test_vector_envs_carry_flat_observations_and_true_final_ones(vectorization):
    make = functools.partial(ImageVectorEnv, layout="nested", episode_length=3)
    envs = make_vec_env(make, 1, vectorization=vectorization)  # one worker: spawning costs 5 s
    try:
        assert isinstance(envs.single_observation_space, FlatObservations)
        obs, _ = envs.reset(seed=0)
        assert obs.shape == (1, 54) and obs.dtype == np.float32
        for _ in range(3):
            obs, _, terminated, truncated, info = envs.step(np.zeros(1, np.int64))
        assert truncated.all() and info["final_obs"][0].shape == (54,)
        assert not np.array_equal(info["final_obs"][0], obs[0])
    finally:
        envs.close()


# -- networks ------------------------------------------------------------------------------------
@pytest.mark.backend
def test_a_leaf_the_default_networks_cannot_encode_names_it_and_says_model():
    class Video(ImageVectorEnv):
        def __init__(self):
            super().__init__()
            self.observation_space = gym.spaces.Dict({
                "clip": gym.spaces.Box(0, 1, (2, 8, 8, 1)), "vector": gym.spaces.Box(0, 1, (2,))})

    with pytest.raises(ValueError, match=r"cannot encode observation leaf 'clip'.*Pass model="):
        kerasrl.DQN(Video, check_env=False)


@keras.saving.register_keras_serializable(package="kerasrl_tests")
class LeafQ(keras.Model):
    """A subclassed Q-network that reads the leaves from a dict by name."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.flatten = keras.layers.Flatten()
        self.hidden = keras.layers.Dense(32, activation="relu")
        self.out = keras.layers.Dense(4)

    def call(self, inputs):
        image = self.flatten(inputs["image"]) / 255.0
        return self.out(self.hidden(keras.ops.concatenate([image, inputs["vector"]], axis=-1)))


def functional_q(observation_space, action_space):
    """A functional Q-network with one named input per leaf (the builder gets the Dict space)."""
    assert isinstance(observation_space, gym.spaces.Dict)
    image = keras.Input((7, 7, 1), name="image")
    vector = keras.Input((2,), name="vector")
    x = keras.layers.Concatenate()([keras.layers.Flatten()(image) / 255.0, vector])
    x = keras.layers.Dense(32, activation="relu")(x)
    return keras.Model({"image": image, "vector": vector},
                       keras.layers.Dense(int(action_space.n))(x))


@pytest.mark.backend
@pytest.mark.parametrize("model", [functional_q, LeafQ])
def test_a_users_model_receives_the_leaves_by_name(model, tmp_path):
    user = model(ImageVectorEnv().observation_space, gym.spaces.Discrete(4)) \
        if model is functional_q else LeafQ()
    agent = kerasrl.DQN(ImageVectorEnv, model=user, **FAST_DQN)
    agent.fit(300, progress=False)
    env = ImageVectorEnv()
    obs = [env.reset(seed=s)[0] for s in range(8)]
    batch = {"image": np.stack([o["image"] for o in obs]).astype(np.float32),
             "vector": np.stack([o["vector"] for o in obs])}
    agent.sync_model()  # the weights into the Keras models, the user's among them
    direct = keras.ops.convert_to_numpy(user(batch))  # the user's own model, on its leaves
    np.testing.assert_allclose(agent.policy.q_values(batch), direct, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="already belongs to another kerasrl agent"):
        kerasrl.DQN(ImageVectorEnv, model=user, check_env=False)
    agent.policy.save(tmp_path / "p")
    loaded = kerasrl.load_policy(tmp_path / "p")
    np.testing.assert_allclose(loaded.q_values(batch), direct, rtol=1e-5, atol=1e-6)


# -- learning ------------------------------------------------------------------------------------
AGENTS = {
    "dqn": lambda: kerasrl.DQN(ImageVectorEnv, **FAST_DQN),
    "sarsa": lambda: kerasrl.SARSA(ImageVectorEnv, seed=0, n_envs=4, n_steps=8,
                                   learning_rate=3e-3, exploration_fraction=0.3, gamma=0.5,
                                   check_env=False),
    "expected_sarsa": lambda: kerasrl.ExpectedSARSA(ImageVectorEnv, seed=0, n_envs=4, n_steps=8,
                                                     learning_rate=3e-3, exploration_fraction=0.3,
                                                     gamma=0.5, check_env=False),
    "ppo": lambda: kerasrl.PPO(ImageVectorEnv, seed=0, n_envs=4, n_steps=32, batch_size=128,
                               n_epochs=4, learning_rate=3e-3, gamma=0.5, check_env=False),
    # A2C and TRPO on PPO's networks: 10.0 at 1,500 steps on seeds 0, 1 and 2 (JAX)
    "a2c": lambda: kerasrl.A2C(ImageVectorEnv, seed=0, n_envs=4, n_steps=8, learning_rate=1e-3,
                               normalize_advantage=True, gamma=0.5, check_env=False),
    "trpo": lambda: kerasrl.TRPO(ImageVectorEnv, seed=0, n_envs=4, n_steps=32, batch_size=128,
                                 n_critic_updates=4, target_kl=0.05, gamma=0.5, check_env=False),
}


@pytest.mark.backend  # on TensorFlow and PyTorch in the slow tier (all four took about 30 s on
# PyTorch, 70 s on TensorFlow: CI time); the Dict policies' parity across backends is in the fast
# tier (test_dict_policies_saved_on_each_backend_load_on_every_backend)
@pytest.mark.slow_on_other_backends
# SARSA and Expected SARSA read Dict observations through DQN's value learner: slow tier only
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if "sarsa" in name
                                  else name for name in AGENTS])
def test_each_agent_learns_from_the_image_and_the_vector(name):
    """The right action needs both leaves: one leaf alone earns 5 of 10 per episode, chance 2.5."""
    agent = AGENTS[name]()
    agent.fit(1500, progress=False)
    assert agent.evaluate(episodes=20)["mean_return"] >= 9.5


CONTINUOUS = dict(seed=0, learning_starts=200, hidden_sizes=(32, 32), batch_size=64, gamma=0.0,
                  buffer_size=5000, learning_rate=3e-3, train_freq=8, gradient_steps=8,
                  check_env=False)


@pytest.mark.backend
@pytest.mark.slow_on_other_backends
@pytest.mark.parametrize("agent_class", [kerasrl.DDPG, kerasrl.TD3, kerasrl.SAC])
def test_continuous_agents_learn_from_the_matrix_and_the_vector(agent_class):
    """Box actions: the best is +-1 or +-0.25 (side and flag); a return above -0.5 per 10 steps
    needs both leaves (the side alone earns about -1.4, the flag alone -5.3). A 5 x 5 "image" is
    below image size, so the leaf is flattened: the CNN versions took minutes per agent here."""
    agent = agent_class(functools.partial(ImageVectorEnv, size=5, continuous=True), **CONTINUOUS)
    agent.fit(1500, progress=False)
    assert agent.evaluate(episodes=10)["mean_return"] > -0.5


@pytest.mark.backend
def test_dueling_heads_sit_on_the_leaf_encoders():
    agent = kerasrl.DQN(ImageVectorEnv, dueling=True, double_q=True, **FAST_DQN)
    layer_names = [layer.name for layer in agent.q_network._flatten_layers()]
    assert {"image_conv_0", "leaf_features", "value", "advantages"} <= set(layer_names)
    env = ImageVectorEnv()
    obs = env.reset(seed=0)[0]
    assert agent.predict(obs).shape == () and agent.policy.q_values(obs).shape == (4,)


@pytest.fixture(scope="module")
def nested_dqn():
    """A DQN on the nested Dict env (a Discrete leaf among them), 400 steps, updates under way."""
    agent = kerasrl.DQN(functools.partial(ImageVectorEnv, layout="nested"), **FAST_DQN)
    agent.fit(400, progress=False)
    return agent


@pytest.mark.backend
def test_checkpoints_restore_the_flat_buffers_and_the_loop(nested_dqn, tmp_path):
    nested_dqn.save(tmp_path / "ckpt")
    loaded = kerasrl.DQN.load(tmp_path / "ckpt", env=functools.partial(ImageVectorEnv,
                                                                        layout="nested"))
    assert loaded.num_timesteps == 400 and len(loaded.buffer) == len(nested_dqn.buffer)
    np.testing.assert_array_equal(loaded.buffer.observations, nested_dqn.buffer.observations)
    np.testing.assert_array_equal(loaded.loop.observations, nested_dqn.loop.observations)
    _, batch = nested_batch(16)
    np.testing.assert_array_equal(loaded.policy.q_values(batch), nested_dqn.policy.q_values(batch))
    loaded.fit(500, progress=False)
    assert loaded.num_timesteps == 500


@pytest.mark.backend
def test_onnx_export_takes_one_named_input_per_leaf(nested_dqn, tmp_path):
    import onnxruntime as ort

    policy = nested_dqn.policy
    path = policy.export(tmp_path / "nested.onnx", include_values=True)  # checked on 256 samples
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs = session.get_inputs()
    assert [(i.name, i.shape[1:]) for i in inputs] == [
        ("extra.flag", [2]), ("extra.noise", [3]), ("image", [7, 7, 1])]
    single, batch = nested_batch(64, seed=5)
    feeds = {"extra.flag": np.eye(2, dtype=np.float32)[batch["extra"]["flag"]],
             "extra.noise": batch["extra"]["noise"],
             "image": batch["image"].astype(np.float32)}
    actions, q = session.run(None, feeds)
    np.testing.assert_array_equal(actions, policy.predict(batch))
    assert np.max(np.abs(q - policy.q_values(batch))) <= 1e-5
    assert policy.predict(single[0]) == actions[0]


# -- across backends -----------------------------------------------------------------------------
@pytest.fixture(scope="session")
def worker_runs(request, tmp_path_factory):
    """tests/checkpoint_worker.py's results (made once per session, see checkpoint_runs.py)."""
    return checkpoint_runs(request, tmp_path_factory)


@pytest.mark.cross_backend
@pytest.mark.parametrize("case", ["dict"])  # asks checkpoint_runs for the Dict policies
@pytest.mark.parametrize("name", ["dict-dqn", "dict-ppo"])
def test_dict_policies_saved_on_each_backend_load_on_every_backend(worker_runs, name, case):
    """A DQN and a PPO policy (observation normalization on) of the nested Dict env, saved on each
    backend and loaded by load_policy on every backend in fresh processes: on 200 fixed
    observations the same actions, and Q-values or logits within 1e-5. (The ONNX export with
    named inputs is checked on each backend by test_onnx_export_takes_one_named_input_per_leaf.)"""
    for saved_on in BACKENDS:
        saved = np.load(worker_runs / f"{name}-{saved_on}-saved.npz")
        assert saved["raw"].shape == (200, 4) and len(np.unique(saved["actions"])) > 1
        for loaded_on in BACKENDS:
            loaded = np.load(worker_runs / f"{name}-{saved_on}-on-{loaded_on}.npz")
            np.testing.assert_array_equal(loaded["actions"], saved["actions"])
            assert np.max(np.abs(loaded["raw"] - saved["raw"])) <= 1e-5, (name, saved_on,
                                                                          loaded_on)


class LeafCritic(keras.Model):
    """A user's subclassed critic on the leaves ({"image", "vector"}, actions), not registered
    with Keras: a checkpoint holds its weights only."""

    def __init__(self):
        super().__init__()
        self.flatten = keras.layers.Flatten()
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(1)

    def call(self, inputs):
        leaves, actions = inputs
        features = [self.flatten(leaves["image"]) / 255.0, leaves["vector"], actions]
        return self.out(self.hidden(keras.ops.concatenate(features, axis=-1)))


def test_a_users_critic_on_the_leaves_comes_back_from_model_factory(tmp_path):
    """SAC's critics of the user's, reading a Dict observation leaf by leaf, saved as weights: the
    factory's fresh critics are made to read the flat vector as the agent's did (a critic's
    adaptation, [leaves, actions]) and take the saved weights."""
    env = functools.partial(ImageVectorEnv, size=5, continuous=True)
    agent = kerasrl.SAC(env, critic=lambda o, a: LeafCritic(),
                        **{**CONTINUOUS, "learning_starts": 50, "buffer_size": 500})
    agent.fit(80, progress=False)
    path = agent.save(tmp_path / "ckpt")
    loaded = kerasrl.SAC.load(path, env=env, model_factory=lambda o, a: {
        "critic_0": LeafCritic(), "critic_1": LeafCritic()})
    for key, value in agent.learner.arrays().items():
        np.testing.assert_array_equal(loaded.learner.arrays()[key], value, err_msg=key)
    observations = agent.buffer.observations[:4, 0]
    actions = np.zeros((4, 1), np.float32)
    np.testing.assert_allclose(loaded.critics[1]([observations, actions]),
                               agent.critics[1]([observations, actions]), rtol=1e-6)
