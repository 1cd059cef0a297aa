"""Twin Delayed DDPG (Fujimoto et al., 2018): DDPG with three fixes for Q overestimation.

    clipped double Q:         two critics; the target takes their minimum
    target policy smoothing:  the target action gets clipped Gaussian noise
    delayed updates:          the actor and all targets move once per `policy_delay` critic updates

One gradient step (as Stable-Baselines3's TD3, step for step):
    a' = clip(mu_target(s') + clip(noise, -c, c), -1, 1)
    y  = r + discount * min_i Q_i,target(s', a')
    critics: minimize sum_i mean (Q_i(s, a) - y)^2
    every policy_delay-th step: actor: minimize -mean Q_1(s, mu(s)) (with the updated critics);
        targets: tau * online + (1 - tau) * target, actor and critics
Exploration: the actor's action plus Gaussian (or Ornstein-Uhlenbeck) noise, clipped to the bounds.
"""

from __future__ import annotations

from keras import ops

from kerasrl.agents.continuous import ContinuousAgent
from kerasrl.config import TD3Config
from kerasrl.losses import (clipped_double_q_target, critic_loss, deterministic_actor_loss,
                            smoothed_target_actions)
from kerasrl.policies import DeterministicActorPolicy


class TD3(ContinuousAgent):
    """Twin Delayed DDPG for continuous (Box) actions.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one; its action space must
            be a bounded one-dimensional Box.
        model: the actor: a Keras model mapping observations to (batch, action_dim) in [-1, 1]
            (a tanh output; the policy scales to the bounds and clips), a callable
            `(observation_space, action_space) -> keras.Model`, or None for the default MLP.
        critic: a Keras model mapping [observations, actions (batch, action_dim)] to (batch, 1), a
            callable building one, or None for the default MLP. Each of the `n_critics` critics is
            a fresh copy (a builder is called once per critic).
        config: a `TD3Config`; or give its fields as keyword arguments.
    """

    config_class = TD3Config
    algorithm = "td3"
    policy_class = DeterministicActorPolicy
    loss_names = ("critic_loss", "actor_loss")
    delays_actor = True

    def _step(self, state, batch, learning_rate, actor_due=None):
        """`actor_due`: None, the step count decides (inside a compiled loop of many steps); True
        or False, known on the host (a round of one step), so that a step that leaves the actor
        alone does not compute its gradient."""
        cfg, learner, critics = self.config, self.learner, self.critic_names
        obs, actions, next_obs = batch["observations"], batch["actions"], batch["next_observations"]
        # The target: smoothed target action, the minimum of the target critics.
        next_actions = smoothed_target_actions(
            learner.apply("actor", None, state, next_obs, target=True), batch["target_noise"],
            cfg.target_noise_clip)
        next_q = [learner.apply(c, None, state, [next_obs, next_actions], target=True)
                  for c in critics]
        targets = clipped_double_q_target(next_q, batch["rewards"], batch["discounts"])

        def critic_objective(params):
            q = [learner.apply(c, params, state, [obs, actions], training=True) for c in critics]
            return critic_loss(q, targets), ()

        state, c_loss, _ = learner.descend(state, "critic", critic_objective, learning_rate)

        # Delayed: the actor and the targets move on every policy_delay-th step only.
        def actor_objective(params):
            pi = learner.apply("actor", params, state, obs, training=True)
            return deterministic_actor_loss(
                learner.apply(critics[0], params, state, [obs, pi], training=True)), ()

        if actor_due is False:  # the actor's loss as logged, without its gradient
            a_loss, _ = actor_objective(state["params"])
        else:
            delayed = (ops.equal(ops.mod(state["step"] + 1, cfg.policy_delay), 0)
                       if actor_due is None else None)
            state, a_loss, _ = learner.descend(state, "actor", actor_objective, learning_rate,
                                               enabled=delayed)
            state = learner.soft_update(
                state, cfg.tau if delayed is None else ops.where(delayed, cfg.tau, 0.0))
        return {**state, "step": state["step"] + 1}, {"critic_loss": c_loss, "actor_loss": a_loss}

    def batch_noise_scales(self):
        """Target policy smoothing: Gaussian noise of std target_policy_noise on the target action."""
        return {"target_noise": float(self.config.target_policy_noise)}
