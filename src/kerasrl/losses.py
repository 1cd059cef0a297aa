"""Losses and temporal-difference targets: pure `keras.ops` functions of model outputs and a batch.

Each is checked against a numpy reference on every backend (tests/test_losses.py). Shapes: B is the
batch, A the number of actions.
"""

from __future__ import annotations

import math

import numpy as np
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


# A masked action's value or logit: the float32 minimum, not -inf, so that a masked entry times a
# zero probability (or a zero discount) is 0, never NaN.
MASKED_VALUE = -3.4028234663852886e38


def mask_values(values, masks):
    """`values` (B, A) with the actions that `masks` (B, A) bool forbids at MASKED_VALUE; no
    mask (None) leaves them as they are."""
    if masks is None:
        return values
    return ops.where(masks, values, ops.full_like(values, MASKED_VALUE))


def q_learning_target(next_q_target, rewards, discounts, next_q_online=None, next_masks=None):
    """`r + discount * max_a Q_target(s', a)`, or Double DQN when `next_q_online` is given.

    Double DQN (van Hasselt et al., 2016) picks the next action with the online network and values
    it with the target network. `discounts` is gamma**n for a transition that bootstraps and 0 for
    one that ended in a terminal state: a time-limit truncation still bootstraps. With
    `next_masks` (B, A) bool, the max (and Double DQN's argmax) runs over the allowed actions of s'.
    """
    if next_q_online is None:
        next_value = ops.max(mask_values(next_q_target, next_masks), axis=-1)
    else:
        next_value = select(next_q_target,
                            ops.argmax(mask_values(next_q_online, next_masks), axis=-1))
    return ops.stop_gradient(rewards + discounts * next_value)


def sarsa_target(next_q_target, next_actions, rewards, discounts):
    """`r + discount * Q_target(s', a')` with a' the action the behaviour policy took next."""
    return ops.stop_gradient(rewards + discounts * select(next_q_target, next_actions))


def epsilon_greedy_probs(q, epsilon, masks=None):
    """Action probabilities of the epsilon-greedy policy over `q` (B, A); ties go to the first max.

    With `masks` (B, A) bool: greedy over the allowed actions, and epsilon spread uniformly over
    them only (a masked action has probability exactly 0).
    """
    n_actions = q.shape[-1]
    greedy = ops.one_hot(ops.argmax(mask_values(q, masks), axis=-1), n_actions, dtype=q.dtype)
    if masks is None:
        return (1.0 - epsilon) * greedy + epsilon / n_actions
    allowed = ops.cast(masks, q.dtype)
    n_allowed = ops.sum(allowed, axis=-1, keepdims=True)
    return (1.0 - epsilon) * greedy + epsilon * allowed / n_allowed


def boltzmann_probs(q, temperature, masks=None):
    """Action probabilities of the Boltzmann (softmax) policy, `softmax(q / temperature)` over
    each row of `q` (B, A); with `masks` (B, A) bool, over the allowed actions only (a masked
    action has probability exactly 0). `temperature` is a positive scalar or (B, 1)."""
    return ops.softmax(mask_values(q / temperature, masks), axis=-1)


def expected_sarsa_target(next_q_target, rewards, discounts, epsilon, next_q_online=None,
                          next_masks=None, temperature=None):
    """`r + discount * sum_a pi(a|s') Q_target(s', a)`, pi epsilon-greedy (van Seijen et al., 2009).

    pi is greedy with respect to `next_q_online` when given (the behaviour policy's network),
    else with respect to the target network; with `next_masks` (B, A) bool, over the allowed
    actions of s' only. With `temperature` (Boltzmann exploration; `epsilon` is then unused) pi
    is `softmax(Q / temperature)` of that same network.
    """
    behaviour_q = next_q_target if next_q_online is None else next_q_online
    if temperature is None:
        probs = epsilon_greedy_probs(behaviour_q, epsilon, next_masks)
    else:
        probs = boltzmann_probs(behaviour_q, temperature, next_masks)
    if next_masks is not None:  # 0 * a huge masked-out Q-value stays out of the sum
        next_q_target = ops.where(next_masks, next_q_target, ops.zeros_like(next_q_target))
    next_value = ops.sum(probs * next_q_target, axis=-1)
    return ops.stop_gradient(rewards + discounts * next_value)


def td_loss(q_taken, targets, weights, loss="huber"):
    """Weighted mean of the elementwise loss of the TD errors. Returns `(loss, td_errors)`.

    `weights` are importance-sampling weights for prioritized replay (all ones for uniform replay).
    """
    td_errors = q_taken - targets
    return ops.mean(weights * ELEMENTWISE_LOSSES[loss](td_errors)), td_errors


# -- distributional value heads (QR-DQN, C51) ----------------------------------------------------
# Shapes: B the batch, A the actions, N the quantiles or atoms of one action's return distribution.

def select_action(outputs, actions):
    """`outputs[i, actions[i]]`: (B, A, N) and (B,) int to (B, N) (a one-hot sum: exact, and the
    same op on every backend)."""
    one_hot = ops.one_hot(actions, outputs.shape[1], dtype=outputs.dtype)
    return ops.sum(outputs * one_hot[:, :, None], axis=1)


def quantile_huber_pairs(quantiles, target_quantiles, kappa=1.0, fractions=None):
    """Each pair's `|tau_i - 1{d_ij < 0}| * huber_kappa(d_ij) / kappa` (B, N, N') and d_ij =
    target_j - quantile_i, quantiles (B, N) at `fractions` tau (B, N) (IQN's), or by default at
    tau_i = (i + 1/2) / N: QR-DQN, IQN and TQC reduce it."""
    if fractions is None:
        n = quantiles.shape[-1]
        fractions = ((ops.arange(n, dtype=quantiles.dtype) + 0.5) / n)[None, :]  # (1, N)
    delta = target_quantiles[:, None, :] - quantiles[:, :, None]  # (B, N, N')
    below = ops.cast(ops.stop_gradient(delta) < 0, quantiles.dtype)
    return ops.abs(fractions[:, :, None] - below) * huber(delta, kappa) / kappa, delta


def quantile_huber_loss(quantiles, target_quantiles, weights, kappa=1.0, fractions=None):
    """QR-DQN's quantile Huber loss (Dabney et al., 2018), as Stable-Baselines3-contrib sums it,
    and IQN's at its sampled `fractions` (B, N). `quantiles` (B, N), `target_quantiles` (B, N')
    (not differentiated), `weights` (B,) importance-sampling weights. Per sample
    `sum_i mean_j` of `quantile_huber_pairs`; the loss is the weighted mean over the batch.
    Returns `(loss, priorities)`, priorities (B,) the mean |d_ij| of each sample."""
    pairwise, delta = quantile_huber_pairs(quantiles, target_quantiles, kappa, fractions)
    per_sample = ops.mean(ops.sum(pairwise, axis=1), axis=-1)  # (B,)
    priorities = ops.stop_gradient(ops.mean(ops.abs(delta), axis=(1, 2)))
    return ops.mean(weights * per_sample), priorities


def categorical_projection(next_probs, rewards, discounts, v_min, v_max):
    """C51's target distribution (Bellemare et al., 2017): the distribution `next_probs` (B, N) on
    the support z_i = v_min + i (v_max - v_min) / (N - 1), moved to r + discount * z, clipped to
    [v_min, v_max], and projected back onto z (each atom's mass split between its two neighbours
    in proportion to closeness). Returns (B, N), not differentiated.

    Written as Tianshou's C51: m_i = sum_j clip(1 - |Tz_j - z_i| / dz, 0, 1) p_j, no scatter.
    """
    n = next_probs.shape[-1]
    delta_z = (v_max - v_min) / (n - 1)
    support = v_min + ops.arange(n, dtype=next_probs.dtype) * delta_z  # (N,)
    moved = ops.clip(rewards[:, None] + discounts[:, None] * support[None, :], v_min, v_max)
    closeness = ops.clip(1.0 - ops.abs(moved[:, None, :] - support[None, :, None]) / delta_z,
                         0.0, 1.0)  # (B, N target atoms i, N moved atoms j)
    return ops.stop_gradient(ops.sum(closeness * next_probs[:, None, :], axis=-1))


def categorical_cross_entropy(logits, target_probs, weights):
    """C51's loss: the weighted mean over the batch of `-sum_i m_i log p_i`, p = softmax(`logits`)
    (B, N) of the taken actions, m = `target_probs` (B, N). Returns `(loss, priorities)`,
    priorities (B,) each sample's cross-entropy (as Tianshou's C51 gives its prioritized buffer)."""
    cross_entropy = -ops.sum(target_probs * ops.log_softmax(logits, axis=-1), axis=-1)
    return ops.mean(weights * cross_entropy), ops.stop_gradient(cross_entropy)


# -- PPO (Schulman et al., 2017) ----------------------------------------------------------------
# Shapes: B is the minibatch, A the number of discrete actions, D the action dimension.

_LOG_2PI = 1.8378770664093453  # log(2 * pi)


def categorical_segments(logits, sizes):
    """(B, sum(sizes)) logits as one (B, size) slice per component (static bounds)."""
    bounds = [0]
    for size in sizes:
        bounds.append(bounds[-1] + int(size))
    return [logits[:, a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def categorical_log_prob(logits, actions, sizes=None):
    """log pi(a | s) of a categorical policy: (B, A) logits and (B,) int actions to (B,).

    `sizes` of a MultiDiscrete space: the components' logits side by side, actions (B, components);
    the log-probability is the sum of the components' (they are drawn independently).
    For a masked policy pass `mask_values(logits, masks)`: masked actions get probability 0.
    """
    if sizes is not None and len(sizes) > 1:
        return sum(select(ops.log_softmax(segment, axis=-1), actions[:, j])
                   for j, segment in enumerate(categorical_segments(logits, sizes)))
    return select(ops.log_softmax(logits, axis=-1), actions)


def categorical_entropy(logits, sizes=None):
    """Entropy of the categorical distribution of each row of (B, A) logits, (B,); with `sizes`
    (MultiDiscrete) the sum of the components' entropies.

    With masked logits (`mask_values`) it is the entropy over the allowed actions: a masked
    action's probability is exactly 0 and its term 0 * (finite log-probability) is 0.
    """
    if sizes is not None and len(sizes) > 1:
        return sum(categorical_entropy(segment) for segment in categorical_segments(logits, sizes))
    log_probs = ops.log_softmax(logits, axis=-1)
    return -ops.sum(ops.exp(log_probs) * log_probs, axis=-1)


def gaussian_log_prob(mean, log_std, actions):
    """log pi(a | s) of a diagonal Gaussian: (B, D) means, (D,) log stds, (B, D) actions to (B,)."""
    z = (actions - mean) * ops.exp(-log_std)
    return ops.sum(-0.5 * ops.square(z) - log_std - 0.5 * _LOG_2PI, axis=-1)


def gaussian_entropy(log_std):
    """Entropy of a diagonal Gaussian with (D,) log stds: a scalar (the same for every state)."""
    return ops.sum(log_std + 0.5 + 0.5 * _LOG_2PI)


def clipped_surrogate(log_probs, old_log_probs, advantages, clip_range):
    """PPO's clipped policy loss, to minimise. Returns `(loss, ratio)`.

    `-mean(min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A))`, ratio = pi(a|s) / pi_old(a|s).
    """
    ratio = ops.exp(log_probs - old_log_probs)
    unclipped = advantages * ratio
    clipped = advantages * ops.clip(ratio, 1.0 - clip_range, 1.0 + clip_range)
    return -ops.mean(ops.minimum(unclipped, clipped)), ratio


def value_loss(values, returns, old_values=None, clip_range_vf=None):
    """Mean squared error of the value predictions against the returns (no 1/2, as SB3).

    With `clip_range_vf`, the prediction first moves at most that far from `old_values` (the values
    at collection time), as Stable-Baselines3 clips it.
    """
    if clip_range_vf is not None:
        values = old_values + ops.clip(values - old_values, -clip_range_vf, clip_range_vf)
    return ops.mean(ops.square(returns - values))


def normalize_advantages(advantages, eps=1e-8):
    """`(A - mean) / (std + eps)` over the minibatch, std with Bessel's correction (as SB3)."""
    n = ops.cast(ops.shape(advantages)[0], advantages.dtype)
    mean = ops.mean(advantages)
    std = ops.sqrt(ops.sum(ops.square(advantages - mean)) / (n - 1.0))
    return (advantages - mean) / (std + eps)


def approx_kl(log_probs, old_log_probs):
    """`mean((ratio - 1) - log ratio)`: an unbiased, non-negative estimate of KL(old || new)."""
    log_ratio = log_probs - old_log_probs
    return ops.mean(ops.exp(log_ratio) - 1.0 - log_ratio)


def ppo_loss(log_probs, old_log_probs, advantages, values, returns, entropy, *, clip_range,
             ent_coef, vf_coef, old_values=None, clip_range_vf=None):
    """The PPO objective to minimise: policy loss + vf_coef * value loss - ent_coef * entropy.

    `entropy` is per sample (B,) or a scalar (a state-independent Gaussian). Returns
    `(loss, metrics)` with policy_loss, value_loss, entropy, approx_kl and clip_fraction.
    """
    policy_loss, ratio = clipped_surrogate(log_probs, old_log_probs, advantages, clip_range)
    v_loss = value_loss(values, returns, old_values, clip_range_vf)
    mean_entropy = ops.mean(entropy)
    loss = policy_loss + vf_coef * v_loss - ent_coef * mean_entropy
    metrics = {
        "policy_loss": policy_loss,
        "value_loss": v_loss,
        "entropy": mean_entropy,
        "approx_kl": ops.stop_gradient(approx_kl(log_probs, old_log_probs)),
        "clip_fraction": ops.stop_gradient(
            ops.mean(ops.cast(ops.abs(ratio - 1.0) > clip_range, "float32"))),
    }
    return loss, metrics


def a2c_loss(log_probs, advantages, values, returns, entropy, *, ent_coef, vf_coef):
    """The A2C objective to minimise (Mnih et al., 2016; as Stable-Baselines3's A2C):
    `-mean(A * log pi(a|s)) + vf_coef * mean((R - V(s))**2) - ent_coef * mean(entropy)`.

    The policy gradient without PPO's ratio or clipping: `advantages` (B,) are constants (computed
    outside the gradient). `entropy` is per sample (B,) or a scalar. Returns `(loss, metrics)` with
    policy_loss, value_loss and entropy.
    """
    policy_loss = -ops.mean(advantages * log_probs)
    v_loss = value_loss(values, returns)
    mean_entropy = ops.mean(entropy)
    loss = policy_loss + vf_coef * v_loss - ent_coef * mean_entropy
    return loss, {"policy_loss": policy_loss, "value_loss": v_loss, "entropy": mean_entropy}


# -- continuous control (DDPG, TD3, SAC) -------------------------------------------------------
# Shapes: B the batch, D the action dimensions; actions are in the unit box [-1, 1]^D (the agents
# scale them to the env's bounds outside the losses).

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # SAC's log std is clipped to this range (as SB3 and SBX)


def smoothed_target_actions(next_actions, noise, noise_clip):
    """TD3's target policy smoothing: `clip(mu'(s') + clip(noise, -c, c), -1, 1)`, (B, D).

    `noise` is already scaled by target_policy_noise (drawn in numpy, so every backend adds the
    same numbers); `noise_clip` 0 with zero noise is DDPG's plain target action.
    """
    return ops.clip(next_actions + ops.clip(noise, -noise_clip, noise_clip), -1.0, 1.0)


def double_q_target(next_q_target, next_q_online, batch):
    """Double DQN: the online network picks the next (allowed) action, the target values it."""
    return q_learning_target(next_q_target, batch["rewards"], batch["discounts"], next_q_online,
                             next_masks=batch.get("next_action_masks"))


def max_q_target(next_q_target, next_q_online, batch):
    """DQN: r + discount * max_a Q_target(s', a), a over the allowed actions of s' if masked."""
    return q_learning_target(next_q_target, batch["rewards"], batch["discounts"],
                             next_masks=batch.get("next_action_masks"))


def clipped_double_q_target(next_q_values, rewards, discounts, next_log_probs=None, alpha=0.0):
    """`r + discount * (min_i Q_i'(s', a') - alpha * log pi(a'|s'))`, (B,), not differentiated.

    `next_q_values` is a list of (B, 1) or (B,) target critic outputs (one for DDPG, two for TD3 and
    SAC); `next_log_probs` (B,) and `alpha` add SAC's entropy term.
    """
    next_q = next_q_values[0]
    for q in next_q_values[1:]:
        next_q = ops.minimum(next_q, q)
    next_q = ops.reshape(next_q, (-1,))
    if next_log_probs is not None:
        next_q = next_q - alpha * next_log_probs
    return ops.stop_gradient(rewards + discounts * next_q)


def critic_loss(q_values, targets):
    """The sum over critics of each one's mean squared TD error, as SB3's TD3 and DDPG (SAC
    halves it). `q_values`: a list of (B, 1) or (B,); `targets`: (B,)."""
    return sum(ops.mean(ops.square(ops.reshape(q, (-1,)) - targets)) for q in q_values)


def deterministic_actor_loss(q_values):
    """DDPG / TD3 actor loss: `-mean Q_1(s, mu(s))`, (B, 1) or (B,) to a scalar."""
    return -ops.mean(q_values)


def squashed_gaussian(mean, log_std, noise):
    """A reparameterized tanh-Gaussian sample and its log-probability.

    `a = tanh(mean + exp(log_std) * noise)`, (B, D), with `noise` standard normal (B, D) drawn in
    numpy; `log pi(a|s)` (B,) is the Gaussian log density minus the log-determinant of tanh, written
    `2 (log 2 - u - softplus(-2u))` (exact, and stable where tanh saturates, unlike
    `log(1 - tanh(u)^2 + eps)`).
    """
    log_std = ops.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)
    u = mean + ops.exp(log_std) * noise
    gaussian = -0.5 * ops.square(noise) - log_std - 0.5 * math.log(2.0 * math.pi)
    correction = 2.0 * (math.log(2.0) - u - ops.softplus(-2.0 * u))
    return ops.tanh(u), ops.sum(gaussian - correction, axis=-1)


def sac_actor_loss(q_values, log_probs, alpha):
    """SAC actor loss: `mean(alpha * log pi(a|s) - min_i Q_i(s, a))` for a ~ pi reparameterized.
    `q_values`: a list of (B, 1); `log_probs` (B,)."""
    q = q_values[0]
    for other in q_values[1:]:
        q = ops.minimum(q, other)
    return ops.mean(alpha * log_probs - ops.reshape(q, (-1,)))


# -- TQC: truncated quantile critics ---------------------------------------------------------------
# Shapes: B the batch, N each critic's quantiles (at the midpoints (i + 1/2) / N), C the critics.

def truncated_quantile_target(next_quantiles, rewards, discounts, drop_per_critic, next_log_probs,
                              alpha):
    """TQC's target (Kuznetsov et al., 2020): the C target critics' quantiles at (s', a') pooled and
    sorted, the largest `drop_per_critic * C` dropped (the overestimation control), less SAC's
    entropy term, discounted onto r. `next_quantiles`: a list of C (B, N); returns
    (B, C * N - drop_per_critic * C), not differentiated."""
    pooled = ops.sort(ops.concatenate(list(next_quantiles), axis=-1), axis=-1)
    kept = pooled.shape[-1] - drop_per_critic * len(next_quantiles)
    pooled = pooled[:, :kept] - alpha * next_log_probs[:, None]
    return ops.stop_gradient(rewards[:, None] + discounts[:, None] * pooled)


def truncated_quantile_critic_loss(quantiles, target_quantiles):
    """The quantile Huber loss of each critic's (B, N) quantiles against the pooled targets (B, M),
    averaged over the batch, both quantile axes and the critics (Stable-Baselines3-contrib's TQC:
    `quantile_huber_loss(..., sum_over_quantiles=False)`)."""
    total = sum(ops.mean(quantile_huber_pairs(q, target_quantiles)[0]) for q in quantiles)
    return total / len(quantiles)


def truncated_quantile_actor_loss(quantiles, log_probs, alpha):
    """TQC's actor loss: `mean(alpha * log pi(a|s) - Q(s, a))`, Q the mean of every critic's
    quantiles at a ~ pi (the mean, not SAC's minimum: the targets' truncation already keeps the
    estimate low). `quantiles`: a list of (B, N); `log_probs` (B,)."""
    q = sum(ops.mean(z, axis=-1) for z in quantiles) / len(quantiles)
    return ops.mean(alpha * log_probs - q)


def entropy_coefficient_loss(log_alpha, log_probs, target_entropy):
    """SAC's automatic entropy tuning (Haarnoja et al., 2018b):
    `-mean(log_alpha * (log pi(a|s) + target_entropy))`, the log-probabilities not differentiated."""
    return -ops.mean(log_alpha * ops.stop_gradient(log_probs + target_entropy))


def naf_lower_triangular(l_flat, action_dim: int):
    """NAF's L (B, D, D) from the L network's output (B, D (D + 1) / 2): the lower triangle filled
    row by row (numpy's tril_indices order, as keras-rl's NAFLayer), its diagonal exponentiated
    (so that P = L L^T is positive definite) and the rest as it is."""
    rows, cols = np.tril_indices(action_dim)
    index = np.zeros((action_dim, action_dim), np.int32)  # 0: the zero column added below
    index[rows, cols] = np.arange(1, len(rows) + 1)
    diagonal = np.diagonal(index) - 1  # the diagonal's positions in l_flat, (D,)
    off_diagonal = index * (1 - np.eye(action_dim, dtype=np.int32))
    padded = ops.concatenate([ops.zeros_like(l_flat[:, :1]), l_flat], axis=-1)
    lower = ops.reshape(ops.take(padded, off_diagonal.reshape(-1), axis=1),
                        (-1, action_dim, action_dim))
    diag = ops.exp(ops.take(l_flat, diagonal, axis=1))  # (B, D)
    return lower + diag[:, :, None] * ops.eye(action_dim, dtype=l_flat.dtype)


def naf_advantage(l_flat, mu, actions):
    """NAF's advantage `A(s, a) = -1/2 (a - mu(s))^T P(s) (a - mu(s))`, P = L L^T, (B,).

    `l_flat` (B, D (D + 1) / 2) is the L network's output (see `naf_lower_triangular`), `mu` and
    `actions` (B, D) in the unit box. Written `-1/2 |L^T (a - mu)|^2`, the same quadratic form.
    """
    lower = naf_lower_triangular(l_flat, mu.shape[-1])
    projected = ops.einsum("bij,bi->bj", lower, actions - mu)  # L^T (a - mu), (B, D)
    return -0.5 * ops.sum(ops.square(projected), axis=-1)


def naf_loss(values, advantages, targets):
    """NAF's loss: `mean 1/2 (V(s) + A(s, a) - y)^2` (keras-rl's, its Huber clip at infinity),
    `values` (B, 1) or (B,), `advantages` and `targets` (B,); y = r + discount * V'(s')."""
    q = ops.reshape(values, (-1,)) + advantages
    return ops.mean(0.5 * ops.square(q - targets))
