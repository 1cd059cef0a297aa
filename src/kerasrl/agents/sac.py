"""Soft Actor-Critic (Haarnoja et al., 2018) with twin critics and automatic entropy tuning.

The actor is a tanh-squashed Gaussian: it outputs means and log stds (B, 2 * D); an action is
`tanh(mean + std * noise)`, reparameterized (the noise is drawn in numpy and fed in, so every
backend sees the same numbers).

One gradient step (as Stable-Baselines3's SAC, step for step):
    a, log pi(a|s) from the actor;  alpha = exp(log_alpha) before this step's update
    entropy coefficient: minimize -mean log_alpha * (log pi(a|s) + target_entropy)
    a', log pi(a'|s') from the actor
    y = r + discount * (min_i Q_i,target(s', a') - alpha * log pi(a'|s'))
    critics: minimize 1/2 sum_i mean (Q_i(s, a_buffer) - y)^2
    actor: minimize mean(alpha * log pi(a|s) - min_i Q_i(s, a)) (with the updated critics)
    every target_update_interval-th step: critic targets tau * online + (1 - tau) * target
Exploration: a sample of the policy; deterministic acting: tanh(mean).
"""

from __future__ import annotations

import math

import numpy as np
from keras import ops

from kerasrl.agents.continuous import ContinuousAgent
from kerasrl.agents.learner import Learner
from kerasrl.config import SACConfig
from kerasrl.exploration import SampledActor
from kerasrl.losses import (LOG_STD_MAX, LOG_STD_MIN, clipped_double_q_target, critic_loss,
                            entropy_coefficient_loss, sac_actor_loss, squashed_gaussian)
from kerasrl.policies import SquashedGaussianPolicy


class SAC(ContinuousAgent):
    """Soft Actor-Critic for continuous (Box) actions.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one; its action space must
            be a bounded one-dimensional Box.
        model: the actor: a Keras model mapping observations to (batch, 2 * action_dim), the
            Gaussian means then log stds (before the tanh); a callable
            `(observation_space, action_space) -> keras.Model`; or None for the default MLP.
        critic: a Keras model mapping [observations, actions (batch, action_dim)] to (batch, 1), a
            callable building one, or None for the default MLP (one fresh copy per critic).
        config: a `SACConfig`; or give its fields as keyword arguments.
    """

    config_class = SACConfig
    algorithm = "sac"
    actor_activation = None
    policy_class = SquashedGaussianPolicy
    loss_names = ("critic_loss", "actor_loss", "ent_coef_loss", "ent_coef")
    critic_targets = True  # the critics have target weights (CrossQ's do not)

    def _actor_outputs(self) -> int:
        return 2 * self.action_dim

    def _make_learner(self) -> Learner:
        cfg, critics = self.config, self.critic_names
        self.target_entropy = (-float(self.action_dim) if cfg.target_entropy is None
                               else float(cfg.target_entropy))
        optimizers = {"actor": (self._adam(), ("actor",)), "critic": (self._adam(), critics)}
        if cfg.auto_entropy:
            # Torch's default betas, as SB3's entropy optimizer (CrossQ's actor and critics
            # have beta_1 0.5; its entropy coefficient keeps 0.9).
            optimizers["ent_coef"] = (self._adam(beta_1=0.9), ("log_ent_coef",))
        return Learner({"actor": self.actor, **dict(zip(critics, self.critics))},
                       targets=critics if self.critic_targets else (), optimizers=optimizers,
                       parameters={"log_ent_coef": [np.full((1,), math.log(cfg.ent_coef_init))]})

    def _policy_sample(self, params, state, observations, noise):
        out = self.learner.apply("actor", params, state, observations, training=True)
        return self.sample_from_outputs(out, noise)

    def sample_from_outputs(self, outputs, noise):
        """A reparameterized sample a (B, D) of the policy and log pi(a|s) (B,), from the actor's
        outputs (B, 2 * D) and standard normal `noise` (B, D)."""
        return squashed_gaussian(outputs[:, :self.action_dim], outputs[:, self.action_dim:], noise)

    def _step(self, state, batch, learning_rate):
        cfg, learner, critics = self.config, self.learner, self.critic_names
        obs, actions, next_obs = batch["observations"], batch["actions"], batch["next_observations"]
        log_ent_coef = ops.reshape(state["params"]["log_ent_coef"][0], ())
        ent_coef = ops.exp(ops.stop_gradient(log_ent_coef))  # this step's alpha, before its update
        _, log_probs = self._policy_sample(state["params"], state, obs, batch["noise"])
        ent_coef_loss = entropy_coefficient_loss(log_ent_coef, log_probs, self.target_entropy)
        if cfg.auto_entropy:
            state, ent_coef_loss, _ = learner.descend(
                state, "ent_coef",
                lambda params: (entropy_coefficient_loss(ops.reshape(params["log_ent_coef"][0], ()), log_probs,
                                                         self.target_entropy), ()),
                learning_rate)
        # The soft target, from the current actor and the target critics.
        next_actions, next_log_probs = self._policy_sample(state["params"], state, next_obs,
                                                           batch["next_noise"])
        next_q = [learner.apply(c, None, state, [next_obs, next_actions], target=True)
                  for c in critics]
        targets = self.soft_target(next_q, batch, next_log_probs, ent_coef)

        def critic_objective(params):
            q = [learner.apply(c, params, state, [obs, actions], training=True) for c in critics]
            return self.critics_loss(q, targets), ()

        state, c_loss, _ = learner.descend(state, "critic", critic_objective, learning_rate)

        def actor_objective(params):
            pi, log_pi = self._policy_sample(params, state, obs, batch["noise"])
            q = [learner.apply(c, params, state, [obs, pi], training=True) for c in critics]
            return self.actor_loss(q, log_pi, ent_coef), ()

        state, a_loss, _ = learner.descend(state, "actor", actor_objective, learning_rate)
        due = ops.equal(ops.mod(state["step"] + 1, cfg.target_update_interval), 0)
        state = learner.soft_update(state, ops.where(due, cfg.tau, 0.0))
        losses = {"critic_loss": c_loss, "actor_loss": a_loss, "ent_coef_loss": ent_coef_loss,
                  "ent_coef": ent_coef}
        return {**state, "step": state["step"] + 1}, losses

    # The three places where TQC (agents/tqc.py) differs from SAC: what the critics' outputs make
    # of the target, the critics' loss and the actor's.
    def soft_target(self, next_q, batch, next_log_probs, ent_coef):
        """The critics' target from the target critics' outputs at (s', a'), a' ~ pi(s'): the
        minimum over critics less the entropy term, discounted onto r (B,)."""
        return clipped_double_q_target(next_q, batch["rewards"], batch["discounts"],
                                       next_log_probs, ent_coef)

    def critics_loss(self, q_values, targets):
        """Half the sum over critics of each one's mean squared TD error (SB3's SAC)."""
        return 0.5 * critic_loss(q_values, targets)

    def actor_loss(self, q_values, log_probs, ent_coef):
        """`mean(alpha * log pi(a|s) - min_i Q_i(s, a))`, a ~ pi reparameterized."""
        return sac_actor_loss(q_values, log_probs, ent_coef)

    outputs_are_unit_actions = False  # Gaussian means and log stds, squashed by tanh after

    def greedy_from_outputs(self, outputs, ops=np):
        """tanh of the Gaussian means (B, D)."""
        return ops.tanh(outputs[:, :self.action_dim])

    def explore_from_outputs(self, outputs, noise, ops=np):
        """A sample of the policy: tanh(mean + std * noise), `noise` standard normal (B, D)."""
        mean, log_std = outputs[:, :self.action_dim], outputs[:, self.action_dim:]
        return ops.tanh(mean + ops.exp(ops.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)) * noise)

    exploration_std = 1.0  # the policy's own noise: standard normal draws

    def _explore_unit(self, observations):
        outputs = self.actor_outputs(observations)
        noise = self.rng.standard_normal((len(outputs), self.action_dim)).astype(np.float32)
        return np.asarray(self.explore_from_outputs(outputs, noise), np.float32)

    def explorer(self, n_envs, epsilon=None):
        return SampledActor()

    def batch_noise_scales(self):
        """The reparameterization noise of the actions at s and at s' (standard normal)."""
        return {"noise": 1.0, "next_noise": 1.0}

    @property
    def ent_coef(self) -> float:
        """The entropy coefficient alpha now."""
        return float(np.exp(self.learner.parameter("log_ent_coef")[0][0]))
