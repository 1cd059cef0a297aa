"""The hyperparameters of the searches over a policy network's weights, which follow no
gradient: the cross-entropy method (`CEMConfig`) and augmented random search (`ARSConfig`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kerasrl.config.common import CommonConfig, check, hp


@dataclass(frozen=True, kw_only=True)
class CEMConfig(CommonConfig):
    """The cross-entropy method over a policy network's weights (keras-rl's CEMAgent; Szita and
    Lorincz, 2006, for the added noise). No gradients: `learning_rate`, `lr_schedule`,
    `max_grad_norm`, `adam_epsilon`, `adam_epsilon_style` and `gamma` (returns are undiscounted) are
    not used.

    The defaults learn CartPole-v1 to 500 with keras-rl's linear policy (docs/agents.md).
    """

    n_envs: int = hp(10, "Environments stepped together, each running one candidate's episode "
                         "(one forward pass acts for all of them).")
    hidden_sizes: tuple[int, ...] = hp((), "Hidden layers of the default MLP; () is a linear "
                                           "policy, keras-rl's example (ignored with model=).")
    batch_size: int = hp(50, "Candidate weight vectors drawn per iteration (keras-rl's batch_size).")
    elite_frac: float = hp(0.2, "Fraction of each iteration's candidates, the best by return, that "
                                "the mean and std are refitted to (at least one: batch_size * "
                                "elite_frac >= 1).")
    episodes_per_candidate: int = hp(1, "Episodes each candidate is run for; its score is their "
                                        "mean return.")
    initial_std: float = hp(1.0, "Std of the initial Gaussian over the weights (keras-rl's 1.0).")
    initial_mean: str = hp("zeros", "Mean of the initial Gaussian: 'zeros' (keras-rl's) or "
                                    "'model' (the model's initial weights, e.g. pretrained).")
    noise_ampl: float = hp(0.0, "Extra std added after each refit: noise_ampl * exp(-"
                                "noise_decay_const * env steps) keeps the search from collapsing "
                                "(keras-rl's noise_ampl; 0: none).")
    noise_decay_const: float = hp(0.0, "Decay of the extra std per env step (keras-rl's "
                                       "noise_decay_const).")
    sample_actions: bool = hp(False, "Discrete actions while searching: False takes the argmax "
                                     "of the outputs (what the policy does); True samples the "
                                     "softmax of the outputs, as keras-rl's training.")
    policy_weights: str = hp("mean", "The weights the policy and the Keras model get: 'mean' "
                                     "(the Gaussian's mean) or 'best' (the candidate with the "
                                     "highest score so far, keras-rl's: one lucky episode can "
                                     "make it the best).")

    def __post_init__(self):
        super().__post_init__()
        check(self.batch_size >= 1, "batch_size", self.batch_size, "at least 1")
        check(0.0 < self.elite_frac <= 1.0, "elite_frac", self.elite_frac, "in (0, 1]")
        check(self.n_elite >= 1, "elite_frac", self.elite_frac,
              f"at least 1 / batch_size = {1 / self.batch_size:.3g} (batch_size * elite_frac "
              f"candidates are kept; raise elite_frac or batch_size)")
        check(self.episodes_per_candidate >= 1, "episodes_per_candidate",
              self.episodes_per_candidate, "at least 1")
        check(self.initial_std > 0 and math.isfinite(self.initial_std), "initial_std",
              self.initial_std, "a positive number")
        check(self.initial_mean in ("zeros", "model"), "initial_mean", self.initial_mean,
              "'zeros' or 'model'")
        check(self.noise_ampl >= 0 and math.isfinite(self.noise_ampl), "noise_ampl",
              self.noise_ampl, "a non-negative number")
        check(self.noise_decay_const >= 0 and math.isfinite(self.noise_decay_const),
              "noise_decay_const", self.noise_decay_const, "a non-negative number")
        check(self.policy_weights in ("best", "mean"), "policy_weights", self.policy_weights,
              "'best' or 'mean'")

    @property
    def n_elite(self) -> int:
        """Candidates kept per iteration: batch_size * elite_frac, rounded down (keras-rl's)."""
        return int(math.floor(self.batch_size * self.elite_frac + 1e-9))


@dataclass(frozen=True, kw_only=True)
class ARSConfig(CommonConfig):
    """Augmented random search (Mania et al., 2018) over a policy network's weights, as
    Stable-Baselines3-contrib's ARS; the defaults are its (n_delta 8, learning_rate 0.02,
    delta_std 0.05, a linear policy at zero). No gradients: `lr_schedule`, `max_grad_norm`,
    `adam_epsilon`, `adam_epsilon_style` and `gamma` (returns are undiscounted) are not used.
    """

    n_envs: int = hp(1, "Environments stepped together, each running one candidate's episode "
                        "(one forward pass acts for all of them).")
    hidden_sizes: tuple[int, ...] = hp((), "Hidden layers of the default MLP; () is a linear "
                                           "policy (SB3-contrib's LinearPolicy; ignored with "
                                           "model=).")
    learning_rate: float = hp(0.02, "Step size of the update, divided by n_top times the std of "
                                    "the kept returns.")
    n_delta: int = hp(8, "Random directions per iteration; each is tried both ways (2 * n_delta "
                         "candidates).")
    n_top: int | None = hp(None, "Directions kept for the update, those whose better side "
                                 "scored highest; None: all n_delta.")
    delta_std: float = hp(0.05, "Scale of the random directions added to the weights.")
    zero_policy: bool = hp(True, "Start from zero weights (SB3-contrib's); False: from the "
                                 "model's initial weights.")
    alive_bonus_offset: float = hp(0.0, "Added to a candidate's return per step of its episode "
                                        "(e.g. -1 cancels a locomotion env's reward for staying "
                                        "alive).")
    n_eval_episodes: int = hp(1, "Episodes each candidate is run for; its score is their mean "
                                 "return.")
    normalize_observations: bool = hp(False, "Normalize observations with the running mean/var "
                                             "of every observation acted on while searching, "
                                             "kept in the policy (ARS V2, the zoo's "
                                             "normalize: norm_obs).")
    clip_obs: float = hp(10.0, "With normalize_observations: clip normalized observations to "
                               "+-clip_obs.")

    def __post_init__(self):
        super().__post_init__()
        check(self.n_delta >= 1, "n_delta", self.n_delta, "at least 1")
        check(self.n_top is None or 1 <= self.n_top <= self.n_delta, "n_top", self.n_top,
              f"None or from 1 to n_delta = {self.n_delta}")
        check(self.learning_rate > 0 and math.isfinite(self.learning_rate), "learning_rate",
              self.learning_rate, "a positive number")
        check(self.delta_std > 0 and math.isfinite(self.delta_std), "delta_std", self.delta_std,
              "a positive number")
        check(math.isfinite(self.alive_bonus_offset), "alive_bonus_offset",
              self.alive_bonus_offset, "a finite number")
        check(self.n_eval_episodes >= 1, "n_eval_episodes", self.n_eval_episodes, "at least 1")
        check(self.clip_obs > 0, "clip_obs", self.clip_obs, "positive")

    @property
    def kept_directions(self) -> int:
        """n_top, or n_delta where it is None."""
        return self.n_delta if self.n_top is None else self.n_top
