"""Munchausen DQN: its target against a numpy transcription of the paper's (with action masks and
the log-policy clip), the limits it must reach (alpha 0 and a small tau: DQN's max target), one
learner step, the compiled loop, errors and a short learning run."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import kerasrl
from kerasrl.agents.mdqn import munchausen_target
from kerasrl.losses import max_q_target

pytestmark = pytest.mark.backend


def np_log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def np_munchausen_target(q_next, q_current, batch, tau, alpha, clip, next_masks=None):
    """Vieillard et al. (2020), eq. (3) with the target network's softmax policy, in float64."""
    q_next, q_current = q_next.astype(np.float64), q_current.astype(np.float64)
    scaled = q_next / tau
    if next_masks is not None:
        scaled = np.where(next_masks, scaled, -np.inf)
    next_log_pi = np_log_softmax(scaled)
    terms = np.exp(next_log_pi) * (q_next - tau * np.where(np.isfinite(next_log_pi), next_log_pi, 0))
    soft_value = terms.sum(-1)
    log_pi = np_log_softmax(q_current / tau)[np.arange(len(q_current)), batch["actions"]]
    return batch["rewards"] + alpha * tau * np.clip(log_pi, clip, 0) + batch["discounts"] * soft_value


def random_case(seed=0, b=9, a=4):
    rng = np.random.default_rng(seed)
    batch = {"actions": rng.integers(0, a, size=b).astype(np.int32),
             "rewards": rng.normal(size=b).astype(np.float32),
             "discounts": np.where(rng.random(b) < 0.3, 0.0, 0.99).astype(np.float32)}
    q_next = rng.normal(scale=0.2, size=(b, a)).astype(np.float32)
    q_current = rng.normal(scale=0.2, size=(b, a)).astype(np.float32)
    return batch, q_next, q_current


@pytest.mark.parametrize("masked", [False, True])
def test_the_target_is_the_papers(masked):
    batch, q_next, q_current = random_case()
    next_masks = None
    if masked:
        next_masks = np.random.default_rng(1).random(q_next.shape) < 0.6
        next_masks[:, 0] = True  # at least one allowed action
        batch["next_action_masks"] = next_masks
    target = munchausen_target(0.03, 0.9, -1.0)
    tensors = {k: keras.ops.convert_to_tensor(v) for k, v in batch.items()}
    got = keras.ops.convert_to_numpy(target(keras.ops.convert_to_tensor(q_next), None,
                                            {**tensors, "current_q_target": keras.ops.convert_to_tensor(q_current)}))
    expected = np_munchausen_target(q_next, q_current, batch, 0.03, 0.9, -1.0, next_masks)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # The clip binds here (|Q| / tau spreads log pi well below -1), so it is tested.
    log_pi = np_log_softmax(q_current / 0.03)[np.arange(9), batch["actions"]]
    assert (log_pi < -1).any() and (log_pi > -1).any()


def test_without_the_bonus_and_at_a_small_temperature_it_is_dqns_target():
    batch, q_next, q_current = random_case(2)
    tensors = {k: keras.ops.convert_to_tensor(v) for k, v in batch.items()}
    tensors["current_q_target"] = keras.ops.convert_to_tensor(q_current)
    soft = keras.ops.convert_to_numpy(munchausen_target(1e-4, 0.0, -1.0)(
        keras.ops.convert_to_tensor(q_next), None, tensors))
    hard = keras.ops.convert_to_numpy(max_q_target(keras.ops.convert_to_tensor(q_next), None, tensors))
    np.testing.assert_allclose(soft, hard, atol=1e-3)


def small_mdqn(**overrides):
    config = dict(seed=0, learning_starts=20, buffer_size=200, batch_size=6, hidden_sizes=(8,),
                  check_env=False, target_update_interval=10, learning_rate=1e-2)
    return kerasrl.MDQN("CartPole-v1", **{**config, **overrides})


def test_a_learner_step_reads_the_target_networks_policy_at_s():
    """One gradient step's loss: the Huber TD error against the target built from the target
    network's Q-values at s and s' (numpy, from the same weights)."""
    from kerasrl.losses import huber

    agent = small_mdqn()
    model = agent.q_network
    rng = np.random.default_rng(3)
    batch = {"observations": rng.normal(size=(6, 4)).astype(np.float32),
             "next_observations": rng.normal(size=(6, 4)).astype(np.float32),
             "actions": rng.integers(0, 2, size=6).astype(np.int32),
             "rewards": rng.normal(size=6).astype(np.float32),
             "discounts": np.full(6, 0.99, np.float32), "weights": np.ones(6, np.float32)}
    q = keras.ops.convert_to_numpy(model(batch["observations"]))
    q_next = keras.ops.convert_to_numpy(model(batch["next_observations"]))
    target = np_munchausen_target(q_next, q, batch, 0.03, 0.9, -1.0)
    expected = np.mean(keras.ops.convert_to_numpy(huber(keras.ops.convert_to_tensor(
        (q[np.arange(6), batch["actions"]] - target).astype(np.float32)))))
    loss, _ = agent.learner.train({k: v[None] for k, v in batch.items()}, 0.0, 0.0)
    np.testing.assert_allclose(loss, expected, rtol=1e-4)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="double_q"):
        small_mdqn(double_q=True)
    with pytest.raises(ValueError, match="munchausen_tau"):
        small_mdqn(munchausen_tau=0.0)
    with pytest.raises(ValueError, match="munchausen_alpha"):
        small_mdqn(munchausen_alpha=1.5)
    with pytest.raises(ValueError, match="munchausen_clip"):
        small_mdqn(munchausen_clip=0.0)


def test_mdqn_learns_a_short_cartpole_run():
    """The fast tier's learning check: 8,000 steps at cartpole-mdqn's settings. Measured on JAX,
    seeds 0-7, 20 greedy episodes: 206, 237, 384, 394, 457, 363, 297, 314 (random play: about
    22). The bar, 100, leaves every measured seed a margin of at least 2x."""
    from kerasrl.presets import get_preset

    agent = kerasrl.MDQN("CartPole-v1", seed=0, **get_preset("cartpole-mdqn").config)
    agent.fit(8000, progress=False)
    assert agent.evaluate(episodes=20)["mean_return"] >= 100


@pytest.mark.slow  # 30k steps with a gradient step each: about 30 s on JAX
def test_cartpole_preset_learns():
    """cartpole-mdqn: 500 on JAX seeds 0, 1, 2, 4, 5 of 0-5 (docs/agents.md). Seed 0 here."""
    from kerasrl.presets import get_preset

    preset = get_preset("cartpole-mdqn")
    agent = kerasrl.MDQN(preset.env, seed=0, **preset.config)
    agent.fit(preset.total_steps, progress=False)
    assert agent.evaluate(episodes=20)["mean_return"] >= 475
