"""The hyperparameters of the actor-critic agents that learn from rollouts: PPO, A2C, TRPO and
recurrent PPO, over what they share (`OnPolicyConfig`: the rollout, GAE, normalization).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kerasrl.config.common import CommonConfig, check, hp


@dataclass(frozen=True, kw_only=True)
class OnPolicyConfig(CommonConfig):
    """What the actor-critic agents that learn from rollouts (PPO, A2C) share: the rollout, GAE,
    the loss weights, the default networks and the observation and reward normalization."""

    max_grad_norm: float | None = hp(0.5, "Clip the global gradient norm to this; None: no clipping.")
    adam_epsilon: float = hp(1e-5, "Epsilon of Adam (added where adam_epsilon_style says).")
    n_steps: int = hp(2048, "Steps per env in each rollout; a rollout holds n_steps * n_envs transitions.")
    gae_lambda: float = hp(0.95, "GAE lambda: 1 is Monte Carlo (high variance), 0 one-step TD (high bias).")
    normalize_advantage: bool = hp(True, "Normalize advantages to mean 0, std 1 within each minibatch.")
    ent_coef: float = hp(0.0, "Weight of the entropy bonus (more exploration).")
    vf_coef: float = hp(0.5, "Weight of the value loss.")
    log_std_init: float | None = hp(None, "Continuous actions: initial log std of the Gaussian (None: 0.0).")
    activation: str = hp("tanh", "Activation of the default MLPs' hidden layers.")
    shared_network: bool = hp(False, "Default network: one MLP torso with a policy and a value head (False: two MLPs).")
    ortho_init: bool = hp(True, "Default network: orthogonal init (gain sqrt 2; 0.01 policy head; 1 value head), as SB3.")
    normalize_observations: bool = hp(False, "Normalize observations with running mean/var (kept in the policy).")
    normalize_reward: bool = hp(False, "Scale rewards by the running std of the discounted return (training only).")
    clip_obs: float = hp(10.0, "With normalize_observations: clip normalized observations to +-clip_obs.")

    def __post_init__(self):
        super().__post_init__()
        check(self.n_steps >= 1, "n_steps", self.n_steps, "at least 1")
        check(0.0 <= self.gae_lambda <= 1.0, "gae_lambda", self.gae_lambda, "in [0, 1]")
        check(self.vf_coef >= 0, "vf_coef", self.vf_coef, "non-negative")
        check(self.clip_obs > 0, "clip_obs", self.clip_obs, "positive")
        check(self.log_std_init is None or math.isfinite(self.log_std_init), "log_std_init",
              self.log_std_init, "a finite number or None")


def _check_minibatch(config) -> None:
    """A minibatch (PPO's, TRPO's critic's) holds at least one transition and at most a rollout."""
    check(config.batch_size >= 1, "batch_size", config.batch_size, "at least 1")
    check(config.batch_size <= config.n_steps * config.n_envs, "batch_size", config.batch_size,
          f"at most n_steps * n_envs = {config.n_steps * config.n_envs} (one rollout); lower it "
          f"or raise n_steps or n_envs")


@dataclass(frozen=True, kw_only=True)
class PPOConfig(OnPolicyConfig):
    """Proximal Policy Optimization (Schulman et al., 2017); defaults are Stable-Baselines3's."""

    learning_rate: float = hp(3e-4, "Adam step size (decays linearly to 0 if lr_schedule='linear').")
    batch_size: int = hp(64, "Transitions per minibatch (a rollout is split into n_steps * n_envs // batch_size).")
    n_epochs: int = hp(10, "Passes over each rollout, each in a fresh random order.")
    clip_range: float = hp(0.2, "PPO's epsilon: how far the probability ratio may move before the gain is clipped.")
    clip_range_schedule: str = hp("constant", "'constant' or 'linear' (clip_range to 0 over the run, as RL-Zoo's lin_).")
    clip_range_vf: float | None = hp(None, "Clip the value prediction to this distance from its old value; None: no clipping.")
    target_kl: float | None = hp(None, "Stop a rollout's epochs early when the approximate KL exceeds 1.5x this.")

    def __post_init__(self):
        super().__post_init__()
        _check_minibatch(self)
        check(self.n_epochs >= 1, "n_epochs", self.n_epochs, "at least 1")
        check(self.clip_range > 0, "clip_range", self.clip_range, "positive (0.1 to 0.3 is usual)")
        check(self.clip_range_schedule in ("constant", "linear"), "clip_range_schedule",
              self.clip_range_schedule, "'constant' or 'linear'")
        check(self.clip_range_vf is None or self.clip_range_vf > 0, "clip_range_vf",
              self.clip_range_vf, "positive or None")
        check(self.target_kl is None or self.target_kl > 0, "target_kl", self.target_kl,
              "positive or None")


@dataclass(frozen=True, kw_only=True)
class A2CConfig(OnPolicyConfig):
    """Synchronous advantage actor-critic (Mnih et al., 2016, the synchronous A2C of OpenAI
    Baselines); defaults are Stable-Baselines3's: one RMSprop step per 5-step rollout."""

    learning_rate: float = hp(7e-4, "Step size of the optimizer (decays linearly to 0 if lr_schedule='linear').")
    n_steps: int = hp(5, "Steps per env in each rollout; one gradient step on its n_steps * n_envs transitions.")
    gae_lambda: float = hp(1.0, "GAE lambda: 1 is the n-step return of A2C, 0 one-step TD (high bias).")
    normalize_advantage: bool = hp(False, "Normalize advantages to mean 0, std 1 over each rollout.")
    optimizer: str = hp("rmsprop", "'rmsprop' (PyTorch's RMSprop, as SB3) or 'adam' (with adam_epsilon).")
    rms_prop_alpha: float = hp(0.99, "RMSprop: decay of the running mean of squared gradients.")
    rms_prop_epsilon: float = hp(1e-5, "RMSprop: added to the root of the mean square (outside it, as PyTorch).")

    def __post_init__(self):
        super().__post_init__()
        check(self.optimizer in ("rmsprop", "adam"), "optimizer", self.optimizer, "'rmsprop' or 'adam'")
        check(0.0 <= self.rms_prop_alpha < 1.0, "rms_prop_alpha", self.rms_prop_alpha, "in [0, 1)")
        check(self.rms_prop_epsilon > 0, "rms_prop_epsilon", self.rms_prop_epsilon, "positive")


@dataclass(frozen=True, kw_only=True)
class TRPOConfig(OnPolicyConfig):
    """Trust region policy optimization (Schulman et al., 2015); defaults are Stable-Baselines3-
    contrib's TRPO's: per rollout one policy step within the KL trust region (conjugate gradients
    and a line search), then the critic's Adam steps."""

    learning_rate: float = hp(1e-3, "Adam step size of the critic (the policy's step is set by target_kl, not by a learning rate).")
    batch_size: int = hp(128, "Transitions per minibatch of the critic's steps.")
    n_critic_updates: int = hp(10, "Passes of the critic over each rollout, each in a fresh random order.")
    target_kl: float = hp(0.01, "The trust region: the largest mean KL(new policy || old) one policy step may reach.")
    cg_max_steps: int = hp(15, "Conjugate-gradient steps towards F^-1 g (each one Fisher-vector product).")
    cg_damping: float = hp(0.1, "Added to the Fisher matrix's diagonal (F + damping I) for a stable solve.")
    line_search_shrinking_factor: float = hp(0.8, "Backtracking line search: the step shrinks by this factor until the KL holds and the surrogate improves.")
    line_search_max_iter: int = hp(10, "Backtracking line search: step sizes tried before the policy is left as it was.")
    sub_sampling_factor: int = hp(1, "The policy step reads every k-th transition of the rollout (1: all of them).")
    gaussian_kl: str = hp("per_dimension", "Box actions: the KL that target_kl bounds: 'per_dimension' (the Gaussian's KL averaged over the action dimensions, as Stable-Baselines3-contrib) or 'joint' (the whole Gaussian's, summed over them: the paper's and OpenAI Baselines'; D times larger for D dimensions).")
    max_grad_norm: float | None = hp(None, "Clip the global norm of the critic's gradient to this; None: no clipping (as SB3-contrib).")
    ent_coef: float = hp(0.0, "Must be 0: TRPO's surrogate has no entropy bonus.")
    vf_coef: float = hp(0.0, "Must be 0: the critic is fitted on its own (n_critic_updates passes), not through a joint loss.")

    def __post_init__(self):
        super().__post_init__()
        _check_minibatch(self)
        check(self.n_critic_updates >= 1, "n_critic_updates", self.n_critic_updates, "at least 1")
        check(self.target_kl > 0, "target_kl", self.target_kl, "positive (0.01 is usual)")
        check(self.cg_max_steps >= 1, "cg_max_steps", self.cg_max_steps, "at least 1")
        check(self.cg_damping >= 0, "cg_damping", self.cg_damping, "non-negative")
        check(0.0 < self.line_search_shrinking_factor < 1.0, "line_search_shrinking_factor",
              self.line_search_shrinking_factor, "in (0, 1)")
        check(self.line_search_max_iter >= 1, "line_search_max_iter", self.line_search_max_iter,
              "at least 1")
        check(self.sub_sampling_factor >= 1, "sub_sampling_factor", self.sub_sampling_factor,
              "at least 1")
        check(self.n_steps * self.n_envs // self.sub_sampling_factor >= 2, "sub_sampling_factor",
              self.sub_sampling_factor, f"small enough to leave 2 transitions of a rollout of "
              f"n_steps * n_envs = {self.n_steps * self.n_envs} to the policy step")
        check(self.gaussian_kl in ("joint", "per_dimension"), "gaussian_kl", self.gaussian_kl,
              "'joint' or 'per_dimension'")
        check(self.ent_coef == 0.0, "ent_coef", self.ent_coef,
              "0: TRPO's surrogate has no entropy bonus (use kerasrl.PPO or A2C for one)")
        check(self.vf_coef == 0.0, "vf_coef", self.vf_coef,
              "0: TRPO fits its critic on its own; set n_critic_updates and learning_rate instead")


@dataclass(frozen=True, kw_only=True)
class RecurrentPPOConfig(PPOConfig):
    """PPO with a recurrent (LSTM or GRU) policy; defaults are SB3-contrib's RecurrentPPO's.

    A minibatch is whole env sequences of one rollout: batch_size is a multiple of n_steps."""

    n_steps: int = hp(128, "Steps per env in each rollout: the length of the sequences the update replays.")
    batch_size: int = hp(128, "Transitions per minibatch: batch_size // n_steps whole env sequences (a multiple of n_steps).")
    recurrent_cell: str = hp("lstm", "Default network: 'lstm' or 'gru' cells.")
    recurrent_units: int = hp(256, "Default network: units of each recurrent cell (SB3-contrib's lstm_hidden_size).")
    shared_recurrent: bool = hp(False, "Default network: one recurrent cell for policy and value (False: one each, as SB3-contrib's enable_critic_lstm).")
    recurrent_init: str = hp("keras", "Default network: initial weights of the recurrent cells: 'keras' (Glorot input kernel, orthogonal recurrent kernel, LSTM forget-gate bias 1) or 'torch' (every weight and bias uniform in +-1/sqrt(units), as PyTorch's nn.LSTM in SB3-contrib's MlpLstmPolicy).")

    def __post_init__(self):
        super().__post_init__()
        check(self.batch_size % self.n_steps == 0, "batch_size", self.batch_size,
              f"a multiple of n_steps = {self.n_steps} (a minibatch is whole env sequences of "
              f"n_steps steps)")
        check(self.recurrent_cell in ("lstm", "gru"), "recurrent_cell", self.recurrent_cell,
              "'lstm' or 'gru'")
        check(self.recurrent_units >= 1, "recurrent_units", self.recurrent_units, "at least 1")
        check(self.recurrent_init in ("keras", "torch"), "recurrent_init", self.recurrent_init,
              "'keras' or 'torch'")

