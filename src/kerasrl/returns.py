"""Returns and advantages in numpy, computed on collected rollouts (outside any gradient), and
their keras.ops twins for the loops compiled whole (kerasrl.compiled), held together by tests.

Shapes: T steps of a rollout, N environments. Arrays are (T, N), time first, as the rollout buffer
stores them.

terminated is not truncated: an episode that ended in a terminal state is worth nothing after its
last reward; one cut by a time limit still bootstraps from the value of its true final observation.
Both end the GAE recursion, because the next row of that environment belongs to a new episode.
"""

from __future__ import annotations

import numpy as np


def gae(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray, terminated: np.ndarray,
        episode_ends: np.ndarray, gamma: float, gae_lambda: float) -> tuple[np.ndarray, np.ndarray]:
    """Generalized advantage estimation (Schulman et al., 2016). Returns `(advantages, returns)`.

    Args:
        rewards: (T, N) rewards r_t.
        values: (T, N) V(s_t) of the observation each action was taken in.
        next_values: (T, N) V(s_{t+1}) of the observation each step led to: the true final
            observation where an episode ended (used only where it was truncated), and the value of
            the observation after the rollout in the last row.
        terminated: (T, N) the step ended the episode in a terminal state (no bootstrap).
        episode_ends: (T, N) the step ended the episode, terminated or truncated (the advantage
            of step t stops accumulating there).
        gamma, gae_lambda: discount and GAE's lambda (lambda = 1: Monte Carlo returns minus V;
            lambda = 0: one-step TD errors).

    `returns = advantages + values` are the value function's targets (TD(lambda) returns).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    bootstrap = 1.0 - np.asarray(terminated, dtype=np.float64)
    carry_on = 1.0 - np.asarray(episode_ends, dtype=np.float64)
    # One-step TD errors, all at once: delta_t = r_t + gamma * V(s_{t+1}) [unless terminal] - V(s_t)
    deltas = rewards + gamma * bootstrap * np.asarray(next_values, dtype=np.float64) - values
    advantages = np.zeros_like(deltas)  # (T, N)
    running = np.zeros(deltas.shape[1:])
    for t in range(deltas.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * gae_lambda * carry_on[t] * running
        advantages[t] = running
    returns = advantages + values
    return advantages.astype(np.float32), returns.astype(np.float32)



def gae_ops(rewards, values, next_values, terminated, episode_ends, gamma: float, gae_lambda: float):
    """`gae` in keras.ops (float32), for loops compiled whole (kerasrl.compiled): the same
    arguments, as (T, N) tensors (`terminated` and `episode_ends` 0/1 floats). Returns
    `(advantages, returns)`. tests/test_returns.py holds it to `gae` within float32 rounding."""
    from keras import ops

    from kerasrl import backend

    steps = rewards.shape[0]
    deltas = rewards + gamma * (1.0 - terminated) * next_values - values
    carry_on = 1.0 - episode_ends

    def body(j, carry):
        advantages, running = carry
        t = steps - 1 - j
        running = deltas[t] + gamma * gae_lambda * carry_on[t] * running
        row = ops.reshape(ops.cast(t, "int32"), (1, 1))
        return ops.scatter_update(advantages, row, ops.expand_dims(running, 0)), running

    advantages, _ = backend.fori_loop(0, steps, body,
                                      (ops.zeros_like(deltas), ops.zeros_like(deltas[0])))
    return advantages, advantages + values


def n_step_returns(rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, rows: np.ndarray,
                   envs: np.ndarray, newest: int, n_step: int, gamma: float):
    """Discounted sums of up to `n_step` rewards from each stored step (rows[i], envs[i]) of a
    replay ring (the Python loop's `ReplayBuffer`), vectorized over the batch.

    Args:
        rewards, terminated, truncated: (T, N) the ring's rows (T steps of N envs).
        rows, envs: (B,) int, the sampled steps.
        newest: the ring's newest written row (no sum reads past it).
        n_step, gamma: the n of the n-step return and the discount.

    The sum stops at an episode's end: a termination does not bootstrap, a truncation bootstraps
    from its final observation. Returns (last_rows, returns, discounts), each (B,): the row whose
    next observation bootstraps, the reward sum (float64), and gamma**k (k rewards summed) or 0
    if the episode terminated within them.
    """
    capacity = rewards.shape[0]
    available = (newest - rows) % capacity  # steps stored after each row, up to the newest
    returns = np.zeros(len(rows), dtype=np.float64)
    scale = np.ones(len(rows), dtype=np.float64)  # gamma**k for the k-th reward
    last_rows = rows.copy()
    active = np.ones(len(rows), dtype=bool)
    ended_terminal = np.zeros(len(rows), dtype=bool)
    for k in range(n_step):
        current = (rows + k) % capacity
        returns += np.where(active, scale * rewards[current, envs], 0.0)
        last_rows = np.where(active, current, last_rows)
        ended_terminal |= active & terminated[current, envs]
        ended = terminated[current, envs] | truncated[current, envs]
        scale = np.where(active, scale * gamma, scale)
        active &= ~ended & (available > k)
    return last_rows, returns, np.where(ended_terminal, 0.0, scale)


def n_step_returns_ops(rewards, terminated, truncated, rows, envs, newest, n_step: int, gamma: float):
    """`n_step_returns` in keras.ops (float32), for the compiled DQN loop, whose replay rows live in
    its state: the same arguments as tensors (`terminated` and `truncated` 0/1 floats, `rows`,
    `envs` int32 (B,), `newest` an int32 scalar). Returns (last_rows (B,) int32, returns, discounts).
    tests/test_returns.py holds it to `n_step_returns` within float32 rounding."""
    from keras import ops

    capacity, n_envs = rewards.shape[0], rewards.shape[1]

    def at(values, current):  # values[current, envs], from the flat rows
        return ops.take(ops.reshape(values, (-1,)), current * n_envs + envs, axis=0)

    available = (newest - rows + capacity) % capacity
    returns = ops.zeros(rows.shape, "float32")
    scale = ops.ones(rows.shape, "float32")
    last_rows = rows
    active = ops.ones(rows.shape, "bool")
    ended_terminal = ops.zeros(rows.shape, "bool")
    for k in range(n_step):
        current = (rows + k) % capacity
        step_terminated = at(terminated, current) > 0
        returns = returns + ops.where(active, scale * at(rewards, current), 0.0)
        last_rows = ops.where(active, current, last_rows)
        ended_terminal = ops.logical_or(ended_terminal, ops.logical_and(active, step_terminated))
        ended = ops.logical_or(step_terminated, at(truncated, current) > 0)
        scale = ops.where(active, scale * gamma, scale)
        active = ops.logical_and(active, ops.logical_and(ops.logical_not(ended), available > k))
    return last_rows, returns, ops.where(ended_terminal, 0.0, scale)
