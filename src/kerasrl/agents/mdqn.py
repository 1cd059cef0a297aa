"""Munchausen DQN (Vieillard, Pietquin and Geist, 2020).

DQN with one change, its TD target. With pi = softmax(Q_target / tau) (the target network's
Boltzmann policy, the allowed actions only where the env masks them):

    target = r + alpha * tau * clip(log pi(a|s), l0, 0)                the Munchausen bonus
           + discount * sum_a' pi(a'|s') (Q_target(s', a') - tau * log pi(a'|s'))   soft value

The bonus rewards the agent for acting as its own current policy would (implicit KL
regularization between successive policies), and the soft value bootstraps from an
entropy-regularized value instead of a max. The loop, replay, n-step returns (the bonus is added
once, to the n-step return, for the transition's first action), target syncs, exploration and
the compiled loop are DQN's; what this file adds is `munchausen_target`, which reads the target
network's Q-values at s as well (QLearner adds them to the batch for a target that asks,
`reads_current_q`).
"""

from __future__ import annotations

from keras import ops

from kerasrl.agents.dqn import DQN
from kerasrl.config import MDQNConfig
from kerasrl.losses import MASKED_VALUE, select


def munchausen_target(tau: float, alpha: float, clip: float):
    """M-DQN's target function (`QLearner`'s TargetFn) at temperature `tau`, scale `alpha` and
    log-policy floor `clip` (l0). It reads batch["current_q_target"] (B, A), the target
    network's Q-values at s."""

    def target(next_q_target, next_q_online, batch):
        next_masks = batch.get("next_action_masks")
        scaled = next_q_target / tau
        if next_masks is not None:
            scaled = ops.where(next_masks, scaled, MASKED_VALUE)
        next_log_pi = ops.log_softmax(scaled, axis=-1)
        soft_terms = ops.exp(next_log_pi) * (next_q_target - tau * next_log_pi)
        if next_masks is not None:  # a masked action's 0 * (huge Q) stays out of the sum
            soft_terms = ops.where(next_masks, soft_terms, 0.0)
        soft_value = ops.sum(soft_terms, axis=-1)
        log_pi = ops.log_softmax(batch["current_q_target"] / tau, axis=-1)
        bonus = alpha * tau * ops.clip(select(log_pi, batch["actions"]), clip, 0.0)
        return ops.stop_gradient(batch["rewards"] + bonus + batch["discounts"] * soft_value)

    target.reads_current_q = True
    return target


def mdqn_target(config: MDQNConfig):
    """(M-DQN's target function, False: it needs no online next-state values)."""
    return munchausen_target(config.munchausen_tau, config.munchausen_alpha,
                             config.munchausen_clip), False


class MDQN(DQN):
    """Munchausen DQN for discrete actions: DQN's network, loop and options (dueling, n-step
    returns, prioritized replay, noisy networks) with M-DQN's target.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one.
        model: as DQN's: a Keras model mapping observations to (batch, n_actions) Q-values, a
            callable `(observation_space, action_space) -> keras.Model`, or None for the default.
        config: an `MDQNConfig`; or give its fields as keyword arguments.
    """

    config_class = MDQNConfig
    algorithm = "mdqn"

    def _build(self, model) -> None:
        self._build_q_learner(self._q_network(model), *mdqn_target(self.config))
        self.buffer = self._make_buffer()
