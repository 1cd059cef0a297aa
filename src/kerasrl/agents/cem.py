"""The cross-entropy method over a Keras model's weights (Rubinstein, 1999; Szita and Lorincz,
2006, for the added noise): keras-rl's CEMAgent, without gradients.

A diagonal Gaussian N(mean, std^2) over the model's trainable weights, flattened to one vector of
D numbers. The loop, per iteration:
    draw batch_size weight vectors from the Gaussian (numpy, the agent's seeded generator)
    run each for episodes_per_candidate whole episodes: each of the n_envs envs runs one
        candidate, all acting in one forward pass (each env with its own weights); an env whose
        episode ends starts the next candidate's episode
    score each candidate by its mean return; the elite are the batch_size * elite_frac best
    refit: mean, std = the elite's mean and std per weight, plus the extra noise
        noise_ampl * exp(-noise_decay_const * env steps) on the std (noisy CEM, keras-rl's)
    keep the best candidate seen; the policy's weights are the mean (policy_weights='mean'), or
        that best candidate ('best', keras-rl's)

Where keras-rl differs: its EpisodeParameterMemory kept the last 1,000 episodes' weights and
returns, and every train_interval episodes refitted to the elite of batch_size episodes sampled
from that memory (so old iterations' candidates mix in); here each iteration refits to its own
candidates, the textbook CEM. An env whose episode ends when every candidate of the iteration is
taken runs the mean weights (its episode is not scored) until the iteration's last candidate
finishes; then every env starts a new episode, so that each candidate's episode starts at a reset.
"""

from __future__ import annotations

import math

import numpy as np

from kerasrl.agents.weight_search import GRADIENT_ONLY, WeightSearch
from kerasrl.config import CEMConfig


def cem_update(candidates: np.ndarray, scores: np.ndarray, n_elite: int, extra_std: float = 0.0):
    """One refit of the cross-entropy method.

    Args:
        candidates: (N, D) the weight vectors drawn this iteration.
        scores: (N,) their scores (mean episode returns).
        n_elite: how many of the best are kept.
        extra_std: added to every weight's std (noisy CEM).
    Returns:
        (mean (D,), std (D,), elite (n_elite,) the elite's indices, best first; equal scores keep
        the candidates' order).
    """
    elite = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:n_elite]
    chosen = np.asarray(candidates, dtype=np.float64)[elite]  # (n_elite, D)
    return chosen.mean(axis=0), chosen.std(axis=0) + extra_std, elite


class CEM(WeightSearch):
    """The cross-entropy method (keras-rl's CEMAgent) for Discrete, MultiDiscrete and bounded Box
    action spaces.

    Discrete: the model's outputs are logits; the policy takes their argmax (or samples their
    softmax with `predict(deterministic=False)`). Box: the outputs, in [-1, 1], are scaled to the
    bounds (the default network ends in tanh), as DDPG's actor.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one.
        model: a Keras model mapping observations to (batch, n_actions) (Discrete), (batch,
            sum(nvec)) (MultiDiscrete) or (batch, action_dim) (Box), a builder
            `(observation_space, action_space) -> keras.Model`, or None for the default MLP
            (linear with the default hidden_sizes=(), as keras-rl's example).
        config: a `CEMConfig`; or give its fields as keyword arguments.
    """

    config_class = CEMConfig
    algorithm = "cem"
    knobs = "batch_size, elite_frac, initial_std, noise_ampl and noise_decay_const"
    gradient_only = ("learning_rate", *GRADIENT_ONLY)

    @property
    def n_candidates(self) -> int:
        return self.config.batch_size

    @property
    def episodes_per_candidate(self) -> int:
        return self.config.episodes_per_candidate

    def start_search(self, initial: np.ndarray) -> None:
        """The Gaussian (at zeros, or at the model's weights with initial_mean='model') and the
        best candidate so far, float64 numpy."""
        cfg = self.config
        self.mean = initial.copy() if cfg.initial_mean == "model" else np.zeros(self.n_weights)
        self.std = np.full(self.n_weights, cfg.initial_std)  # (D,)
        self.best_weights = self.mean.copy()  # (D,)
        self.best_score = -np.inf

    def draw_candidates(self) -> np.ndarray:
        noise = self.rng.standard_normal((self.config.batch_size, self.n_weights))
        return self.mean + self.std * noise  # (N, D)

    def refit(self, candidates, scores, logger) -> None:
        """Refit the Gaussian to the elite; keep the best."""
        cfg = self.config
        extra_std = cfg.noise_ampl * math.exp(-cfg.noise_decay_const * self.num_timesteps)
        self.mean, self.std, elite = cem_update(candidates, scores, cfg.n_elite, extra_std)
        if scores[elite[0]] > self.best_score:
            self.best_score = float(scores[elite[0]])
            self.best_weights = candidates[elite[0]].copy()
        logger.update(self.num_timesteps, elite_return=float(scores[elite].mean()),
                      mean_return=float(scores.mean()), best_return=self.best_score,
                      weight_std=float(self.std.mean()), extra_std=extra_std,
                      iteration=self.n_iterations + 1)

    def search_center(self) -> np.ndarray:
        return self.mean

    def policy_weights(self) -> np.ndarray:
        """The policy's weight vector (D,): the best candidate so far, or the Gaussian's mean
        (`policy_weights='mean'`, or before any candidate has finished)."""
        if self.config.policy_weights == "best" and np.isfinite(self.best_score):
            return self.best_weights.copy()
        return self.mean.copy()

    # -- training state (the names CEM's checkpoints have always had) -------------------------
    def _extra_state(self):
        arrays, meta = self._iteration_state()
        arrays = {key.replace("search/", "cem/", 1): value for key, value in arrays.items()}
        arrays.update({"cem/mean": self.mean.copy(), "cem/std": self.std.copy(),
                       "cem/best_weights": self.best_weights.copy(),
                       "cem/best_score": np.array(self.best_score)})
        return arrays, {f"cem_{key}": value for key, value in meta.items()}

    def _load_extra_state(self, arrays, meta):
        for name in ("mean", "std", "best_weights"):
            setattr(self, name, self._check_vector(f"cem/{name}", arrays[f"cem/{name}"]))
        self.best_score = float(arrays["cem/best_score"])
        self._load_iteration_state(arrays, meta, prefix="cem", meta_prefix="cem_")
        self.sync_model()
