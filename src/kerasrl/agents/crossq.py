"""CrossQ (Bhatt et al., ICLR 2024): SAC without target networks, made stable by batch
normalization, and sample-efficient at one gradient step per env step.

SAC's actor, entropy tuning and loop (agents/sac.py) with three changes, as Stable-Baselines3-
contrib's CrossQ (and SBX's) computes them, step for step:
    the default actor and critics hold batch renormalization (kerasrl.layers) before every Dense
        layer; the critics are wide (1024 units); Adam's beta_1 is 0.5
    no target networks: a' ~ pi(s') from the actor in inference mode, then ONE training-mode pass
        of each critic over [s; s'] and [a; a'], so that the batch statistics normalize both
        halves alike; y = r + discount * (min_i Q_i(s', a') - alpha * log pi(a'|s')), not
        differentiated; critics: minimize 1/2 sum_i mean (Q_i(s, a_buffer) - y)^2
    every policy_delay-th step only: the actor (training mode) and the entropy coefficient, the
        critics in inference mode: minimize mean(alpha * log pi(a|s) - min_i Q_i(s, a));
        -mean log_alpha * (log pi(a|s) + target_entropy)
Acting (the policy, exports) runs the actor in inference mode: the running statistics.
"""

from __future__ import annotations


from keras import ops
from keras import tree

from kerasrl.agents.sac import SAC
from kerasrl.config import CrossQConfig
from kerasrl.losses import entropy_coefficient_loss


class CrossQ(SAC):
    """CrossQ for continuous (Box) actions.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one; its action space must
            be a bounded one-dimensional Box.
        model: the actor, as SAC's: a Keras model mapping observations to (batch, 2 * action_dim),
            the Gaussian means then log stds (before the tanh); a callable
            `(observation_space, action_space) -> keras.Model`; or None for the default
            batch-renormalized MLP.
        critic: a Keras model mapping [observations, actions (batch, action_dim)] to (batch, 1), a
            callable building one, or None for the default batch-renormalized MLP (one fresh copy
            per critic). A model of your own should normalize its batches
            (`kerasrl.layers.BatchRenormalization` or Keras's `BatchNormalization`): without
            target networks, that is what keeps CrossQ stable.
        config: a `CrossQConfig`; or give its fields as keyword arguments.
    """

    config_class = CrossQConfig
    algorithm = "crossq"
    critic_targets = False
    delays_actor = True

    def _step(self, state, batch, learning_rate, actor_due=None):
        """`actor_due`: None, the step count decides (inside a compiled loop of many steps); True
        or False, known on the host (a round of one step: see `ContinuousAgent.update`)."""
        cfg, learner, critics = self.config, self.learner, self.critic_names
        obs, actions, next_obs = batch["observations"], batch["actions"], batch["next_observations"]
        log_ent_coef = ops.reshape(state["params"]["log_ent_coef"][0], ())
        ent_coef = ops.exp(ops.stop_gradient(log_ent_coef))  # this step's alpha, before its update
        # a' ~ pi(s'), the actor in inference mode (as SB3-contrib: its running statistics).
        next_out = learner.apply("actor", state["params"], state, next_obs)
        next_actions, next_log_probs = self.sample_from_outputs(next_out, batch["next_noise"])
        both_obs = tree.map_structure(lambda a, b: ops.concatenate([a, b], axis=0), obs, next_obs)
        both_actions = ops.stop_gradient(ops.concatenate([actions, next_actions], axis=0))

        def critic_objective(params):
            # One pass over s and s' together: the same batch statistics for both halves.
            passes = [learner.apply(c, params, state, [both_obs, both_actions], training=True,
                                    returns_state=True) for c in critics]
            halves = [ops.split(q, 2, axis=0) for q, _ in passes]
            targets = self.soft_target([next_q for _, next_q in halves], batch, next_log_probs,
                                       ent_coef)  # not differentiated (clipped_double_q_target)
            loss = self.critics_loss([q for q, _ in halves], targets)
            return loss, ({c: new_state for c, (_, new_state) in zip(critics, passes)}, ())

        state, c_loss, _ = learner.descend(state, "critic", critic_objective, learning_rate,
                                           updates_non_trainable=True)

        def actor_objective(params):
            out, actor_state = learner.apply("actor", params, state, obs, training=True,
                                             returns_state=True)
            pi, log_pi = self.sample_from_outputs(out, batch["noise"])
            q = [learner.apply(c, params, state, [obs, pi]) for c in critics]  # inference mode
            return self.actor_loss(q, log_pi, ent_coef), ({"actor": actor_state}, log_pi)

        if actor_due is False:  # the actor's loss as logged; no gradient, no statistics kept
            a_loss, (_, log_pi) = actor_objective(state["params"])
        else:
            due = (ops.equal(ops.mod(state["step"] + 1, cfg.policy_delay), 0)
                   if actor_due is None else None)
            state, a_loss, log_pi = learner.descend(state, "actor", actor_objective, learning_rate,
                                                    enabled=due, updates_non_trainable=True)
            if cfg.auto_entropy:  # the entropy coefficient moves with the actor (SB3-contrib's)
                state, _, _ = learner.descend(
                    state, "ent_coef",
                    lambda params: (entropy_coefficient_loss(
                        ops.reshape(params["log_ent_coef"][0], ()), log_pi,
                        self.target_entropy), ()),
                    learning_rate, enabled=due)
        ent_coef_loss = entropy_coefficient_loss(log_ent_coef, log_pi, self.target_entropy)
        losses = {"critic_loss": c_loss, "actor_loss": a_loss, "ent_coef_loss": ent_coef_loss,
                  "ent_coef": ent_coef}
        return {**state, "step": state["step"] + 1}, losses
