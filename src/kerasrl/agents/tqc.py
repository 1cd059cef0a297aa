"""Truncated Quantile Critics (Kuznetsov et al., 2020): SAC whose critics learn the distribution
of the return, and whose target drops its largest quantiles to keep the estimate from creeping up.

SAC's loop, actor, entropy tuning and gradient step (agents/sac.py) with three differences, as
Stable-Baselines3-contrib's TQC computes them (losses.py):
    each of the C critics outputs N quantiles of Q(s, a) at the fractions (i + 1/2) / N
    target: the target critics' C * N quantiles at (s', a') pooled, sorted, the largest
        `top_quantiles_to_drop_per_net * C` dropped, less alpha * log pi(a'|s'), discounted onto r
    critics: the quantile Huber loss of each critic's quantiles against every kept target,
        averaged over the batch, both quantile axes and the critics
    actor: minimize mean(alpha * log pi(a|s) - Q(s, a)), Q the mean of all critics' quantiles
"""

from __future__ import annotations

from kerasrl.agents.sac import SAC
from kerasrl.config import TQCConfig
from kerasrl.losses import (truncated_quantile_actor_loss, truncated_quantile_critic_loss,
                            truncated_quantile_target)


class TQC(SAC):
    """Truncated Quantile Critics for continuous (Box) actions.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one; its action space must
            be a bounded Box.
        model: the actor, as SAC's: a Keras model mapping observations to (batch, 2 * action_dim),
            the Gaussian means then log stds (before the tanh); a callable
            `(observation_space, action_space) -> keras.Model`; or None for the default MLP.
        critic: a Keras model mapping [observations, actions (batch, action_dim)] to
            (batch, n_quantiles), a callable building one, or None for the default MLP (one
            fresh copy per critic).
        config: a `TQCConfig`; or give its fields as keyword arguments.
    """

    config_class = TQCConfig
    algorithm = "tqc"

    def _critic_outputs(self) -> int:
        return self.config.n_quantiles

    def soft_target(self, next_q, batch, next_log_probs, ent_coef):
        """The truncated pool of target quantiles (B, C * N - dropped), entropy term included."""
        return truncated_quantile_target(next_q, batch["rewards"], batch["discounts"],
                                         self.config.top_quantiles_to_drop_per_net,
                                         next_log_probs, ent_coef)

    def critics_loss(self, q_values, targets):
        """The quantile Huber loss of every critic's quantiles against the kept targets."""
        return truncated_quantile_critic_loss(q_values, targets)

    def actor_loss(self, q_values, log_probs, ent_coef):
        """`mean(alpha * log pi(a|s) - Q(s, a))`, Q the mean of every critic's quantiles."""
        return truncated_quantile_actor_loss(q_values, log_probs, ent_coef)
