"""QR-DQN: the quantile Huber loss against numpy, the policy saved alone and exported, learning."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import kerasrl
from kerasrl import losses
from kerasrl.export import compare_export

pytestmark = pytest.mark.backend


def tensors(*arrays):
    return [keras.ops.convert_to_tensor(a) for a in arrays]


def np_quantile_huber(quantiles, targets, weights, kappa=1.0):
    """The paper's loss written out with loops over the quantile pairs (float64)."""
    batch, n = quantiles.shape
    per_sample, priorities = np.zeros(batch), np.zeros(batch)
    for b in range(batch):
        total = 0.0
        for i in range(n):
            tau = (i + 0.5) / n
            for j in range(targets.shape[1]):
                d = float(targets[b, j]) - float(quantiles[b, i])
                huber = 0.5 * d * d if abs(d) <= kappa else kappa * (abs(d) - 0.5 * kappa)
                total += abs(tau - (d < 0)) * huber / kappa / targets.shape[1]
                priorities[b] += abs(d) / (n * targets.shape[1])
        per_sample[b] = total
    return float(np.mean(weights * per_sample)), priorities


@pytest.mark.parametrize("kappa", [1.0, 0.5])
def test_quantile_huber_loss_matches_numpy(kappa):
    rng = np.random.default_rng(0)
    quantiles = rng.normal(size=(16, 7)).astype(np.float32) * 2
    targets = rng.normal(size=(16, 5)).astype(np.float32) * 2
    weights = rng.uniform(0.2, 1.0, size=16).astype(np.float32)
    loss, priorities = losses.quantile_huber_loss(*tensors(quantiles, targets, weights), kappa)
    expected, expected_priorities = np_quantile_huber(quantiles, targets, weights, kappa)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loss), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(priorities), expected_priorities,
                               rtol=1e-5, atol=1e-5)


def test_select_action_picks_the_taken_actions_distribution():
    outputs = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    taken = losses.select_action(*tensors(outputs, np.array([2, 0], np.int32)))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(taken), outputs[[0, 1], [2, 0]])


def test_quantile_target_takes_the_greedy_actions_quantiles():
    from kerasrl.agents.qrdqn import quantile_target

    # Action 1 has the larger mean in both rows though not the larger first quantile.
    next_target = np.array([[[3.0, -1.0], [0.0, 4.0]], [[5.0, -5.0], [1.0, 1.0]]], np.float32)
    batch = {"rewards": np.array([1.0, 2.0], np.float32),
             "discounts": np.array([0.5, 0.0], np.float32)}
    batch = dict(zip(batch, tensors(*batch.values())))
    target = keras.ops.convert_to_numpy(quantile_target(*tensors(next_target), None, batch))
    np.testing.assert_allclose(target, [[1.0, 3.0], [2.0, 2.0]])


def small_agent(**overrides):
    return kerasrl.QRDQN("CartPole-v1", seed=0, learning_starts=20, buffer_size=100, batch_size=8,
                         n_quantiles=5, hidden_sizes=(16,), check_env=False,
                         target_update_interval=10, **overrides)


@pytest.mark.slow  # the ONNX converter's first conversion: 30 s of the fast tier's budget
def test_policy_saves_loads_alone_and_exports(tmp_path):
    agent = small_agent(prioritized_replay=True)
    agent.fit(total_steps=60, progress=False)
    assert agent.q_network.output_shape == (None, 2, 5)
    observations = np.random.default_rng(1).normal(size=(32, 4)).astype(np.float32)
    expected_q = agent.learner.q_values(observations)
    np.testing.assert_allclose(agent.policy.q_values(observations), expected_q, rtol=1e-6,
                               atol=1e-6)
    agent.policy.save(tmp_path / "policy")
    loaded = kerasrl.load_policy(tmp_path / "policy")
    assert loaded.get_config()["value_head"] == {
        "class": "kerasrl.agents.qrdqn:QuantileHead", "config": {"n_quantiles": 5}}
    np.testing.assert_array_equal(loaded.predict(observations), expected_q.argmax(-1))
    np.testing.assert_allclose(loaded.q_values(observations), expected_q, rtol=1e-6, atol=1e-6)
    path = loaded.export(tmp_path / "qrdqn.onnx", include_values=True)
    figures = compare_export(loaded, path, "onnx", n=200)
    assert figures["actions_differing"] == 0 and figures["max_value_diff"] <= 1e-5


def test_a_model_of_the_wrong_shape_is_refused():
    def flat_q(observation_space, action_space):
        inputs = keras.Input((4,))
        return keras.Model(inputs, keras.layers.Dense(2)(inputs))

    with pytest.raises(ValueError, match=r"output \(batch, 2, 5\).*Dense\(10\) followed by "
                                         r"Reshape\(\(2, 5\)\)"):
        small_agent(model=flat_q)


def preset_return(name: str, seed: int) -> float:
    """Mean return of 20 greedy episodes after training with the preset `name`."""
    from kerasrl.presets import get_preset

    preset = get_preset(name)
    agent = kerasrl.QRDQN(preset.env, seed=seed, **preset.config)
    agent.fit(preset.total_steps, progress=False)
    return agent.evaluate(episodes=20)["mean_return"]


@pytest.mark.parametrize("game", ["Pong", "Breakout"])
def test_atari_presets_are_sb3_contribs_defaults_with_the_zoos_atari_entry(game):
    """SB3-contrib 2.9's QRDQN.__init__ and QRDQNPolicy defaults (the paper's Atari settings),
    over which RL Zoo's qrdqn.yml `atari:` sets exploration_fraction 0.025 for 10M steps."""
    from kerasrl.config import QRDQNConfig
    from kerasrl.presets import get_preset

    preset = get_preset(f"{game.lower()}-qrdqn")
    assert (preset.algorithm, preset.env, preset.total_steps) == ("qrdqn", f"kerasrl/{game}-v5", 10_000_000)
    assert preset.eval_env_kwargs == {"training": False}  # whole games, sticky actions
    sb3_contrib = dict(n_quantiles=200, learning_rate=5e-5, buffer_size=1_000_000, learning_starts=100,
                       batch_size=32, gamma=0.99, train_freq=4, gradient_steps=1,
                       target_update_interval=10_000, exploration_initial_eps=1.0, exploration_final_eps=0.01,
                       max_grad_norm=None, adam_epsilon=0.01 / 32)
    zoo = dict(exploration_fraction=0.025)
    settings = {name: value for name, value in preset.config.items() if name != "n_envs"}
    assert settings == {**sb3_contrib, **zoo}
    config = QRDQNConfig(**settings)  # every name a field
    assert config.tau == 1.0 and config.n_step_return == 1 and not config.double_q and not config.dueling


@pytest.mark.slow
def test_cartpole_preset_learns():
    """Measured (docs/agents.md): 500.0 on JAX seeds 0-2, TensorFlow seed 0 and PyTorch seed 0
    (2-3 min each on one shared core). The rule leaves a seed to other machines: at least 2 of
    3 seeds reach CartPole's 475 (JAX; one seed, 0, elsewhere)."""
    seeds = (0, 1, 2) if kerasrl.backend.NAME == "jax" else (0,)
    returns = [preset_return("cartpole-qrdqn", seed) for seed in seeds]
    assert sum(r >= 475 for r in returns) >= min(2, len(seeds)), returns


@pytest.mark.slow
def test_cartpole_preset_learns_in_the_compiled_loop():
    """cartpole-qrdqn's settings on kerasrl/OpsCartPole-v1, where fit runs the whole loop compiled
    (CompiledDQN on the agent's learner), 50k steps. Measured, seed 0: JAX 500.0 (95 s),
    TensorFlow 500.0 (78 s), PyTorch 335.1 (min 270; seed 1: 500.0, 5 min). The rule: seed 0, or
    else seed 1, reaches 475."""
    from kerasrl.presets import get_preset

    returns = []
    for seed in (0, 1):
        agent = kerasrl.QRDQN("kerasrl/OpsCartPole-v1", seed=seed,
                              **get_preset("cartpole-qrdqn").config)
        agent.fit(50_000, progress=False, engine="compiled")
        returns.append(agent.evaluate(episodes=20)["mean_return"])
        if returns[-1] >= 475:
            break
    assert returns[-1] >= 475, returns


@pytest.mark.slow
@pytest.mark.skipif(kerasrl.backend.NAME != "jax", reason="Acrobot's 100k steps run on JAX only")
def test_acrobot_preset_learns():
    """Measured (docs/agents.md), JAX, 100k steps: seed 0 -68.2, seed 1 -74.8 (about 11 min each
    on one shared core; SB3-contrib reports -80 to -100, a random policy -500). The threshold
    leaves about 30 to other machines."""
    assert preset_return("acrobot-qrdqn", 0) >= -100
