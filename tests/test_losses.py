"""The TD losses and targets of kerasrl.losses against plain numpy references, on every backend."""

import keras
import numpy as np
import pytest
from keras import ops

from kerasrl import losses

pytestmark = pytest.mark.backend

B, A = 64, 5
GAMMA = 0.99
TOL = dict(rtol=1e-6, atol=1e-6)


def to_np(x):
    return keras.ops.convert_to_numpy(x)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def random_batch(rng):
    q = rng.normal(size=(B, A)).astype(np.float32)
    next_q_target = rng.normal(size=(B, A)).astype(np.float32)
    next_q_online = rng.normal(size=(B, A)).astype(np.float32)
    actions = rng.integers(0, A, size=B).astype(np.int32)
    next_actions = rng.integers(0, A, size=B).astype(np.int32)
    rewards = rng.normal(size=B).astype(np.float32)
    # Half the transitions end in a terminal state (discount 0), half bootstrap (gamma).
    discounts = np.where(np.arange(B) % 2 == 0, 0.0, GAMMA).astype(np.float32)
    return q, next_q_target, next_q_online, actions, next_actions, rewards, discounts


def np_epsilon_greedy(q, epsilon):
    probs = np.full(q.shape, epsilon / q.shape[-1], dtype=np.float64)
    probs[np.arange(len(q)), q.argmax(-1)] += 1.0 - epsilon
    return probs


def test_huber_matches_numpy(rng):
    x = (rng.normal(size=(B, 3)) * 3).astype(np.float32)
    for delta in (1.0, 0.5, 2.0):
        abs_x = np.abs(x.astype(np.float64))
        expected = np.where(abs_x <= delta, 0.5 * abs_x**2, delta * (abs_x - 0.5 * delta))
        np.testing.assert_allclose(to_np(losses.huber(ops.convert_to_tensor(x), delta)), expected,
                                   rtol=1e-6, atol=1e-5)


def test_huber_known_values():
    x = np.array([0.0, 0.5, -0.5, 1.0, -3.0, 10.0], dtype=np.float32)
    np.testing.assert_allclose(to_np(losses.huber(ops.convert_to_tensor(x))),
                               [0.0, 0.125, 0.125, 0.5, 2.5, 9.5], **TOL)


def test_squared_matches_numpy(rng):
    x = rng.normal(size=(B,)).astype(np.float32)
    np.testing.assert_allclose(to_np(losses.squared(ops.convert_to_tensor(x))), x**2, **TOL)


def test_select_picks_the_taken_action(rng):
    q, *_ = random_batch(rng)
    actions = rng.integers(0, A, size=B).astype(np.int32)
    got = to_np(losses.select(ops.convert_to_tensor(q), ops.convert_to_tensor(actions)))
    assert got.shape == (B,)
    np.testing.assert_array_equal(got, q[np.arange(B), actions])


def test_q_learning_target_plain(rng):
    _, nqt, _, _, _, rewards, discounts = random_batch(rng)
    got = to_np(losses.q_learning_target(*map(ops.convert_to_tensor, (nqt, rewards, discounts))))
    expected = rewards + discounts * nqt.max(-1)
    np.testing.assert_allclose(got, expected, **TOL)
    # A terminal transition's target is its reward alone; a bootstrapping one is not.
    np.testing.assert_allclose(got[discounts == 0], rewards[discounts == 0], **TOL)
    assert not np.allclose(got[discounts > 0], rewards[discounts > 0])


def test_q_learning_target_double(rng):
    _, nqt, nqo, _, _, rewards, discounts = random_batch(rng)
    got = to_np(losses.q_learning_target(
        *map(ops.convert_to_tensor, (nqt, rewards, discounts)), next_q_online=ops.convert_to_tensor(nqo)))
    expected = rewards + discounts * nqt[np.arange(B), nqo.argmax(-1)]
    np.testing.assert_allclose(got, expected, **TOL)
    # Double DQN differs from plain max wherever the online argmax is not the target argmax.
    plain = rewards + discounts * nqt.max(-1)
    differs = (nqo.argmax(-1) != nqt.argmax(-1)) & (discounts > 0)
    assert differs.any()
    assert np.all(got[differs] < plain[differs])


def test_sarsa_target(rng):
    _, nqt, _, _, next_actions, rewards, discounts = random_batch(rng)
    got = to_np(losses.sarsa_target(*map(ops.convert_to_tensor, (nqt, next_actions, rewards, discounts))))
    expected = rewards + discounts * nqt[np.arange(B), next_actions]
    np.testing.assert_allclose(got, expected, **TOL)


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 1.0])
def test_epsilon_greedy_probs(rng, epsilon):
    q = rng.normal(size=(B, A)).astype(np.float32)
    got = to_np(losses.epsilon_greedy_probs(ops.convert_to_tensor(q), epsilon))
    np.testing.assert_allclose(got, np_epsilon_greedy(q, epsilon), **TOL)
    np.testing.assert_allclose(got.sum(-1), 1.0, **TOL)


def test_epsilon_greedy_probs_ties_go_to_first_max():
    q = np.array([[1.0, 3.0, 3.0, 0.0]], dtype=np.float32)
    got = to_np(losses.epsilon_greedy_probs(ops.convert_to_tensor(q), 0.2))
    np.testing.assert_allclose(got, [[0.05, 0.85, 0.05, 0.05]], **TOL)


@pytest.mark.parametrize("epsilon", [0.0, 0.05, 0.5])
def test_expected_sarsa_target(rng, epsilon):
    _, nqt, _, _, _, rewards, discounts = random_batch(rng)
    got = to_np(losses.expected_sarsa_target(
        *map(ops.convert_to_tensor, (nqt, rewards, discounts)), epsilon))
    expected = rewards + discounts * (np_epsilon_greedy(nqt, epsilon) * nqt).sum(-1)
    np.testing.assert_allclose(got, expected, **TOL)
    if epsilon == 0.0:  # greedy: plain Q-learning
        np.testing.assert_allclose(got, rewards + discounts * nqt.max(-1), **TOL)


def test_expected_sarsa_target_with_online_network(rng):
    _, nqt, nqo, _, _, rewards, discounts = random_batch(rng)
    epsilon = 0.1
    got = to_np(losses.expected_sarsa_target(
        *map(ops.convert_to_tensor, (nqt, rewards, discounts)), epsilon,
        next_q_online=ops.convert_to_tensor(nqo)))
    expected = rewards + discounts * (np_epsilon_greedy(nqo, epsilon) * nqt).sum(-1)
    np.testing.assert_allclose(got, expected, **TOL)
    own = rewards + discounts * (np_epsilon_greedy(nqt, epsilon) * nqt).sum(-1)
    assert not np.allclose(got, own)


@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_td_loss_with_importance_weights(rng, loss):
    q, nqt, _, actions, _, rewards, discounts = random_batch(rng)
    weights = rng.uniform(0.1, 1.0, size=B).astype(np.float32)
    q_taken = losses.select(ops.convert_to_tensor(q), ops.convert_to_tensor(actions))
    targets = losses.q_learning_target(*map(ops.convert_to_tensor, (nqt, rewards, discounts)))
    value, td = losses.td_loss(q_taken, targets, ops.convert_to_tensor(weights), loss=loss)
    expected_td = q[np.arange(B), actions] - (rewards + discounts * nqt.max(-1))
    np.testing.assert_allclose(to_np(td), expected_td, **TOL)
    a = np.abs(expected_td.astype(np.float64))
    elementwise = np.where(a <= 1.0, 0.5 * a**2, a - 0.5) if loss == "huber" else a**2
    np.testing.assert_allclose(float(to_np(value)), np.mean(weights * elementwise), rtol=1e-5)
    # The weights matter: uniform weights give a different loss.
    uniform, _ = losses.td_loss(q_taken, targets, ops.ones((B,)), loss=loss)
    np.testing.assert_allclose(float(to_np(uniform)), np.mean(elementwise), rtol=1e-5)
    assert not np.isclose(float(to_np(uniform)), float(to_np(value)))


def test_targets_do_not_carry_gradients():
    """q_learning_target stops the gradient: the loss's gradient flows into q_taken only."""
    from kerasrl import backend as kb

    offset = np.array([[1.0, 2.0]], dtype=np.float32)
    q = np.array([[0.5, 0.0]], dtype=np.float32)

    def fn(params, offset):
        (q_param,) = params
        # The target is computed from q_param itself, so only stop_gradient keeps it constant.
        target = losses.q_learning_target(q_param + offset, ops.zeros((1,)), ops.ones((1,)))
        value, _ = losses.td_loss(losses.select(q_param, ops.convert_to_tensor(np.array([0], "int32"))),
                                  target, ops.ones((1,)), loss="mse")
        return value, target

    (value, _), grads = kb.value_and_grad(fn)([ops.convert_to_tensor(q)], ops.convert_to_tensor(offset))
    # target = max(q + offset) = 2.0 (action 1). d/dq0 (q0 - 2)^2 = 2 (0.5 - 2) = -3; without
    # stop_gradient action 1 would get +3 through the target.
    np.testing.assert_allclose(to_np(grads[0]), [[-3.0, 0.0]], **TOL)
