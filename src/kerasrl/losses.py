"""Losses and temporal-difference targets: pure `keras.ops` functions of model outputs and a batch.

Each is checked against a numpy reference on every backend (tests/test_losses.py). Shapes: B is the
batch, A the number of actions.
"""

from __future__ import annotations

from keras import ops


def huber(x, delta=1.0):
    """Elementwise Huber loss of the error `x`: quadratic within `delta`, linear outside."""
    abs_x = ops.abs(x)
    quadratic = ops.minimum(abs_x, delta)
    return 0.5 * ops.square(quadratic) + delta * (abs_x - quadratic)


def squared(x):
    """Elementwise squared error: `mean` of it is the plain MSE (no 1/2), as the snake-dqn reference uses."""
    return ops.square(x)


ELEMENTWISE_LOSSES = {"huber": huber, "mse": squared}


def select(values, actions):
    """`values[i, actions[i]]`: (B, A) and (B,) int to (B,)."""
    return ops.take_along_axis(values, ops.expand_dims(actions, -1), axis=-1)[..., 0]


def q_learning_target(next_q_target, rewards, discounts, next_q_online=None):
    """`r + discount * max_a Q_target(s', a)`, or Double DQN when `next_q_online` is given.

    Double DQN (van Hasselt et al., 2016) picks the next action with the online network and values
    it with the target network. `discounts` is gamma**n for a transition that bootstraps and 0 for
    one that ended in a terminal state: a time-limit truncation still bootstraps.
    """
    if next_q_online is None:
        next_value = ops.max(next_q_target, axis=-1)
    else:
        next_value = select(next_q_target, ops.argmax(next_q_online, axis=-1))
    return ops.stop_gradient(rewards + discounts * next_value)


def sarsa_target(next_q_target, next_actions, rewards, discounts):
    """`r + discount * Q_target(s', a')` with a' the action the behaviour policy took next."""
    return ops.stop_gradient(rewards + discounts * select(next_q_target, next_actions))


def epsilon_greedy_probs(q, epsilon):
    """Action probabilities of the epsilon-greedy policy over `q` (B, A); ties go to the first max."""
    n_actions = q.shape[-1]
    greedy = ops.one_hot(ops.argmax(q, axis=-1), n_actions, dtype=q.dtype)
    return (1.0 - epsilon) * greedy + epsilon / n_actions


def expected_sarsa_target(next_q_target, rewards, discounts, epsilon, next_q_online=None):
    """`r + discount * sum_a pi(a|s') Q_target(s', a)`, pi epsilon-greedy (van Seijen et al., 2009).

    pi is greedy with respect to `next_q_online` when given (the behaviour policy's network),
    else with respect to the target network.
    """
    greedy_over = next_q_target if next_q_online is None else next_q_online
    probs = epsilon_greedy_probs(greedy_over, epsilon)
    next_value = ops.sum(probs * next_q_target, axis=-1)
    return ops.stop_gradient(rewards + discounts * next_value)


def td_loss(q_taken, targets, weights, loss="huber"):
    """Weighted mean of the elementwise loss of the TD errors. Returns `(loss, td_errors)`.

    `weights` are importance-sampling weights for prioritized replay (all ones for uniform replay).
    """
    td_errors = q_taken - targets
    return ops.mean(weights * ELEMENTWISE_LOSSES[loss](td_errors)), td_errors
