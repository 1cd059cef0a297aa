"""QR-DQN: distributional RL with quantile regression (Dabney et al., 2018).

DQN whose network outputs, for each action, N quantiles of the return at the fractions
tau_i = (i + 1/2) / N, (B, A, N); Q is their mean. The loop, the replay (uniform, prioritized,
n-step), the target syncs and epsilon-greedy exploration are DQN's; what differs is the value
head (kerasrl.heads) and the target:

    a* = argmax_a mean_j theta'_j(s', a)            (the online network picks it with double_q)
    target_j = r + discount * theta'_j(s', a*)      (B, N), discount 0 where s' is terminal
    loss = quantile Huber(theta(s, a), target)      (losses.quantile_huber_loss, as SB3-contrib)

Stable-Baselines3-contrib's QRDQN is the reference for the defaults (QRDQNConfig) and the loss;
RL Baselines3 Zoo's qrdqn.yml for the presets cartpole-qrdqn and acrobot-qrdqn.
"""

from __future__ import annotations

import keras
from keras import layers, ops

from kerasrl.agents.dqn import DQN
from kerasrl.config import QRDQNConfig
from kerasrl.heads import ValueHead
from kerasrl.losses import mask_values, quantile_huber_loss, select_action
from kerasrl.networks import default_network


class QuantileHead(ValueHead):
    """N quantiles of the return per action: outputs (B, A, N), action values their mean (B, A)."""

    def __init__(self, n_quantiles: int = 200):
        super().__init__()
        self.n_quantiles = int(n_quantiles)

    def output_shape(self, n_actions: int) -> tuple[int, ...]:
        return (n_actions, self.n_quantiles)

    def action_values(self, outputs):
        return ops.mean(outputs, axis=-1)

    def get_config(self) -> dict:
        return {"n_quantiles": self.n_quantiles}

    def network(self, observation_space, n_actions: int, hidden_sizes=(64, 64)) -> keras.Model:
        """The default network with A * N outputs, shaped (A, N)."""
        flat = default_network(observation_space, n_actions * self.n_quantiles, hidden_sizes)
        quantiles = layers.Reshape((n_actions, self.n_quantiles), name="quantiles")(flat.outputs[0])
        return keras.Model(flat.input, quantiles, name="quantile_network")

    def at_actions(self, outputs, actions):
        return select_action(outputs, actions)  # (B, N)

    def loss(self, taken, targets, weights):
        return quantile_huber_loss(taken, targets, weights)


def quantile_target(next_target, next_online, batch):
    """`r + discount * theta'(s', a*)` (B, N), a* the greedy (allowed) action of the target
    network's mean, or of the online network's with Double DQN."""
    chooser = next_target if next_online is None else next_online
    q = mask_values(ops.mean(chooser, axis=-1), batch.get("next_action_masks"))
    next_quantiles = select_action(next_target, ops.argmax(q, axis=-1))
    return ops.stop_gradient(batch["rewards"][:, None]
                             + batch["discounts"][:, None] * next_quantiles)


class QRDQN(DQN):
    """Quantile-regression DQN for discrete actions.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one.
        model: a Keras model mapping observations to (batch, n_actions, n_quantiles), a callable
            `(observation_space, action_space) -> keras.Model`, or None for the default network
            (the MLP, or the Nature CNN for images, with n_actions * n_quantiles outputs reshaped).
        config: a `QRDQNConfig`; or give its fields as keyword arguments.
    """

    config_class = QRDQNConfig
    algorithm = "qrdqn"

    @staticmethod
    def outputs_per_action(config) -> int:
        return config.n_quantiles

    def _build(self, model) -> None:
        cfg = self.config
        self._build_q_learner(self._q_network(model), quantile_target,
                              needs_online_next=cfg.double_q, head=QuantileHead(cfg.n_quantiles))
        self.buffer = self._make_buffer()
