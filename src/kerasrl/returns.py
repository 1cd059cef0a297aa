"""Returns and advantages in numpy, computed on collected rollouts (outside any gradient).

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
