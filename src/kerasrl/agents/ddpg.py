"""Deep Deterministic Policy Gradient (Lillicrap et al., 2016), keras-rl's continuous agent.

One gradient step (as Stable-Baselines3's DDPG: TD3 with one critic, no delay, no smoothing):
    y = r + discount * Q_target(s', mu_target(s'))
    critic: minimize mean (Q(s, a) - y)^2
    actor: minimize -mean Q(s, mu(s)) (with the updated critic)
    targets: tau * online + (1 - tau) * target, actor and critic
Exploration: the actor's action plus Gaussian or Ornstein-Uhlenbeck noise (keras-rl's choice),
clipped to the bounds.
"""

from __future__ import annotations

from kerasrl.agents.continuous import ContinuousAgent
from kerasrl.config import DDPGConfig
from kerasrl.losses import clipped_double_q_target, critic_loss, deterministic_actor_loss
from kerasrl.policies import DeterministicActorPolicy


class DDPG(ContinuousAgent):
    """Deep Deterministic Policy Gradient for continuous (Box) actions.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one; its action space must
            be a bounded one-dimensional Box.
        model: the actor, observations to (batch, action_dim) in [-1, 1] (see `kerasrl.TD3`).
        critic: [observations, actions] to (batch, 1), a callable building one, or None.
        config: a `DDPGConfig`; or give its fields as keyword arguments.
    """

    config_class = DDPGConfig
    algorithm = "ddpg"
    policy_class = DeterministicActorPolicy
    loss_names = ("critic_loss", "actor_loss")

    def _step(self, state, batch, learning_rate):
        learner = self.learner
        obs, actions, next_obs = batch["observations"], batch["actions"], batch["next_observations"]
        next_actions = learner.apply("actor", None, state, next_obs, target=True)
        next_q = learner.apply("critic_0", None, state, [next_obs, next_actions], target=True)
        targets = clipped_double_q_target([next_q], batch["rewards"], batch["discounts"])

        def critic_objective(params):
            q = learner.apply("critic_0", params, state, [obs, actions], training=True)
            return critic_loss([q], targets), ()

        state, c_loss, _ = learner.descend(state, "critic", critic_objective, learning_rate)

        def actor_objective(params):
            pi = learner.apply("actor", params, state, obs, training=True)
            return deterministic_actor_loss(
                learner.apply("critic_0", params, state, [obs, pi], training=True)), ()

        state, a_loss, _ = learner.descend(state, "actor", actor_objective, learning_rate)
        state = learner.soft_update(state, self.config.tau)
        return {**state, "step": state["step"] + 1}, {"critic_loss": c_loss, "actor_loss": a_loss}

