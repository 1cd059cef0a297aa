"""normalize_observations for the off-policy continuous agents (DDPG, TD3, SAC, NAF): the running
statistics are those of the observations acted on, and one normalization is applied when acting,
when learning from the replay buffer (which holds raw observations), in the saved and exported
policy and in a resumed checkpoint. Exact resume of training with it: test_naf.py."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import kerasrl

pytestmark = pytest.mark.backend

CLASSES = {"ddpg": kerasrl.DDPG, "td3": kerasrl.TD3, "sac": kerasrl.SAC, "naf": kerasrl.NAF}
SMALL = dict(normalize_observations=True, clip_obs=3.0, hidden_sizes=(16,), learning_starts=1000,
             buffer_size=1000, batch_size=32, check_env=False, seed=1)


def by_hand(agent, observations):
    """(x - mean) / sqrt(var + 1e-8), clipped to +-clip_obs: the documented rule."""
    rms = agent.obs_rms
    z = (observations.astype(np.float64) - rms.mean) / np.sqrt(rms.var + 1e-8)
    return np.clip(z, -agent.config.clip_obs, agent.config.clip_obs).astype(np.float32)


@pytest.fixture(scope="module", params=sorted(CLASSES))
def agent(request):
    """Random warm-up steps on Pendulum-v1 (whose angular velocity is far from unit scale)."""
    agent = CLASSES[request.param]("Pendulum-v1", **SMALL, n_envs=2)
    with pytest.warns(UserWarning, match="No update will run"):  # no update is needed here
        agent.fit(300, progress=False)
    return agent


def test_statistics_are_those_of_the_observations_acted_on(agent):
    stored = agent.buffer.observations[:agent.buffer.position].reshape(-1, 3).astype(np.float64)
    assert len(stored) == 300 and agent.obs_rms.count == pytest.approx(300, abs=1e-3)
    np.testing.assert_allclose(agent.obs_rms.mean, stored.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(agent.obs_rms.var, stored.var(axis=0), rtol=1e-5, atol=1e-6)
    assert stored[:, 2].std() > 1.5  # the statistics are not the identity


def test_acting_and_learning_see_the_same_normalization(agent):
    observations = np.random.default_rng(0).normal(0.0, 3.0, (8, 3)).astype(np.float32)
    expected = keras.ops.convert_to_numpy(agent.actor(by_hand(agent, observations)))
    np.testing.assert_allclose(agent.actor_outputs(observations), expected, atol=1e-5)
    raw = keras.ops.convert_to_numpy(agent.actor(observations))
    assert np.abs(raw - expected).max() > 1e-3
    # The buffer holds raw observations; a sampled batch is normalized with today's statistics.
    twin = np.random.default_rng()
    twin.bit_generator.state = agent.rng.bit_generator.state
    raw_batch = agent.buffer.sample(agent.config.batch_size, twin,
                                    n_batches=agent.config.gradient_steps)
    batches = agent.sample_batches()
    for key in ("observations", "next_observations"):
        np.testing.assert_array_equal(batches[key], by_hand(agent, raw_batch[key]))
        assert np.abs(raw_batch[key]).max() > agent.config.clip_obs  # raw in the buffer


def test_saved_loaded_and_resumed_policies_act_as_the_agent(agent, tmp_path):
    observations = np.random.default_rng(1).normal(0.0, 3.0, (8, 3)).astype(np.float32)
    actions = agent.predict(observations)
    policy = agent.policy
    np.testing.assert_array_equal(policy.predict(observations), actions)
    loaded = kerasrl.load_policy(policy.save(tmp_path / "policy"))
    np.testing.assert_array_equal(loaded.obs_rms.mean, agent.obs_rms.mean)
    assert loaded.clip_obs == agent.config.clip_obs
    np.testing.assert_allclose(loaded.predict(observations), actions, rtol=0, atol=1e-6)
    # A remote actor's policy takes new statistics with its weights (actor_weights).
    loaded.obs_rms = None
    loaded.load_config(agent.actor_weights()["policy_config"])
    np.testing.assert_allclose(loaded.predict(observations), actions, rtol=0, atol=1e-6)
    resumed = type(agent).load(agent.save(tmp_path / "ckpt"))
    for key, value in agent.obs_rms.state_dict().items():
        np.testing.assert_array_equal(resumed.obs_rms.state_dict()[key], value)
    np.testing.assert_array_equal(resumed.predict(observations), actions)


@pytest.mark.slow  # CI time: the first ONNX export of a process costs ~15 s
def test_export_normalizes_inside_the_graph(tmp_path):
    """The continuous policies' one export path (DDPG's, TD3's and NAF's class; SAC's shares it)."""
    from kerasrl.export import compare_export

    agent = kerasrl.TD3("Pendulum-v1", **SMALL)
    agent.obs_rms.update(np.random.default_rng(2).normal(1.0, 4.0, (64, 3)))
    path = agent.policy.export(tmp_path / "policy.onnx", include_values=True)
    figures = compare_export(agent.policy, path, "onnx")
    assert figures["max_action_diff"] <= 1e-5 and figures["max_value_diff"] <= 1e-5


def test_off_by_default_and_policy_json_unchanged():
    agent = kerasrl.TD3("Pendulum-v1", hidden_sizes=(8,), check_env=False)
    assert agent.obs_rms is None and agent.policy.get_config() == {"noise_std": 0.1}
