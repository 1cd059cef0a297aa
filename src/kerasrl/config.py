"""Hyperparameters: one frozen, keyword-only dataclass per algorithm.

Names follow Stable-Baselines3 where it has one. Each field carries its help text in its metadata;
the CLI's `--set name=value` and presets are made from these classes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar


def hp(default, help: str):  # noqa: A002  (the word the CLI uses)
    """A config field with its help text."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("Use tuples for sequence defaults: configs are frozen.")
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True, kw_only=True)
class CommonConfig:
    """Fields every agent has."""

    RENAMED: ClassVar[dict[str, str]] = {}
    """Old field name -> new one: accepted by `from_dict` with a DeprecationWarning."""

    seed: int = hp(0, "Seed of every random stream: weights, exploration, sampling, env resets.")
    n_envs: int = hp(1, "Environments stepped together; one forward pass acts for all of them.")
    learning_rate: float = hp(1e-4, "Adam step size (decays linearly to 0 if lr_schedule='linear').")
    lr_schedule: str = hp("constant", "'constant' or 'linear' (to 0 at the end of fit).")
    gamma: float = hp(0.99, "Discount factor.")
    max_grad_norm: float | None = hp(10.0, "Clip the global gradient norm to this; None: no clipping.")
    adam_epsilon: float = hp(1e-7, "Epsilon of Adam (Keras's placement, outside the square root).")
    hidden_sizes: tuple[int, ...] = hp((64, 64), "Hidden layers of the default MLP (ignored with model=).")
    vectorization: str = hp("sync", "'sync' (one process) or 'subprocess' (one worker process per env).")
    check_env: bool = hp(True, "Run kerasrl.check_env on the env when the agent is made (100 random "
                               "steps); False skips it, e.g. for an expensive env.")
    initial_weights: str = hp("seed", "'seed': draw the networks' initial weights from `seed` with numpy, "
                              "the same on every backend; 'keep': keep the weights the model has "
                              "(pretrained, or drawn by the backend).")

    def __post_init__(self):
        check_types(self)
        check(self.n_envs >= 1, "n_envs", self.n_envs, "at least 1")
        check(self.learning_rate > 0, "learning_rate", self.learning_rate, "positive")
        check(0.0 <= self.gamma <= 1.0, "gamma", self.gamma, "in [0, 1]")
        check(self.lr_schedule in ("constant", "linear"), "lr_schedule", self.lr_schedule,
              "'constant' or 'linear'")
        check(self.max_grad_norm is None or (self.max_grad_norm > 0 and math.isfinite(self.max_grad_norm)),
              "max_grad_norm", self.max_grad_norm, "a positive number or None")
        check(self.vectorization in ("sync", "subprocess"), "vectorization", self.vectorization,
              "'sync' or 'subprocess'")
        check(self.initial_weights in ("seed", "keep"), "initial_weights", self.initial_weights,
              "'seed' or 'keep'")
        check(all(int(h) > 0 for h in self.hidden_sizes), "hidden_sizes", self.hidden_sizes,
              "positive layer sizes")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready field values."""
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self)}

    @classmethod
    def upgrade(cls, values: dict[str, Any], *, warn: bool = True) -> dict[str, Any]:
        """`values` with renamed fields under their new names (a DeprecationWarning for each old
        one when `warn`; checkpoints written before a rename load silently)."""
        values = dict(values)
        for old, new in cls.RENAMED.items():
            if old not in values:
                continue
            if new in values:
                raise TypeError(f"{cls.__name__}: {old!r} is the old name of {new!r}; pass only {new!r}.")
            if warn:
                warnings.warn(f"{cls.__name__} field {old!r} is now called {new!r}; the old name "
                              f"will stop working in a future release.", DeprecationWarning, stacklevel=4)
            values[new] = values.pop(old)
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any]):
        """The config for `values`, with a clear error for a name this config does not have (an old
        name of a renamed field is accepted, with a DeprecationWarning: see `RENAMED`)."""
        values = cls.upgrade(values)
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise TypeError(
                f"{cls.__name__} has no field {', '.join(map(repr, unknown))}. "
                f"Known fields: {', '.join(sorted(known))}."
            )
        converted = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
        return cls(**converted)


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
        check(self.gradient_steps >= 1, "gradient_steps", self.gradient_steps, "at least 1")
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
class DQNConfig(QConfig):
    """Deep Q-learning (Mnih et al., 2015) and its variants."""

    RENAMED: ClassVar[dict[str, str]] = {"n_step": "n_step_return"}

    buffer_size: int = hp(100_000, "Replay capacity in transitions (preallocated).")
    batch_size: int = hp(32, "Transitions per gradient step.")
    train_freq: int = hp(4, "Env steps (per env) between training rounds.")
    double_q: bool = hp(False, "Double DQN: the online net picks the next action, the target values it.")
    dueling: bool = hp(False, "Dueling head (value + advantage streams) on the model, or the default MLP torso.")
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
        check(not self.dueling, "dueling", self.dueling,
              "False (a dueling head outputs (A,) Q-values; QR-DQN's network outputs (A, N))")


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
        check(not self.dueling, "dueling", self.dueling,
              "False (a dueling head outputs (A,) Q-values; C51's network outputs (A, n_atoms))")


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


def check_types(config) -> None:
    """Check every field of `config` against its annotation, before any range check: one
    TypeError naming the field, the value and the type it must have. Lossless forms are taken
    and stored as the annotated type: numpy scalars, an integral float for an int (1e5), an int
    for a float, a list for a tuple."""
    hints = _type_hints(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        ok, converted = _as_type(value, hints[f.name])
        if not ok:
            raise TypeError(f"{type(config).__name__}: {f.name} must be {_describe_type(hints[f.name])}, "
                            f"got {value!r} ({type(value).__name__}).")
        if converted is not value:
            object.__setattr__(config, f.name, converted)


@functools.cache
def _type_hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _as_type(value, annotation) -> tuple[bool, Any]:
    """(whether `value` is of `annotation` in a lossless form, the value in the annotated type)."""
    import numpy as np

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return True, None
        for arg in args:
            if arg is not type(None):
                ok, converted = _as_type(value, arg)
                if ok:
                    return True, converted
        return False, value
    if origin is tuple:
        if not isinstance(value, (tuple, list)):
            return False, value
        item = args[0] if args else Any
        items = [_as_type(v, item) for v in value]
        if not all(ok for ok, _ in items):
            return False, value
        return True, tuple(v for _, v in items)
    if annotation is Any:
        return True, value
    if annotation is bool:
        return (True, bool(value)) if isinstance(value, (bool, np.bool_)) else (False, value)
    if isinstance(value, (bool, np.bool_)):
        return False, value  # True is an int to Python, never a number here
    if annotation is int:
        if isinstance(value, (int, np.integer)):
            return True, int(value)
        if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
            return True, int(value)
        return False, value
    if annotation is float:
        if isinstance(value, (int, float, np.integer, np.floating)):
            return True, float(value)
        return False, value
    if annotation is str:
        return isinstance(value, str), value
    return isinstance(value, annotation), value


_PLURAL = {int: "ints", float: "numbers", str: "strings"}


def _describe_type(annotation) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe_type(arg) for arg in args)
    if origin is tuple:
        return f"a tuple of {_PLURAL.get(args[0], 'values')}" if args else "a tuple"
    return {int: "an int", float: "a number (float)", str: "a string", bool: "True or False",
            type(None): "None"}.get(annotation, getattr(annotation, "__name__", str(annotation)))


def check(ok: bool, name: str, value, expected: str) -> None:
    """Raise a ValueError naming the field, its value and what it must be."""
    if not ok:
        raise ValueError(f"{name} must be {expected}, got {value!r}.")


@dataclass(frozen=True, kw_only=True)
class OnPolicyConfig(CommonConfig):
    """What the actor-critic agents that learn from rollouts (PPO, A2C) share: the rollout, GAE,
    the loss weights, the default networks and the observation and reward normalization."""

    max_grad_norm: float | None = hp(0.5, "Clip the global gradient norm to this; None: no clipping.")
    adam_epsilon: float = hp(1e-5, "Epsilon of Adam (Keras's placement, outside the square root).")
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
        check(self.batch_size >= 1, "batch_size", self.batch_size, "at least 1")
        check(self.batch_size <= self.n_steps * self.n_envs, "batch_size", self.batch_size,
              f"at most n_steps * n_envs = {self.n_steps * self.n_envs} (one rollout); lower it "
              f"or raise n_steps or n_envs")
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


@dataclass(frozen=True, kw_only=True)
class ContinuousConfig(CommonConfig):
    """What the off-policy continuous-control agents (DDPG, TD3, SAC, NAF) share; defaults are
    RL-Zoo's Pendulum-v1 settings (Stable-Baselines3's defaults where the zoo sets none)."""

    learning_rate: float = hp(1e-3, "Adam step size of the actor, the critics (and SAC's entropy coefficient).")
    gamma: float = hp(0.98, "Discount factor.")
    max_grad_norm: float | None = hp(None, "Clip the global gradient norm to this; None: no clipping (as SB3).")
    adam_epsilon: float = hp(1e-8, "Epsilon of Adam (PyTorch's default, as SB3).")
    hidden_sizes: tuple[int, ...] = hp((400, 300), "Hidden layers of the default actor and critic MLPs.")
    buffer_size: int = hp(200_000, "Replay capacity in transitions (preallocated).")
    learning_starts: int = hp(10_000, "Env steps (over all envs) of uniform random actions before the first update.")
    batch_size: int = hp(256, "Transitions per gradient step.")
    tau: float = hp(0.005, "Polyak step of the target networks at each target update.")
    train_freq: int = hp(1, "Env steps (per env) between training rounds.")
    gradient_steps: int = hp(1, "Gradient steps per training round (fused into one compiled call).")
    normalize_observations: bool = hp(False, "Normalize observations with running mean/var of the observations "
                                             "acted on (keras-rl's WhiteningNormalizerProcessor; kept in the "
                                             "policy); the replay buffer keeps raw ones.")
    clip_obs: float = hp(10.0, "With normalize_observations: clip normalized observations to +-clip_obs.")

    def __post_init__(self):
        super().__post_init__()
        check(self.clip_obs > 0, "clip_obs", self.clip_obs, "positive")
        check(self.buffer_size >= 1, "buffer_size", self.buffer_size, "at least 1")
        check(self.learning_starts >= 0, "learning_starts", self.learning_starts, "non-negative")
        check(self.batch_size >= 1, "batch_size", self.batch_size, "at least 1")
        check(0.0 < self.tau <= 1.0, "tau", self.tau, "in (0, 1]")
        check(self.train_freq >= 1, "train_freq", self.train_freq, "at least 1")
        check(self.gradient_steps >= 1, "gradient_steps", self.gradient_steps, "at least 1")


ACTION_NOISES = ("normal", "ornstein_uhlenbeck", "none")


@dataclass(frozen=True, kw_only=True)
class DDPGConfig(ContinuousConfig):
    """Deep Deterministic Policy Gradient (Lillicrap et al., 2016); RL-Zoo Pendulum-v1 settings."""

    action_noise: str = hp("normal", "Exploration noise added to the actor's action: 'normal' "
                                     "(Gaussian), 'ornstein_uhlenbeck' (keras-rl's) or 'none'.")
    action_noise_std: float = hp(0.1, "Standard deviation of the exploration noise, in units of "
                                      "half the action range.")
    ou_theta: float = hp(0.15, "Ornstein-Uhlenbeck noise: pull towards 0 per unit of time.")
    ou_dt: float = hp(1e-2, "Ornstein-Uhlenbeck noise: time step of one env step.")

    def __post_init__(self):
        super().__post_init__()
        check(self.action_noise in ACTION_NOISES, "action_noise", self.action_noise,
              " or ".join(map(repr, ACTION_NOISES)))
        check(self.action_noise_std >= 0, "action_noise_std", self.action_noise_std, "non-negative")
        check(self.ou_theta >= 0, "ou_theta", self.ou_theta, "non-negative")
        check(self.ou_dt > 0, "ou_dt", self.ou_dt, "positive")


@dataclass(frozen=True, kw_only=True)
class TD3Config(DDPGConfig):
    """Twin Delayed DDPG (Fujimoto et al., 2018); RL-Zoo Pendulum-v1 settings."""

    policy_delay: int = hp(2, "Critic updates per actor (and target) update.")
    target_policy_noise: float = hp(0.2, "Std of the Gaussian noise on the target action (smoothing).")
    target_noise_clip: float = hp(0.5, "The target action noise is clipped to +-this.")
    n_critics: int = hp(2, "Critics; the target takes their minimum (clipped double Q).")

    def __post_init__(self):
        super().__post_init__()
        check(self.policy_delay >= 1, "policy_delay", self.policy_delay, "at least 1")
        check(self.target_policy_noise >= 0, "target_policy_noise", self.target_policy_noise,
              "non-negative")
        check(self.target_noise_clip >= 0, "target_noise_clip", self.target_noise_clip,
              "non-negative")
        check(self.n_critics >= 1, "n_critics", self.n_critics, "at least 1")


@dataclass(frozen=True, kw_only=True)
class SACConfig(ContinuousConfig):
    """Soft Actor-Critic (Haarnoja et al., 2018) with automatic entropy tuning; RL-Zoo Pendulum-v1
    settings (learning_rate 1e-3, the rest Stable-Baselines3's defaults)."""

    gamma: float = hp(0.99, "Discount factor.")
    hidden_sizes: tuple[int, ...] = hp((256, 256), "Hidden layers of the default actor and critic MLPs.")
    buffer_size: int = hp(1_000_000, "Replay capacity in transitions (preallocated).")
    learning_starts: int = hp(100, "Env steps (over all envs) of uniform random actions before the first update.")
    ent_coef_init: float = hp(1.0, "Initial entropy coefficient alpha.")
    auto_entropy: bool = hp(True, "Tune alpha towards target_entropy; False keeps ent_coef_init.")
    target_entropy: float | None = hp(None, "Entropy target of the tuning; None: -action_dim.")
    target_update_interval: int = hp(1, "Gradient steps between target syncs.")
    n_critics: int = hp(2, "Critics; targets and the actor take their minimum.")

    def __post_init__(self):
        super().__post_init__()
        check(self.ent_coef_init > 0 and math.isfinite(self.ent_coef_init), "ent_coef_init",
              self.ent_coef_init, "a positive number")
        check(self.target_entropy is None or math.isfinite(self.target_entropy),
              "target_entropy", self.target_entropy, "a finite number or None")
        check(self.target_update_interval >= 1, "target_update_interval",
              self.target_update_interval, "at least 1")
        check(self.n_critics >= 1, "n_critics", self.n_critics, "at least 1")


@dataclass(frozen=True, kw_only=True)
class NAFConfig(DDPGConfig):
    """Normalized Advantage Functions (Gu et al., 2016); the defaults are keras-rl's
    examples/naf_pendulum.py where kerasrl has the knob (see the pendulum-naf preset)."""

    learning_rate: float = hp(1e-3, "Adam step size of mu, V and L (one optimizer, one loss).")
    gamma: float = hp(0.99, "Discount factor.")
    max_grad_norm: float | None = hp(1.0, "Clip the global gradient norm to this (keras-rl's clipnorm); None: no clipping.")
    hidden_sizes: tuple[int, ...] = hp((32, 32, 32), "Hidden layers of the default mu, V and L MLPs.")
    buffer_size: int = hp(100_000, "Replay capacity in transitions (preallocated).")
    learning_starts: int = hp(100, "Env steps (over all envs) of uniform random actions before the first update.")
    batch_size: int = hp(32, "Transitions per gradient step.")
    tau: float = hp(1e-3, "Polyak step of the target V network at each gradient step.")
    action_noise: str = hp("ornstein_uhlenbeck", "Exploration noise added to mu(s): 'normal', "
                                                 "'ornstein_uhlenbeck' (keras-rl's) or 'none'.")
    action_noise_std: float = hp(0.15, "Standard deviation of the exploration noise, in units of half the action "
                                       "range (keras-rl's sigma 0.3 on Pendulum's [-2, 2]).")
    reward_scale: float = hp(1.0, "Rewards are multiplied by this in the TD target (keras-rl's example "
                                  "divides Pendulum's by 100).")

    def __post_init__(self):
        super().__post_init__()
        check(self.reward_scale > 0 and math.isfinite(self.reward_scale), "reward_scale",
              self.reward_scale, "a positive number")


@dataclass(frozen=True, kw_only=True)
class CEMConfig(CommonConfig):
    """The cross-entropy method over a policy network's weights (keras-rl's CEMAgent; Szita and
    Lorincz, 2006, for the added noise). No gradients: `learning_rate`, `lr_schedule`,
    `max_grad_norm`, `adam_epsilon` and `gamma` (returns are undiscounted) are not used.

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
