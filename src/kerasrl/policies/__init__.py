"""Policies: inference only, numpy in and numpy out.

A Policy holds a Keras model and what it needs to turn observations into actions; it never needs
the agent, the environment or the optimizer. It is what is saved, loaded and exported.

    base            Policy (batching, calling, saving, exporting), the forward functions, the graph
                    pieces exports build from
    q               QPolicy: DQN's family, SARSA
    actor_critic    ActorCriticPolicy (PPO, A2C, CEM) and RecurrentActorCriticPolicy
    continuous      DeterministicActorPolicy (DDPG, TD3, NAF), SquashedGaussianPolicy (SAC)
    sampling        how actions are drawn from outputs in numpy (epsilon-greedy, Boltzmann,
                    categorical, Gaussian; the Box bounds maps), for predict and the Python loops
    normalization   running observation statistics: RunningMeanStd and its one update rule
"""

from kerasrl.policies.actor_critic import ActorCriticPolicy, RecurrentActorCriticPolicy
from kerasrl.policies.base import (
    Policy,
    episode_actor,
    exportable_argmax,
    exportable_mask,
    forward_fn,
    greedy_fn,
    mask_input,
    observation_inputs,
    with_mask,
)
from kerasrl.policies.continuous import DeterministicActorPolicy, SquashedGaussianPolicy
from kerasrl.policies.normalization import (
    RunningMeanStd,
    normalize_observations,
    running_moments,
    standardize,
)
from kerasrl.policies.q import QPolicy
from kerasrl.policies.sampling import (
    boltzmann,
    boltzmann_probabilities,
    categorical_mode,
    check_temperature,
    epsilon_greedy,
    gaussian_log_prob_np,
    random_actions,
    sample_categorical,
    sample_gaussian,
    scale_to_bounds,
    softmax_log_probs,
    unit_from_bounds,
)

__all__ = [
    "ActorCriticPolicy", "DeterministicActorPolicy", "Policy", "QPolicy", "RecurrentActorCriticPolicy",
    "RunningMeanStd", "SquashedGaussianPolicy", "boltzmann", "boltzmann_probabilities", "categorical_mode",
    "check_temperature", "episode_actor", "epsilon_greedy", "exportable_argmax", "exportable_mask",
    "forward_fn", "gaussian_log_prob_np", "greedy_fn", "mask_input", "normalize_observations",
    "observation_inputs", "random_actions", "running_moments", "sample_categorical", "sample_gaussian",
    "scale_to_bounds", "softmax_log_probs", "standardize", "unit_from_bounds", "with_mask",
]
