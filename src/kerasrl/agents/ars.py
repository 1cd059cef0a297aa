"""Augmented random search (Mania et al., 2018): a finite-difference step on a Keras model's weights
from mirrored random directions, without gradients, as Stable-Baselines3-contrib's ARS.

The weights theta, flattened to D numbers (zeros at the start by default: a linear policy that
does nothing). Each iteration, on CEM's loop of candidates run in parallel envs
(agents/weight_search.py):
    draw n_delta directions delta_k ~ N(0, I) (numpy, the agent's seeded generator)
    run theta + delta_std * delta_k and theta - delta_std * delta_k, n_eval_episodes each: the
        mean returns r+_k and r-_k (plus alive_bonus_offset per step)
    keep the n_top directions whose max(r+_k, r-_k) is highest
    theta += learning_rate / (n_top * sigma_R) * sum_k (r+_k - r-_k) delta_k, sigma_R the std
        (n - 1) of the kept 2 * n_top returns (+ 1e-6)
The policy is theta. With `normalize_observations` the candidates see observations normalized by
the running statistics of every observation acted on (the paper's V2), which the policy keeps.
"""

from __future__ import annotations

import numpy as np

from kerasrl.agents.weight_search import WeightSearch
from kerasrl.config import ARSConfig


def ars_update(weights: np.ndarray, deltas: np.ndarray, plus: np.ndarray, minus: np.ndarray,
               n_top: int, learning_rate: float):
    """One ARS step.

    Args:
        weights: (D,) the current weights.
        deltas: (K, D) the directions (unscaled, standard normal).
        plus, minus: (K,) the scores of weights + delta_std * delta_k and of weights - ....
        n_top: how many directions are kept.
        learning_rate: the step size before its division by n_top * sigma_R.
    Returns:
        (new weights (D,), the step size, sigma_R, the kept directions' indices, best first;
        equal scores keep the directions' order).
    """
    plus, minus = np.asarray(plus, np.float64), np.asarray(minus, np.float64)
    kept = np.argsort(-np.maximum(plus, minus), kind="stable")[:n_top]
    plus, minus = plus[kept], minus[kept]
    return_std = float(np.std(np.concatenate([plus, minus]), ddof=1))  # 2 * n_top >= 2 returns
    step_size = learning_rate / (n_top * return_std + 1e-6)
    direction = (plus - minus) @ np.asarray(deltas, np.float64)[kept]
    return np.asarray(weights, np.float64) + step_size * direction, step_size, return_std, kept


class ARS(WeightSearch):
    """Augmented random search (SB3-contrib's ARS) for Discrete, MultiDiscrete and bounded Box
    action spaces.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one.
        model: a Keras model mapping observations to (batch, n_actions) logits (Discrete),
            (batch, sum(nvec)) (MultiDiscrete) or (batch, action_dim) in [-1, 1] (Box), a builder
            `(observation_space, action_space) -> keras.Model`, or None for the default network
            (linear, hidden_sizes=(), as SB3-contrib's LinearPolicy; tanh for a Box).
        config: an `ARSConfig`; or give its fields as keyword arguments.
    """

    config_class = ARSConfig
    algorithm = "ars"
    knobs = "n_delta, n_top, learning_rate, delta_std, alive_bonus_offset and n_eval_episodes"

    @property
    def n_candidates(self) -> int:
        return 2 * self.config.n_delta

    @property
    def episodes_per_candidate(self) -> int:
        return self.config.n_eval_episodes

    def start_search(self, initial: np.ndarray) -> None:
        """theta: zeros (zero_policy), or the model's initial weights."""
        self.weights = np.zeros_like(initial) if self.config.zero_policy else initial.copy()
        self._deltas: np.ndarray | None = None  # this iteration's (n_delta, D)

    def draw_candidates(self) -> np.ndarray:
        cfg = self.config
        self._deltas = self.rng.standard_normal((cfg.n_delta, self.n_weights))
        scaled = cfg.delta_std * self._deltas
        return np.concatenate([self.weights + scaled, self.weights - scaled])  # (2K, D)

    def _episode_return(self, episode_return: float, length: int) -> float:
        return episode_return + self.config.alive_bonus_offset * length

    def refit(self, candidates, scores, logger) -> None:
        cfg = self.config
        plus, minus = scores[:cfg.n_delta], scores[cfg.n_delta:]
        self.weights, step_size, return_std, kept = ars_update(
            self.weights, self._deltas, plus, minus, cfg.kept_directions, cfg.learning_rate)
        self._deltas = None
        logger.update(self.num_timesteps, mean_return=float(scores.mean()),
                      top_return=float(np.maximum(plus, minus)[kept].mean()),
                      return_std=return_std, step_size=step_size, iteration=self.n_iterations + 1)

    def search_center(self) -> np.ndarray:
        return self.weights

    def policy_weights(self) -> np.ndarray:
        """theta (D,)."""
        return self.weights.copy()

    # -- training state -----------------------------------------------------------------------
    def _extra_state(self):
        arrays, meta = self._iteration_state()
        arrays["ars/weights"] = self.weights.copy()
        if self._deltas is not None:
            arrays["ars/deltas"] = self._deltas.copy()
        return arrays, meta

    def _load_extra_state(self, arrays, meta):
        self.weights = self._check_vector("ars/weights", arrays["ars/weights"])
        self._deltas = (np.array(arrays["ars/deltas"], np.float64) if "ars/deltas" in arrays
                        else None)
        self._load_iteration_state(arrays, meta)
        self.sync_model()
