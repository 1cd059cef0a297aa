"""The value-based agents' hyperparameters: DQN and its variants (QR-DQN, C51), SARSA and
Expected SARSA, over what they share (`QConfig`: the TD loss, the target network, epsilon-greedy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from kerasrl.config.common import (GRADIENT_STEPS_EXPECTED, GRADIENT_STEPS_HELP, CommonConfig,
                                   HindsightConfig, check, hp, resolve_gradient_steps)


@dataclass(frozen=True, kw_only=True)
class QConfig(CommonConfig):
    """What the value-based agents share: the TD loss, the target network, epsilon-greedy."""

    learning_starts: int = hp(100, "Env steps (over all envs) collected before the first update.")
    gradient_steps: int = hp(1, "Gradient steps per training round (fused into one compiled call).")
    target_update_interval: int = hp(10_000, "Env steps between target syncs (counted over all envs).")
    tau: float = hp(1.0, "Target sync: 1.0 copies the online weights (hard); below 1, Polyak averaging.")
    exploration_initial_eps: float = hp(1.0, "Epsilon at the first step.")
    exploration_final_eps: float = hp(0.05, "Epsilon after exploration_fraction of the steps.")
    exploration_fraction: float = hp(0.1, "Fraction of total steps over which epsilon (or the Boltzmann "
                                          "temperature) moves linearly to its final value.")
    loss: str = hp("huber", "'huber' (smooth L1) or 'mse' on the TD error.")
    exploration: str = hp("epsilon_greedy", "'epsilon_greedy' or 'boltzmann': sample actions from "
                                            "softmax(Q / temperature) (keras-rl's BoltzmannQPolicy).")
    exploration_initial_temperature: float = hp(1.0, "Boltzmann: the temperature at the first step.")
    exploration_final_temperature: float = hp(1.0, "Boltzmann: the temperature after "
                                                   "exploration_fraction of the steps (linear between).")

    def __post_init__(self):
        super().__post_init__()
        check(self.learning_starts >= 0, "learning_starts", self.learning_starts, "non-negative")
        check(self.gradient_steps >= 1, "gradient_steps", self.gradient_steps,
              GRADIENT_STEPS_EXPECTED if hasattr(self, "train_freq") else "at least 1")
        check(self.target_update_interval >= 1, "target_update_interval",
              self.target_update_interval, "at least 1")
        check(0.0 < self.tau <= 1.0, "tau", self.tau, "in (0, 1] (1.0 is a hard copy)")
        for name in ("exploration_initial_eps", "exploration_final_eps", "exploration_fraction"):
            check(0.0 <= getattr(self, name) <= 1.0, name, getattr(self, name), "in [0, 1]")
        check(self.loss in ("huber", "mse"), "loss", self.loss, "'huber' or 'mse'")
        check(self.exploration in ("epsilon_greedy", "boltzmann"), "exploration", self.exploration,
              "'epsilon_greedy' or 'boltzmann'")
        for name in ("exploration_initial_temperature", "exploration_final_temperature"):
            value = getattr(self, name)
            check(value > 0 and math.isfinite(value), name, value,
                  "a positive number (the softmax is over Q / temperature; small is nearly greedy)")


@dataclass(frozen=True, kw_only=True)
class DQNConfig(QConfig, HindsightConfig):
    """Deep Q-learning (Mnih et al., 2015) and its variants."""

    RENAMED: ClassVar[dict[str, str]] = {"n_step": "n_step_return"}

    buffer_size: int = hp(100_000, "Replay capacity in transitions (preallocated).")
    batch_size: int = hp(32, "Transitions per gradient step.")
    train_freq: int = hp(4, "Env steps (per env) between training rounds.")
    gradient_steps: int = hp(1, GRADIENT_STEPS_HELP)
    double_q: bool = hp(False, "Double DQN: the online net picks the next action, the target values it.")
    dueling: bool = hp(False, "Dueling head (value + advantage streams) on the model, or the default MLP torso.")
    noisy_nets: bool = hp(False, "Noisy networks (Fortunato et al., 2018): value streams of NoisyDense layers "
                                 "after the torso (the model, or the default's), exploring by learned weight "
                                 "noise; epsilon still applies (0 for noise alone).")
    noisy_sigma: float = hp(0.5, "Noisy networks: sigma_0, the initial noise scale (sigma_0 / sqrt(inputs)).")
    n_step_return: int = hp(1, "Rewards summed before bootstrapping: the n of an n-step return (stops "
                               "at episode ends; 1: one-step TD). Was `n_step` (RLlib's name), renamed "
                               "because PPO's and SARSA's `n_steps` means steps per rollout.")
    prioritized_replay: bool = hp(False, "Sample transitions in proportion to their TD error (PER).")
    prioritized_replay_alpha: float = hp(0.6, "PER: how much prioritization is used, in [0, 1].")
    prioritized_replay_beta0: float = hp(0.4, "PER: importance-sampling exponent at the start, annealed to 1.")
    prioritized_replay_eps: float = hp(1e-6, "PER: added to |TD error| so that no priority is 0.")
    random_warmup: bool = hp(True, "Act uniformly at random before learning_starts (as SB3); False: "
                                   "epsilon-greedy from the untrained network (as the snake-dqn reference).")

    def __post_init__(self):
        resolve_gradient_steps(self)
        super().__post_init__()
        check(self.buffer_size >= 1, "buffer_size", self.buffer_size, "at least 1")
        check(self.batch_size >= 1, "batch_size", self.batch_size, "at least 1")
        check(self.train_freq >= 1, "train_freq", self.train_freq, "at least 1")
        check(int(self.n_step_return) == self.n_step_return and self.n_step_return >= 1,
              "n_step_return", self.n_step_return, "an integer of at least 1 (1 is plain one-step TD)")
        check(0.0 <= self.prioritized_replay_alpha <= 1.0, "prioritized_replay_alpha",
              self.prioritized_replay_alpha, "in [0, 1]")
        check(0.0 <= self.prioritized_replay_beta0 <= 1.0, "prioritized_replay_beta0",
              self.prioritized_replay_beta0, "in [0, 1]")
        check(self.prioritized_replay_eps > 0, "prioritized_replay_eps",
              self.prioritized_replay_eps, "positive")
        check(self.noisy_sigma >= 0 and math.isfinite(self.noisy_sigma), "noisy_sigma",
              self.noisy_sigma, "a non-negative number (0.5 is the paper's)")
        if self.hindsight_goals:  # HER replays one step's reward for a new goal, sampled uniformly
            check(self.n_step_return == 1, "n_step_return", self.n_step_return,
                  "1 with hindsight replay (hindsight_goals > 0 recomputes one step's reward)")
            check(not self.prioritized_replay, "prioritized_replay", self.prioritized_replay,
                  "False with hindsight replay (hindsight_goals > 0 samples uniformly)")


@dataclass(frozen=True, kw_only=True)
class MDQNConfig(DQNConfig):
    """Munchausen DQN (Vieillard, Pietquin and Geist, 2020): DQN whose target adds the scaled,
    clipped log-probability of the taken action under softmax(Q_target / tau) to the reward, and
    bootstraps from the soft value of s' instead of its max. The paper's tau, alpha and l0; the
    rest as DQNConfig."""

    munchausen_tau: float = hp(0.03, "The entropy temperature tau: pi = softmax(Q_target / tau).")
    munchausen_alpha: float = hp(0.9, "The Munchausen scale alpha of tau * log pi(a|s) added to r.")
    munchausen_clip: float = hp(-1.0, "l0: log pi(a|s) is clipped to [l0, 0] before scaling.")

    def __post_init__(self):
        super().__post_init__()
        check(self.munchausen_tau > 0 and math.isfinite(self.munchausen_tau), "munchausen_tau",
              self.munchausen_tau, "a positive number (the paper's 0.03)")
        check(0.0 <= self.munchausen_alpha <= 1.0, "munchausen_alpha", self.munchausen_alpha,
              "in [0, 1] (0 is soft DQN; the paper's 0.9)")
        check(self.munchausen_clip < 0, "munchausen_clip", self.munchausen_clip,
              "negative (the paper's -1)")
        check(not self.double_q, "double_q", self.double_q,
              "False (M-DQN's soft value of s' takes no max for Double DQN to decouple)")


@dataclass(frozen=True, kw_only=True)
class QRDQNConfig(DQNConfig):
    """QR-DQN (Dabney et al., 2018): DQN learning N quantiles of each action's return.

    The defaults are Stable-Baselines3-contrib's QR-DQN (200 quantiles, Adam at 5e-5 with epsilon
    0.01 / 32 as in the paper, no gradient clipping, epsilon to 0.01 over the first 0.5%), with
    DQNConfig's replay size and warm-up.
    """

    n_quantiles: int = hp(200, "Quantiles of each action's return the network outputs: (A, N).")
    learning_rate: float = hp(5e-5, "Adam step size (decays linearly to 0 if lr_schedule='linear').")
    adam_epsilon: float = hp(0.01 / 32, "Epsilon of Adam (the QR-DQN paper's 0.01 / batch size "
                                         "of 32; scale it with batch_size as SB3-contrib does).")
    max_grad_norm: float | None = hp(None, "Clip the global gradient norm to this; None: no clipping.")
    exploration_fraction: float = hp(0.005, "Fraction of total steps over which epsilon moves "
                                            "linearly to its final value.")
    exploration_final_eps: float = hp(0.01, "Epsilon after exploration_fraction of the steps.")
    loss: str = hp("huber", "'huber': the quantile Huber loss (kappa 1); the only choice.")

    def __post_init__(self):
        super().__post_init__()
        check(self.n_quantiles >= 1, "n_quantiles", self.n_quantiles, "at least 1")
        check(self.loss == "huber", "loss", self.loss,
              "'huber' (QR-DQN learns by the quantile Huber loss)")


@dataclass(frozen=True, kw_only=True)
class IQNConfig(QRDQNConfig):
    """IQN (Dabney et al., 2018, "Implicit Quantile Networks"): DQN learning the quantile
    function of each action's return, at fractions sampled afresh for every transition.

    The paper's sample sizes (N = N' = 64 fractions for the online and the target quantiles, K =
    32 to choose actions, 64 cosines) and QR-DQN's optimizer (Adam 5e-5, epsilon 0.01 / 32);
    the rest as QRDQNConfig. Dueling and noisy streams are not part of IQN's network.
    """

    n_quantiles: int = hp(64, "N: fractions sampled per transition for the online quantiles.")
    n_target_quantiles: int = hp(64, "N': fractions sampled per transition for the target quantiles.")
    n_acting_quantiles: int = hp(32, "K: fractions whose mean Q chooses actions (sampled while "
                                     "training; their midpoints in evaluation and saved policies).")
    n_cosines: int = hp(64, "Cosine features of a fraction before its embedding (the paper's 64).")

    def __post_init__(self):
        super().__post_init__()
        for name in ("n_target_quantiles", "n_acting_quantiles", "n_cosines"):
            check(getattr(self, name) >= 1, name, getattr(self, name), "at least 1")
        check(not self.dueling, "dueling", self.dueling,
              "False (IQN's network has no dueling streams; use QR-DQN or C51 for dueling)")
        check(not self.noisy_nets, "noisy_nets", self.noisy_nets,
              "False (IQN explores epsilon-greedily; use Rainbow for noisy networks)")


@dataclass(frozen=True, kw_only=True)
class C51Config(DQNConfig):
    """C51 (Bellemare et al., 2017): DQN learning a categorical distribution of each action's
    return on n_atoms fixed atoms from v_min to v_max.

    v_min and v_max bound the returns the network can represent: set them to the env's (CartPole
    at gamma 0.99: 0 to 100). The defaults are Tianshou's C51 (51 atoms on [-10, 10]) with Adam's
    epsilon 0.01 / 32 (the paper's, as Dopamine) and DQNConfig's other defaults.
    """

    n_atoms: int = hp(51, "Atoms of each action's return distribution: the network outputs (A, n_atoms).")
    v_min: float = hp(-10.0, "The smallest return the distribution represents (the first atom).")
    v_max: float = hp(10.0, "The largest return the distribution represents (the last atom).")
    adam_epsilon: float = hp(0.01 / 32, "Epsilon of Adam (the paper's 0.01 / batch size of 32).")
    loss: str = hp("huber", "Unused: C51 learns by the cross-entropy to the projected target; "
                            "leave it at 'huber'.")

    def __post_init__(self):
        super().__post_init__()
        check(self.n_atoms >= 2, "n_atoms", self.n_atoms, "at least 2")
        check(math.isfinite(self.v_min) and math.isfinite(self.v_max) and self.v_min < self.v_max,
              "v_max", self.v_max, f"a finite number above v_min={self.v_min}")
        check(self.loss == "huber", "loss", self.loss,
              "'huber' (unused: C51 learns by the cross-entropy to the projected target)")


@dataclass(frozen=True, kw_only=True)
class RainbowConfig(C51Config):
    """Rainbow (Hessel et al., 2018): C51 with Double DQN, dueling streams, noisy networks,
    3-step returns and prioritized replay, at the paper's Atari settings: Adam 6.25e-5 (epsilon
    1.5e-4), no epsilon-greedy (the noise explores), a target sync every 8,000 agent steps
    (32k frames), learning from 20,000 (80k frames), 1M transitions, priority exponent 0.5 with
    importance sampling from 0.4 to 1, 51 atoms on [-10, 10]. For vector tasks see the presets."""

    double_q: bool = hp(True, "Double DQN: the online net picks the next action, the target values it.")
    dueling: bool = hp(True, "Dueling streams: a value distribution plus per-action advantages, per atom.")
    noisy_nets: bool = hp(True, "Noisy networks: NoisyDense streams explore by learned weight noise.")
    n_step_return: int = hp(3, "Rewards summed before bootstrapping (Rainbow's 3-step returns).")
    prioritized_replay: bool = hp(True, "Sample transitions in proportion to their loss (the cross-entropy).")
    prioritized_replay_alpha: float = hp(0.5, "PER: how much prioritization is used (Rainbow's 0.5).")
    exploration_initial_eps: float = hp(0.0, "Epsilon at the first step (0: the noise explores).")
    exploration_final_eps: float = hp(0.0, "Epsilon after exploration_fraction of the steps.")
    learning_rate: float = hp(6.25e-5, "Adam step size (Rainbow's).")
    adam_epsilon: float = hp(1.5e-4, "Epsilon of Adam (Rainbow's).")
    buffer_size: int = hp(1_000_000, "Replay capacity in transitions (preallocated).")
    learning_starts: int = hp(20_000, "Env steps (over all envs) collected before the first update.")
    target_update_interval: int = hp(8_000, "Env steps between target syncs (counted over all envs).")


@dataclass(frozen=True, kw_only=True)
class SARSAConfig(QConfig):
    """Deep SARSA and Expected SARSA: on-policy, learning from the transitions just collected.

    The defaults learn CartPole-v1 and keep it on every backend (docs/agents.md): Boltzmann
    exploration at temperature 1 (a policy that changes smoothly with Q: under epsilon-greedy the
    greedy action flips with every small change of Q and SARSA chatters, never holding what it
    learned), batches of 32 transitions (8 envs x 4 steps) with 8 gradient steps each, MSE (Huber
    on small on-policy batches regresses to the median and diverges), Adam at 1e-3 decaying
    linearly to 0 (so that a policy that has learned settles instead of drifting), a 128x128 MLP.
    The temperature is in units of Q, that is of the rewards: scale it with them.
    """

    expected: bool = hp(False, "Expected SARSA: bootstrap from the expectation of Q under the "
                               "behaviour policy instead of the next action taken.")
    exploration: str = hp("boltzmann", "'boltzmann' (actions from softmax(Q / temperature)) or "
                                       "'epsilon_greedy'.")
    exploration_initial_temperature: float = hp(1.0, "Boltzmann: the temperature at the first step "
                                                     "(in units of Q: scale it with the rewards).")
    exploration_final_temperature: float = hp(1.0, "Boltzmann: the temperature after "
                                                   "exploration_fraction of the steps (linear between).")
    n_envs: int = hp(8, "Environments stepped together; each round learns from n_steps * n_envs "
                        "transitions.")
    n_steps: int = hp(4, "Vector steps collected per training round; the round learns from "
                         "these n_steps * n_envs transitions, then drops them.")
    learning_rate: float = hp(1e-3, "Adam step size (decays linearly to 0 if lr_schedule='linear').")
    lr_schedule: str = hp("linear", "'constant' or 'linear' (to 0 at the end of fit).")
    loss: str = hp("mse", "'mse' or 'huber' (Huber regresses small on-policy batches to the median).")
    hidden_sizes: tuple[int, ...] = hp((128, 128), "Hidden layers of the default MLP (ignored with model=).")
    gradient_steps: int = hp(8, "Gradient steps on each round's transitions (fused into one compiled call).")
    learning_starts: int = hp(0, "Env steps (over all envs) collected before the first update.")
    target_update_interval: int = hp(1_000, "Env steps between target syncs (counted over all envs).")
    exploration_fraction: float = hp(0.2, "Fraction of total steps over which epsilon (or the "
                                          "temperature) moves linearly to its final value.")
    exploration_final_eps: float = hp(0.01, "With exploration='epsilon_greedy': epsilon after "
                                            "exploration_fraction of the steps.")

    def __post_init__(self):
        super().__post_init__()
        check(self.n_steps >= 1, "n_steps", self.n_steps, "at least 1")
