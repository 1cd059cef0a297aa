"""How actions are drawn from a network's outputs in numpy: epsilon-greedy, Boltzmann, categorical
and Gaussian samples and their log-probabilities, and the unit box <-> Box bounds maps. Used by the
policies' `predict` and by the agents' Python loops (the compiled loops draw from their own
streams in keras.ops)."""

from __future__ import annotations

import numpy as np

from kerasrl.masks import uniform_allowed
from kerasrl.spaces import split_segments


def epsilon_greedy(greedy_actions, n_actions: int, epsilon: float, rng: np.random.Generator,
                   masks: np.ndarray | None = None, size: int | None = None) -> np.ndarray:
    """Replace each action by a uniform one with probability epsilon (numpy-side, so that every
    backend draws the same numbers from the same seed). With `masks` (B, n_actions) bool the
    uniform action is drawn among each row's allowed actions (`greedy_actions` must be allowed).

    `greedy_actions` (B,), or a callable that returns them, with `size` B: called after the draws
    and only if some row acts greedily, so that a step where every env explores skips the network
    (SB3's DQN skips it likewise); the same actions from the same draws either way."""
    lazy = callable(greedy_actions)
    explore = rng.random((size,) if lazy else np.shape(greedy_actions)) < epsilon
    if masks is None:
        random_actions = rng.integers(0, n_actions, size=explore.shape)
    else:
        random_actions = uniform_allowed(masks, rng)
    if lazy:
        if explore.all():
            return random_actions
        greedy_actions = greedy_actions()
    return np.where(explore, random_actions, np.asarray(greedy_actions))


def check_temperature(temperature, where: str) -> float:
    """`temperature` as a float, or a ValueError naming `where` it was given."""
    value = float(temperature)
    if not (value > 0 and np.isfinite(value)):
        raise ValueError(
            f"{where}: the Boltzmann temperature must be a positive finite number (actions are "
            f"drawn from softmax(Q / temperature)), got {temperature!r}. Use a small positive "
            f"temperature for nearly greedy actions, or deterministic=True for greedy ones.")
    return value


def boltzmann_probabilities(q: np.ndarray, temperature: float,
                            masks: np.ndarray | None = None) -> np.ndarray:
    """`softmax(q / temperature)` over each row of `q` (B, A), float64; masked actions (where
    `masks` (B, A) is False) get probability exactly 0. The numpy twin of
    `kerasrl.losses.boltzmann_probs` (tests hold the two together)."""
    z = np.asarray(q, dtype=np.float64) / temperature
    if masks is not None:
        z = np.where(masks, z, -np.inf)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def boltzmann(q: np.ndarray, temperature: float, rng: np.random.Generator,
              masks: np.ndarray | None = None) -> np.ndarray:
    """Actions (B,) drawn from `softmax(q / temperature)` (Boltzmann exploration; keras-rl's
    BoltzmannQPolicy), one uniform draw per row from `rng` (numpy-side: the same on every
    backend); with `masks` (B, A) bool only among each row's allowed actions."""
    temperature = check_temperature(temperature, "Boltzmann exploration")
    cumulative = np.cumsum(boltzmann_probabilities(q, temperature, masks), axis=-1)
    cumulative /= cumulative[:, -1:]  # exactly 1 at the end, whatever the rounding
    u = rng.random((len(cumulative), 1))
    # The first action whose cumulative probability exceeds u: never a masked one (probability 0).
    return (cumulative <= u).sum(axis=-1)


def random_actions(n_actions: int, size: int, rng: np.random.Generator,
                   masks: np.ndarray | None = None) -> np.ndarray:
    """`size` uniform actions (warm-up), among each row's allowed ones when `masks` is given."""
    if masks is None:
        return rng.integers(0, n_actions, size=size)
    return uniform_allowed(masks, rng)


# -- actor-critic policies (PPO) -----------------------------------------------------------------


def softmax_log_probs(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64 numpy."""
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def sample_categorical(logits: np.ndarray, rng: np.random.Generator,
                       sizes: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Actions (B,) int and their log-probabilities (B,) float32 from (B, A) logits (numpy draws).

    `sizes` of a MultiDiscrete space (several components): the logits are the components' side by
    side; actions (B, components), each drawn in turn, and the sum of their log-probabilities."""
    if sizes is not None and len(sizes) > 1:
        parts = [sample_categorical(segment, rng) for segment in split_segments(logits, sizes)]
        return (np.stack([a for a, _ in parts], axis=-1),
                np.sum([lp for _, lp in parts], axis=0).astype(np.float32))
    log_probs = softmax_log_probs(logits)
    cdf = np.cumsum(np.exp(log_probs), axis=-1)
    u = rng.random((cdf.shape[0], 1)) * cdf[:, -1:]
    actions = np.minimum((cdf <= u).sum(axis=-1), cdf.shape[-1] - 1)
    return actions, np.take_along_axis(log_probs, actions[:, None], axis=-1)[:, 0].astype(np.float32)


def categorical_mode(logits: np.ndarray, sizes: tuple[int, ...] | None = None) -> np.ndarray:
    """The most likely action of each row: (B,), or (B, components) for a MultiDiscrete space."""
    if sizes is not None and len(sizes) > 1:
        return np.stack([np.argmax(s, axis=-1) for s in split_segments(logits, sizes)], axis=-1)
    return np.argmax(logits, axis=-1)


def gaussian_log_prob_np(mean: np.ndarray, log_std: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """log N(actions; mean, exp(log_std)^2), summed over the action dimensions, (B,) float32."""
    z = (np.asarray(actions, np.float64) - mean) * np.exp(-np.asarray(log_std, np.float64))
    return np.sum(-0.5 * z * z - log_std - 0.5 * np.log(2 * np.pi), axis=-1).astype(np.float32)


def sample_gaussian(mean: np.ndarray, log_std: np.ndarray, rng: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Unclipped actions (B, D) float32 and their log-probabilities (B,) (numpy draws)."""
    mean = np.asarray(mean, dtype=np.float64)
    actions = mean + np.exp(np.asarray(log_std, np.float64)) * rng.standard_normal(mean.shape)
    actions = actions.astype(np.float32)
    return actions, gaussian_log_prob_np(mean, log_std, actions)


def scale_to_bounds(unit_actions, low: np.ndarray, high: np.ndarray, ops=np):
    """`low + (a + 1) / 2 * (high - low)` clipped to [low, high]: unit-box actions to the env's."""
    low, high = np.asarray(low, np.float32), np.asarray(high, np.float32)
    half_range = ((high - low) * np.float32(0.5)).astype(np.float32)
    # ops.multiply / ops.add, not `*` / `+`: on PyTorch `tensor * ndarray` is numpy's (a NumPy 2
    # DeprecationWarning from __array_wrap__); the bounds stay numpy here, constants of a traced
    # graph (TensorFlow's export refuses eager tensors captured from outside).
    scaled = ops.add(ops.multiply(unit_actions + np.float32(1.0), half_range), low)
    return ops.clip(scaled, low, high)


def unit_from_bounds(actions: np.ndarray, low: np.ndarray, high: np.ndarray, ops=np) -> np.ndarray:
    """The inverse of `scale_to_bounds` (float32; numpy, or `ops=keras.ops` on tensors): env
    actions to the unit box."""
    low, high = np.asarray(low, np.float32), np.asarray(high, np.float32)
    half_range = ((high - low) * np.float32(0.5)).astype(np.float32)
    if ops is np:
        actions = np.asarray(actions, np.float32)
    else:  # tensors throughout (a numpy operand on the right of a PyTorch tensor is numpy's)
        low, half_range = ops.convert_to_tensor(low), ops.convert_to_tensor(half_range)
    unit = (actions - low) / half_range - np.float32(1.0)
    return ops.clip(unit, -1.0, 1.0)
