"""C51: distributional RL with a categorical distribution on fixed atoms (Bellemare et al., 2017).

DQN whose network outputs, for each action, logits over N atoms z_i = v_min + i dz,
dz = (v_max - v_min) / (N - 1), (B, A, N); Q is the mean sum_i p_i z_i. The loop, the replay
(uniform, prioritized, n-step), the target syncs and epsilon-greedy exploration are DQN's; what
differs is the value head (kerasrl.heads) and the target:

    a* = argmax_a sum_i p'_i(s', a) z_i             (the online network picks it with double_q)
    m = project(p'(s', a*) moved to r + discount * z, clipped to [v_min, v_max], onto z)   (B, N)
    loss = -sum_i m_i log p_i(s, a)                 (losses.categorical_cross_entropy)

Tianshou's C51 is the reference (its projection, written without scatter, and its defaults).
"""

from __future__ import annotations

import keras
from keras import layers, ops

from kerasrl.agents.dqn import DQN
from kerasrl.config import C51Config
from kerasrl.heads import ValueHead
from kerasrl.losses import (categorical_cross_entropy, categorical_projection, mask_values,
                            select_action)
from kerasrl.networks import default_network


class CategoricalHead(ValueHead):
    """A categorical return distribution per action: outputs (B, A, N) logits over the atoms
    from `v_min` to `v_max`; action values the distribution's mean (B, A)."""

    def __init__(self, n_atoms: int = 51, v_min: float = -10.0, v_max: float = 10.0):
        super().__init__()
        self.n_atoms, self.v_min, self.v_max = int(n_atoms), float(v_min), float(v_max)

    def output_shape(self, n_actions: int) -> tuple[int, ...]:
        return (n_actions, self.n_atoms)

    def action_values(self, outputs):
        probs = ops.softmax(outputs, axis=-1)
        # The atoms made from the outputs themselves: a captured constant would become an unfed
        # input of the exported ONNX graph (see policies.exportable_argmax).
        positions = ops.cumsum(ops.ones_like(outputs), axis=-1) - 1.0
        atoms = self.v_min + positions * ((self.v_max - self.v_min) / (self.n_atoms - 1))
        return ops.sum(probs * atoms, axis=-1)

    def get_config(self) -> dict:
        return {"n_atoms": self.n_atoms, "v_min": self.v_min, "v_max": self.v_max}

    def network(self, observation_space, n_actions: int, hidden_sizes=(64, 64)) -> keras.Model:
        """The default network with A * N outputs, shaped (A, N)."""
        flat = default_network(observation_space, n_actions * self.n_atoms, hidden_sizes)
        logits = layers.Reshape((n_actions, self.n_atoms), name="atom_logits")(flat.outputs[0])
        return keras.Model(flat.input, logits, name="categorical_network")

    def at_actions(self, outputs, actions):
        return select_action(outputs, actions)  # (B, N) logits

    def loss(self, taken, targets, weights):
        return categorical_cross_entropy(taken, targets, weights)


def categorical_target(head: CategoricalHead):
    """The target function of `head`: the projected distribution (B, N) of the greedy (allowed)
    action at s' of the target network's means, or of the online network's with Double DQN."""

    def target(next_target, next_online, batch):
        chooser = next_target if next_online is None else next_online
        q = mask_values(head.action_values(chooser), batch.get("next_action_masks"))
        next_probs = ops.softmax(select_action(next_target, ops.argmax(q, axis=-1)), axis=-1)
        return categorical_projection(next_probs, batch["rewards"], batch["discounts"],
                                      head.v_min, head.v_max)

    return target


class C51(DQN):
    """Categorical DQN (C51) for discrete actions.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one.
        model: a Keras model mapping observations to (batch, n_actions, n_atoms) logits, a
            callable `(observation_space, action_space) -> keras.Model`, or None for the default
            network (the MLP, or the Nature CNN for images, with n_actions * n_atoms outputs
            reshaped).
        config: a `C51Config`; or give its fields as keyword arguments.
    """

    config_class = C51Config
    algorithm = "c51"

    @staticmethod
    def outputs_per_action(config) -> int:
        return config.n_atoms

    def _build(self, model) -> None:
        cfg = self.config
        head = CategoricalHead(cfg.n_atoms, cfg.v_min, cfg.v_max)
        self._build_q_learner(self._q_network(model), categorical_target(head),
                              needs_online_next=cfg.double_q, head=head)
        self.buffer = self._make_buffer()
