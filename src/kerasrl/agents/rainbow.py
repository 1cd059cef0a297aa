"""Rainbow (Hessel et al., 2018): the six DQN extensions together, on C51's update.

Nothing of Rainbow's is new code: it is C51 (agents/c51.py: the categorical return distribution,
its projected target and cross-entropy loss) with the flags every DQN-family agent has, all on:

    double_q            the online network picks a*, the target network's distribution is used
    dueling             value and advantage streams, per atom (value_networks.AtomDuelingCombine)
    noisy_nets          NoisyDense streams (kerasrl.layers): fresh noise for every acting step,
                        and for the online and the target network at every gradient step
    n_step_return=3     3-step returns from the replay
    prioritized_replay  priorities from each transition's cross-entropy (Tianshou's choice; the
                        paper's KL divergence differs from it by the target's entropy)

at the paper's Atari settings (`RainbowConfig`). Evaluation, saved policies and exports use the
mean network (noise zero), as the paper's evaluation and Tianshou's.
"""

from __future__ import annotations

from kerasrl.agents.c51 import C51
from kerasrl.config import RainbowConfig


class Rainbow(C51):
    """Rainbow DQN for discrete actions.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one.
        model: the torso: a Keras model from observations to features (B, F), a callable
            `(observation_space, action_space) -> keras.Model`, or None for the default (an MLP of
            `hidden_sizes[:-1]`, or the Nature CNN's convolutions for images); the noisy dueling
            streams go after it.
        config: a `RainbowConfig`; or give its fields as keyword arguments.
    """

    config_class = RainbowConfig
    algorithm = "rainbow"
