"""Action masks (docs/action_masks.md): masked acting, masked targets and PPO logits, buffers,
policies and exports, errors that name the step, and a short learning check on a masked env.

The env-side pieces (reading masks, numpy helpers) are backend-free; the rest runs on the active
backend (`backend` marker). The cross-backend parity of the masked losses is test_mask_parity.py.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from keras import ops

import kerasrl
from kerasrl.envs.testing import MaskedChoiceEnv
from kerasrl.losses import (MASKED_VALUE, categorical_entropy, categorical_log_prob,
                            expected_sarsa_target, mask_values, q_learning_target)
from kerasrl.masks import (ActionMaskError, check_masks, final_masks, masks_from_info,
                           uniform_allowed)
from kerasrl.policies import epsilon_greedy

N = 4
DQN_FAST = dict(learning_rate=1e-3, learning_starts=200, train_freq=1, batch_size=32,
                target_update_interval=100, exploration_fraction=0.3, gamma=0.9,
                buffer_size=5000)


class CountMasked(gym.Wrapper):
    """Counts the actions taken that the env's mask forbade, and all actions."""

    def __init__(self, env, counts):
        super().__init__(env)
        self.counts = counts

    def step(self, action):
        env = self.env.unwrapped
        self.counts["taken"] += 1
        starts = np.cumsum((0,) + env.nvec)[:-1] if env.nvec else 0  # MultiDiscrete: per component
        self.counts["masked"] += int(not np.all(env._mask[starts + np.asarray(action)]))
        return self.env.step(action)


def counted_env(counts, **kwargs):
    return lambda: CountMasked(MaskedChoiceEnv(N, **kwargs), counts)


def highest_allowed(masks):
    return masks.shape[1] - 1 - np.argmax(masks[:, ::-1], axis=1)


def sample_masks(n, seed=1):
    masks = np.random.default_rng(seed).random((n, N)) < 0.5
    masks[np.arange(n), np.random.default_rng(seed + 1).integers(0, N, n)] = True
    return masks


# -- numpy side ----------------------------------------------------------------------------------
def test_uniform_allowed_is_uniform_over_the_allowed_actions_only():
    masks = np.array([[1, 0, 1, 0], [0, 0, 0, 1], [1, 1, 1, 1]], bool)
    draws = np.stack([uniform_allowed(masks, np.random.default_rng(s)) for s in range(4000)])
    assert masks[np.arange(3), draws].all()
    np.testing.assert_array_equal(draws[:, 1], 3)
    np.testing.assert_allclose(np.bincount(draws[:, 0], minlength=4) / 4000, [.5, 0, .5, 0],
                               atol=0.03)
    np.testing.assert_allclose(np.bincount(draws[:, 2], minlength=4) / 4000, 0.25, atol=0.03)
    # With epsilon 1 every action is a uniform allowed one.
    actions = epsilon_greedy(np.zeros(3, int), 4, 1.0, np.random.default_rng(0), masks)
    assert masks[np.arange(3), actions].all()


def test_unmasked_epsilon_greedy_draws_as_before():
    """No mask: the same numpy draws as before masks existed (same-seed runs are unchanged)."""
    rng, reference = np.random.default_rng(3), np.random.default_rng(3)
    actions = epsilon_greedy(np.zeros(50, int), 4, 0.5, rng)
    explore = reference.random(50) < 0.5
    expected = np.where(explore, reference.integers(0, 4, size=50), 0)
    np.testing.assert_array_equal(actions, expected)


def test_masks_from_vector_env_info_and_final_info():
    info = {"action_mask": np.array([[1, 0, 1], [0, 1, 0]], np.int8),
            "_action_mask": np.array([True, False]),
            "final_info": {"action_mask": np.array([[0, 0, 0], [0, 0, 1]], np.int8),
                           "_action_mask": np.array([False, True])}}
    masks = masks_from_info(info, 2, 3, "env step 7")
    np.testing.assert_array_equal(masks, [[1, 0, 1], [1, 1, 1]])  # no report: all allowed
    done = np.array([True, True])
    final = final_masks(masks, done, info, 3, "env step 7")
    np.testing.assert_array_equal(final, [[1, 1, 1], [0, 0, 1]])
    assert masks_from_info({}, 2, 3, "x") is None


def test_env_masks_of_other_values_refused_as_the_env_reports_them():
    """An env's info["action_mask"] of scores, stacked or one array per env, is refused at the step."""
    stacked = {"action_mask": np.array([[1.0, 0.3, 0.0], [1.0, 1.0, 1.0]])}
    with pytest.raises(ActionMaskError, match=r"env step 7: the action mask holds 0\.3"):
        masks_from_info(stacked, 2, 3, "env step 7")
    reported = np.array([[True, False, False], [False, False, False]])
    masks = masks_from_info({"action_mask": reported, "_action_mask": np.array([True, False])}, 2, 3, "s")
    np.testing.assert_array_equal(masks, [[1, 0, 0], [1, 1, 1]])
    np.testing.assert_array_equal(reported, [[1, 0, 0], [0, 0, 0]])  # the env's array untouched
    ragged = np.empty(2, dtype=object)
    ragged[0], ragged[1] = np.array([1, 1, 1]), np.array([0, -1, 1])
    with pytest.raises(ActionMaskError, match=r"env step 8: the action mask holds -1"):
        masks_from_info({"action_mask": ragged}, 2, 3, "env step 8")


@pytest.mark.parametrize("masks, message", [
    (np.ones((2, 3)), r"env step 12: the action mask has shape \(2, 3\); expected \(2, 4\)"),
    (np.array([[1, 0, 0, 0], [0, 0, 0, 0]]), r"env step 12: the action mask of row 1 allows no"),
    # A probability is not a flag: 0.5 was read as "allowed".
    (np.array([[1, 0.5, 0, 0], [1, 1, 1, 1]]), r"env step 12: the action mask holds 0\.5; its flags must be 0 or 1"),
    (np.array([[1, 2, 0, 0], [1, 1, 1, 1]]), r"the action mask holds 2;"),
    (np.array([["a"] * 4] * 2), r"must hold 0/1 or booleans, not <U1"),
])
def test_bad_masks_name_the_step(masks, message):
    with pytest.raises(ActionMaskError, match=message):
        check_masks(masks, 2, 4, "env step 12")


def test_snake_masks_only_the_moves_that_die_at_once():
    from kerasrl.envs.snake import Snake

    game = Snake(height=5, width=5, mask_deadly_moves=True)
    game.reset(seed=0)
    # Heading right along the top row, head in the corner: straight and left leave the board.
    game._set_state([(0, 4), (0, 3), (0, 2)], "right", [(4, 4)])
    np.testing.assert_array_equal(game._info()["action_mask"], [0, 0, 1])
    # Boxed in by its own body on every side: nothing is masked (the game ends either way).
    game._set_state([(1, 1), (1, 2), (2, 2), (2, 1), (2, 0), (1, 0), (0, 0), (0, 1), (0, 2)],
                    "left", [(4, 4)])
    np.testing.assert_array_equal(game._info()["action_mask"], [1, 1, 1])


# -- on the active backend -----------------------------------------------------------------------
@pytest.mark.backend
def test_masked_targets_match_numpy():
    rng = np.random.default_rng(0)
    q_target = rng.standard_normal((6, N)).astype(np.float32)
    q_online = rng.standard_normal((6, N)).astype(np.float32)
    masks = sample_masks(6)
    rewards = rng.standard_normal(6).astype(np.float32)
    discounts = np.array([0.9, 0.9, 0.0, 0.9, 0.9, 0.9], np.float32)
    masked_target = np.where(masks, q_target, -np.inf)
    t = ops.convert_to_tensor  # PyTorch does not mix numpy arrays into tensor arithmetic
    got = ops.convert_to_numpy(q_learning_target(t(q_target), t(rewards), t(discounts),
                                                 next_masks=t(masks)))
    np.testing.assert_allclose(got, rewards + discounts * masked_target.max(1), rtol=1e-6)
    chosen = np.argmax(np.where(masks, q_online, -np.inf), axis=1)
    got = ops.convert_to_numpy(q_learning_target(t(q_target), t(rewards), t(discounts),
                                                 t(q_online), t(masks)))
    np.testing.assert_allclose(got, rewards + discounts * q_target[np.arange(6), chosen],
                               rtol=1e-6)
    epsilon = np.full((6, 1), 0.2, np.float32)
    probs = 0.2 * masks / masks.sum(1, keepdims=True)
    probs[np.arange(6), chosen] += 0.8
    expected = rewards + discounts * (probs * np.where(masks, q_target, 0.0)).sum(1)
    got = ops.convert_to_numpy(expected_sarsa_target(t(q_target), t(rewards), t(discounts),
                                                     t(epsilon), t(q_online), t(masks)))
    np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.backend
def test_masked_logits_give_masked_actions_exactly_zero_probability():
    rng = np.random.default_rng(0)
    logits = (5 * rng.standard_normal((64, N))).astype(np.float32)
    masks = sample_masks(64)
    masked = mask_values(logits, masks)
    log_probs = ops.convert_to_numpy(ops.log_softmax(masked, axis=-1))
    assert np.all(np.exp(log_probs)[~masks] == 0.0)
    assert np.all(np.isfinite(log_probs))
    # Entropy over the allowed actions only, no NaN from 0 * log 0.
    allowed = np.where(masks, logits.astype(np.float64), -np.inf)
    p = np.exp(allowed - allowed.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    reference = -np.sum(np.where(masks, p * np.log(np.where(masks, p, 1.0)), 0.0), axis=1)
    np.testing.assert_allclose(ops.convert_to_numpy(categorical_entropy(masked)), reference,
                               atol=1e-5)
    actions = np.argmax(np.where(masks, logits, -np.inf), axis=1).astype(np.int32)
    assert np.all(np.isfinite(ops.convert_to_numpy(categorical_log_prob(masked, actions))))
    assert float(MASKED_VALUE) == float(np.finfo(np.float32).min)


@pytest.mark.backend
@pytest.mark.slow_on_other_backends
def test_masked_dqn_with_epsilon_1_never_takes_a_masked_action_in_10000_steps():
    """Epsilon 1 throughout, Double DQN with dueling heads, 3-step prioritized replay, training
    rounds on masked targets in the last 2,000 steps."""
    counts = {"taken": 0, "masked": 0}
    agent = kerasrl.DQN(counted_env(counts), seed=0, exploration_initial_eps=1.0,
                        exploration_final_eps=1.0, random_warmup=False, learning_starts=8000,
                        train_freq=5, batch_size=32, buffer_size=10_000, n_envs=20,
                        double_q=True, dueling=True, n_step_return=3, prioritized_replay=True,
                        check_env=False)
    agent.fit(10_000, progress=False)
    assert counts == {"taken": 10_000, "masked": 0}
    assert agent.n_updates > 0
    batch = agent.buffer.sample(16, np.random.default_rng(0))
    assert batch["next_action_masks"].shape == (1, 16, N)
    assert not batch["next_action_masks"].all()


@pytest.mark.backend
@pytest.mark.parametrize("agent_class, mask_via", [(kerasrl.SARSA, "method"),
                                                   (kerasrl.ExpectedSARSA, "info")])
@pytest.mark.slow_on_other_backends
def test_masked_sarsa_takes_no_masked_action(agent_class, mask_via):
    counts = {"taken": 0, "masked": 0}
    agent = agent_class(counted_env(counts, mask_via=mask_via), seed=0, n_envs=4, n_steps=8,
                        exploration_fraction=1.0, check_env=False)
    agent.fit(500, progress=False)
    assert counts == {"taken": 500, "masked": 0}
    assert agent.n_updates > 0


@pytest.mark.backend
@pytest.mark.slow_on_other_backends  # tests/test_mask_parity.py: the masked updates agree across backends
@pytest.mark.parametrize("agent_class", [kerasrl.DQN, kerasrl.PPO, kerasrl.SARSA,
                                         kerasrl.ExpectedSARSA, kerasrl.A2C, kerasrl.TRPO])
def test_masked_agents_learn_the_masked_choice(agent_class):
    """With the mask the answer is "the highest allowed action" in every state; no action taken
    in training or evaluation is a masked one. (SARSA and Expected SARSA: all 256 right at 1,000
    steps on seeds 0, 1 and 2, JAX; A2C, and TRPO with its KL bound and line search on masked
    logits: all 256 at 1,536 steps on seeds 0, 1 and 2.)"""
    counts = {"taken": 0, "masked": 0}
    if agent_class is kerasrl.DQN:
        agent = kerasrl.DQN(counted_env(counts), seed=0, check_env=False, **DQN_FAST)
        agent.fit(1000, progress=False)
    elif agent_class is kerasrl.TRPO:
        agent = kerasrl.TRPO(counted_env(counts), seed=0, n_envs=4, n_steps=32, batch_size=64,
                             n_critic_updates=4, target_kl=0.05, gamma=0.5, check_env=False)
        agent.fit(1536, progress=False)
    elif agent_class is kerasrl.A2C:
        agent = kerasrl.A2C(counted_env(counts), seed=0, n_envs=4, n_steps=8, learning_rate=3e-3,
                            gamma=0.5, check_env=False)
        agent.fit(1536, progress=False)
    elif agent_class is not kerasrl.PPO:
        agent = agent_class(counted_env(counts), seed=0, n_envs=4, n_steps=8, learning_rate=3e-3,
                            exploration_fraction=0.3, gamma=0.5, check_env=False)
        agent.fit(1000, progress=False)
    else:
        agent = kerasrl.PPO(counted_env(counts), seed=0, n_envs=4, n_steps=32, batch_size=64,
                            n_epochs=4, learning_rate=3e-3, ent_coef=0.0, check_env=False)
        agent.fit(1536, progress=False)
    assert counts["masked"] == 0
    masks = sample_masks(256)
    obs = masks.astype(np.float32)
    actions = agent.predict(obs, action_mask=masks)
    np.testing.assert_array_equal(actions, highest_allowed(masks))
    assert agent.evaluate(episodes=4)["mean_length"] == 10.0
    assert agent.policy.action_masks  # saved with the policy: exports then take the mask
    if agent_class in (kerasrl.PPO, kerasrl.A2C, kerasrl.TRPO):
        assert agent.buffer.action_masks is not None
        logits = agent.policy.distribution(obs)
        log_probs = ops.convert_to_numpy(ops.log_softmax(mask_values(logits, masks), axis=-1))
        assert np.all(np.exp(log_probs)[~masks] == 0.0)
        sampled = agent.policy.predict(np.repeat(obs, 10, 0), deterministic=False,
                                       rng=np.random.default_rng(0),
                                       action_mask=np.repeat(masks, 10, 0))
        assert np.repeat(masks, 10, 0)[np.arange(2560), sampled].all()


@pytest.mark.backend
def test_bad_masks_from_the_env_name_the_step():
    agent = kerasrl.DQN(lambda: MaskedChoiceEnv(N, mask_shape=(3,)), seed=0, check_env=False,
                        learning_starts=10, target_update_interval=10)
    with pytest.raises(ActionMaskError, match=r"the envs' reset: info\['action_mask'\] has shape "
                                              r"\(3,\) per env; expected \(4,\)"):
        agent.fit(100, progress=False)
    agent = kerasrl.PPO(lambda: MaskedChoiceEnv(N, episode_length=100, empty_mask_at=37), seed=0,
                        n_steps=64, batch_size=64, check_env=False)
    with pytest.raises(ActionMaskError, match=r"env step 37: the action mask of row 0 allows no "
                                              r"action"):
        agent.fit(100, progress=False)


@pytest.mark.backend
def test_policy_predict_checks_the_mask():
    agent = kerasrl.DQN(lambda: MaskedChoiceEnv(N), seed=0, check_env=False)
    obs = np.ones((3, N), np.float32)
    with pytest.raises(ActionMaskError, match=r"QPolicy.predict\(action_mask=...\): the action "
                                              r"mask has shape \(3, 3\); expected \(3, 4\)"):
        agent.policy.predict(obs, action_mask=np.ones((3, 3)))
    with pytest.raises(ActionMaskError, match="row 2 allows no action"):
        agent.policy.predict(obs, action_mask=[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]])
    one = agent.policy.predict(obs[0], action_mask=np.array([0, 0, 1, 0], np.int8))
    assert one == 2


@pytest.mark.backend
@pytest.mark.parametrize("agent_class", [kerasrl.DQN, kerasrl.PPO])
def test_loaded_policy_and_its_export_model_take_the_mask(tmp_path, agent_class):
    """The saved and loaded policy masks as the agent's does; the model that exports are made
    from (a second input "action_mask") picks the same actions. The ONNX and SavedModel files
    themselves are checked in test_export.py."""
    agent = agent_class(lambda: MaskedChoiceEnv(N), seed=0, check_env=False)
    agent.policy.save(tmp_path / "policy")
    policy = kerasrl.load_policy(tmp_path / "policy")
    masks = sample_masks(64)
    obs = np.random.default_rng(0).random((64, N)).astype(np.float32)
    actions = policy.predict(obs, action_mask=masks)
    assert masks[np.arange(64), actions].all()
    np.testing.assert_array_equal(actions, agent.policy.predict(obs, action_mask=masks))
    assert policy.action_masks is False  # not trained on the masked env yet
    model = policy.inference_model(action_mask=True)
    assert [i.name for i in model.inputs] == ["observation", "action_mask"]
    exported = ops.convert_to_numpy(model([obs, masks.astype(np.float32)]))
    np.testing.assert_array_equal(exported, actions)


@pytest.mark.backend
@pytest.mark.slow_on_other_backends
def test_masks_are_part_of_the_training_state(tmp_path):
    agent = kerasrl.DQN(lambda: MaskedChoiceEnv(N), seed=0, check_env=False, **DQN_FAST)
    agent.fit(250, progress=False)
    agent.save(tmp_path / "ckpt")
    loaded = kerasrl.DQN.load(tmp_path / "ckpt", env=lambda: MaskedChoiceEnv(N))
    np.testing.assert_array_equal(loaded.loop.action_masks, agent.loop.action_masks)
    np.testing.assert_array_equal(loaded.buffer.next_action_masks, agent.buffer.next_action_masks)


# -- MultiDiscrete actions (PPO): a mask per component, side by side ------------------------------
NVEC = (3, 4)


def multi_masks(n, seed=3):
    rng = np.random.default_rng(seed)
    masks = rng.random((n, sum(NVEC))) < 0.5
    masks[np.arange(n), rng.integers(0, 3, n)] = True
    masks[np.arange(n), 3 + rng.integers(0, 4, n)] = True
    return masks


def highest_allowed_per_component(masks):
    return np.stack([highest_allowed(masks[:, :3]), highest_allowed(masks[:, 3:])], axis=-1)


def test_a_multidiscrete_mask_needs_an_allowed_value_in_each_component():
    masks = multi_masks(4)
    masks[2, 3:] = False  # the second component of row 2 allows nothing
    with pytest.raises(ActionMaskError, match=r"row 2 allows no value of component 1 \(mask "
                                              r"entries 3..6"):
        check_masks(masks, 4, 7, "env step 5", sizes=NVEC)
    masks[2, 4] = True
    assert check_masks(masks, 4, 7, "env step 5", sizes=NVEC).shape == (4, 7)


def test_multidiscrete_sampling_draws_each_component_and_sums_the_log_probabilities():
    from kerasrl.policies import categorical_mode, sample_categorical, softmax_log_probs

    logits = np.random.default_rng(0).standard_normal((500, 7)).astype(np.float32)
    actions, log_probs = sample_categorical(logits, np.random.default_rng(1), NVEC)
    assert actions.shape == (500, 2) and actions[:, 0].max() == 2 and actions[:, 1].max() == 3
    expected = (np.take_along_axis(softmax_log_probs(logits[:, :3]), actions[:, :1], 1)[:, 0]
                + np.take_along_axis(softmax_log_probs(logits[:, 3:]), actions[:, 1:], 1)[:, 0])
    np.testing.assert_allclose(log_probs, expected, rtol=1e-5)
    np.testing.assert_array_equal(categorical_mode(logits, NVEC), np.stack(
        [logits[:, :3].argmax(1), logits[:, 3:].argmax(1)], axis=-1))


def test_check_env_steps_a_multidiscrete_masked_env_with_allowed_values_only():
    counts = {"taken": 0, "masked": 0}
    kerasrl.check_env(counted_env(counts, nvec=NVEC)(), steps=300)
    assert counts["taken"] == 300 and counts["masked"] == 0


@pytest.mark.backend
def test_multidiscrete_log_probabilities_and_entropies_are_the_components_sums():
    rng = np.random.default_rng(0)
    logits = mask_values(rng.standard_normal((64, 7)).astype(np.float32), multi_masks(64))
    actions = highest_allowed_per_component(multi_masks(64)).astype(np.int32)
    got = ops.convert_to_numpy(categorical_log_prob(logits, actions, NVEC))
    parts = (ops.convert_to_numpy(categorical_log_prob(logits[:, :3], actions[:, 0]))
             + ops.convert_to_numpy(categorical_log_prob(logits[:, 3:], actions[:, 1])))
    np.testing.assert_allclose(got, parts, rtol=1e-6)
    entropy = ops.convert_to_numpy(categorical_entropy(logits, NVEC))
    np.testing.assert_allclose(entropy, ops.convert_to_numpy(categorical_entropy(logits[:, :3]))
                               + ops.convert_to_numpy(categorical_entropy(logits[:, 3:])),
                               rtol=1e-6)


@pytest.mark.backend
@pytest.mark.slow_on_other_backends  # test_mask_parity.py's ppo_multi: the updates agree; masked
# exports on every backend: test_export.py's test_masked_policy_exports_take_the_mask
def test_masked_ppo_learns_the_masked_choice_with_multidiscrete_actions(tmp_path):
    """MultiDiscrete([3, 4]): the answer is the highest allowed value of each component. No
    action taken is masked; the saved policy and its ONNX export (mask input) agree."""
    counts = {"taken": 0, "masked": 0}
    agent = kerasrl.PPO(counted_env(counts, nvec=NVEC), seed=0, n_envs=4, n_steps=32,
                        batch_size=64, n_epochs=4, learning_rate=3e-3, gamma=0.5, ent_coef=0.0,
                        check_env=False)
    agent.fit(2048, progress=False)  # all 256 masks right at 2,048 steps on seeds 0, 1 and 2
    assert counts["masked"] == 0 and counts["taken"] == 2048
    assert agent.buffer.actions.shape[-1] == 2
    masks = multi_masks(256)
    obs = masks.astype(np.float32)
    np.testing.assert_array_equal(agent.predict(obs, action_mask=masks),
                                  highest_allowed_per_component(masks))
    assert agent.evaluate(episodes=4)["mean_length"] == 10.0
    sampled = agent.policy.predict(np.repeat(obs, 10, 0), deterministic=False,
                                   rng=np.random.default_rng(0),
                                   action_mask=np.repeat(masks, 10, 0))
    rows = np.repeat(masks, 10, 0)
    assert rows[np.arange(2560), sampled[:, 0]].all() and rows[np.arange(2560), 3 + sampled[:, 1]].all()
    agent.policy.save(tmp_path / "policy")
    loaded = kerasrl.load_policy(tmp_path / "policy")
    np.testing.assert_array_equal(loaded.predict(obs, action_mask=masks),
                                  highest_allowed_per_component(masks))
    import onnxruntime as ort

    path = loaded.export(tmp_path / "policy.onnx")  # checked against the policy on 256 samples
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()][-1] == "action_mask"
    actions = session.run(None, {session.get_inputs()[0].name: obs,
                                 "action_mask": masks.astype(np.float32)})[0]
    np.testing.assert_array_equal(actions, highest_allowed_per_component(masks))


@pytest.mark.parametrize("mask_via", ["info", "method"])
def test_the_single_env_loop_of_play_watch_and_evaluate_chooses_allowed_actions(mask_via):
    """`kerasrl play`, `watch` and `evaluate` run `play_steps`: an untrained policy there takes
    no forbidden action (which would end the episode), greedy or stochastic."""
    from kerasrl.watch import play_steps

    agent = kerasrl.DQN(lambda: MaskedChoiceEnv(N), seed=0, check_env=False)
    for rng in (None, np.random.default_rng(0)):
        ends = [step.ended for step in play_steps(agent.policy, MaskedChoiceEnv(N, mask_via=mask_via),
                                                  episodes=20, outputs=False, rng=rng) if step.ended]
        assert ends == ["truncated"] * 20
    # Without the mask the same policy takes forbidden actions, which end episodes early.
    ends = [step.ended for step in play_steps(agent.policy, _HideMask(MaskedChoiceEnv(N)), episodes=20,
                                              outputs=False) if step.ended]
    assert ends.count("terminated") >= 5, ends


class _HideMask(gym.Wrapper):
    """The env without its masks: none in the info, no action_masks() method."""

    action_masks = None

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, {k: v for k, v in info.items() if k != "action_mask"}

    def step(self, action):
        *result, info = self.env.step(action)
        return *result, {k: v for k, v in info.items() if k != "action_mask"}
