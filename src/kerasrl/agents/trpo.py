"""Trust region policy optimization, TRPO (Schulman et al., 2015; Stable-Baselines3-contrib's TRPO).

PPO's loop (agents/ppo.py: the rollout of n_envs environments, observation normalization,
numpy-side sampling, time-limit bootstrapping, GAE, the networks and policy) with TRPO's update.
Per rollout:

    the policy's step, once, on the whole rollout (every sub_sampling_factor-th transition):
        g = gradient of the surrogate mean(A * pi(a|s) / pi_old(a|s)) (A normalized)
        s ~= (F + damping I)^-1 g by cg_max_steps conjugate-gradient steps, F the Hessian of the
            mean KL(pi || pi_old) (Fisher-vector products only, never F)
        the largest step sqrt(2 target_kl / s'Fs) s, shrunk by line_search_shrinking_factor until
            the KL is below target_kl and the surrogate improved (else no step)
    then the critic's: n_critic_updates passes of Adam over random minibatches of batch_size,
        mean((R - V(s))**2), the critic's weights only.

The math is kerasrl.trust_region's (KL divergences, conjugate gradients, line search); the policy
step runs at the start of the update (`update_start`) and the critic's steps as PPO's minibatch
steps, so PPO's compiled loop (kerasrl.compiled.ppo) runs TRPO on an ops env unchanged.
"""

from __future__ import annotations

import numpy as np
from keras import ops
from keras import tree

from kerasrl import backend
from kerasrl.agents.ppo import PPO
from kerasrl.config import TRPOConfig
from kerasrl.losses import (categorical_log_prob, gaussian_log_prob, mask_values,
                            normalize_advantages, value_loss)
from kerasrl.models import stateless_apply
from kerasrl.trust_region import (backtracking_line_search, categorical_kl, conjugate_gradient,
                                  gaussian_kl)


class TRPO(PPO):
    """Trust region policy optimization for Discrete, MultiDiscrete and Box action spaces.

    Args as `kerasrl.PPO`: `env`, `model` (the actor), `value_model` (the critic), and `config` (a
    `TRPOConfig`, or its fields as keyword arguments). The actor and critic are two models: a
    shared actor-critic would let the critic's steps move the policy outside its trust region.
    Saved policies are `ActorCriticPolicy`, as PPO's.
    """

    config_class = TRPOConfig
    algorithm = "trpo"
    optimizer_group = "critic"  # Adam over the critic only: the policy moves by its own step
    metrics = ("loss", "policy_objective", "value_loss", "kl_divergence", "line_search_success")
    """Per update: the critic's loss minus the surrogate (both minimised, as PPO's loss adds its
    parts), the surrogate after the step, the critic's mean loss over its minibatch steps, the
    policy's mean KL after the step (0 where the line search found none), whether it found one."""

    def _build_networks(self, model) -> None:
        super()._build_networks(model)
        if self.shared:
            raise ValueError(
                "TRPO moves the policy's weights within a KL trust region and fits the critic on "
                "its own, so a shared actor-critic model (two outputs) would let the critic's "
                "steps move the policy. Pass the actor as model= and the critic as value_model= "
                "(or set shared_network=False).")

    def _optimized_names(self, models: dict, parameters: dict) -> tuple[str, ...]:
        """Adam updates the critic alone: the policy moves by its trust-region step."""
        return ("critic",)

    @property
    def _policy_names(self) -> tuple[str, ...]:
        """The learner's entries the policy step moves: the actor, and a Gaussian's log std."""
        return ("actor",) if self.discrete else ("actor", "log_std")

    def update_batches(self) -> tuple[int, int]:
        """(passes, minibatch size) of the critic's steps."""
        return self.config.n_critic_updates, self.config.batch_size

    # -- the policy's step ---------------------------------------------------------------------
    def update_start(self, state, data):
        """The policy's trust-region step on the rollout `data` (see the module docstring): the
        carry of the critic's steps, `(state, figure sums, 1.0)`: one update per rollout."""
        state, surrogate, kl, found = self._policy_step(state, data)
        zero = ops.zeros((), "float32")
        sums = ops.stack([-surrogate, surrogate, zero, kl, ops.cast(found, "float32")])
        return state, sums, ops.ones((), "float32")

    def _policy_step(self, state, data):
        """`(state with the policy moved, its surrogate, its mean KL, whether the line search
        found a step)`."""
        cfg = self.config
        every = cfg.sub_sampling_factor
        batch = data if every == 1 else tree.map_structure(lambda x: x[::every], data)
        observations = ops.cast(batch["observations"], "float32")
        params, non_trainable = state["params"], state["non_trainable"]
        names = self._policy_names
        weights = [w for name in names for w in params[name]]
        shapes = [tuple(w.shape) for w in weights]

        def as_params(flat_weights):
            moved, i = dict(params), 0
            for name in names:
                moved[name] = list(flat_weights[i:i + len(params[name])])
                i += len(params[name])
            return moved

        def distribution(flat_weights):
            moved = as_params(flat_weights)
            policy, _ = stateless_apply(self.actor, moved["actor"], non_trainable["actor"],
                                        observations, True)
            if self.discrete:
                return mask_values(policy, batch.get("action_masks")), None
            return policy, moved["log_std"][0]

        old_policy, old_log_std = distribution(weights)
        old_policy = ops.stop_gradient(old_policy)
        old_log_std = None if old_log_std is None else ops.stop_gradient(old_log_std)
        advantages = batch["advantages"]
        if cfg.normalize_advantage:
            advantages = normalize_advantages(advantages)

        def surrogate(policy, log_std):
            if self.discrete:
                log_probs = categorical_log_prob(policy, batch["actions"], self.action_sizes)
            else:
                log_probs = gaussian_log_prob(policy, log_std, batch["actions"])
            return ops.mean(advantages * ops.exp(log_probs - batch["old_log_probs"]))

        def mean_kl(policy, log_std):
            if self.discrete:
                return ops.mean(categorical_kl(policy, old_policy, self.action_sizes))
            kl = gaussian_kl(policy, log_std, old_policy, old_log_std)
            if cfg.gaussian_kl == "per_dimension":  # SB3-contrib's: the mean over the dimensions
                kl = kl / self.n_outputs
            return ops.mean(kl)

        def unflatten(vector):
            pieces, start = [], 0
            for shape in shapes:
                size = int(np.prod(shape))
                pieces.append(ops.reshape(vector[start:start + size], shape))
                start += size
            return pieces

        def fisher_vector(vector):
            product = backend.hessian_vector_product(lambda w: mean_kl(*distribution(w)), weights,
                                                     unflatten(vector))
            return _flatten(product) + cfg.cg_damping * vector

        (objective, _), grads = backend.value_and_grad(
            lambda w: (surrogate(*distribution(w)), ()))(weights)
        direction = conjugate_gradient(fisher_vector, _flatten(grads), cfg.cg_max_steps)
        curvature = ops.sum(direction * fisher_vector(direction))
        # (A zero gradient gives a zero direction: any step size leaves the policy as it is.)
        max_step = ops.sqrt(2.0 * cfg.target_kl / ops.maximum(curvature, 1e-30))
        start = _flatten(weights)

        def moved(fraction):
            return unflatten(start + (fraction * max_step) * direction)

        def evaluate(fraction):  # one forward pass of the moved policy for both figures
            policy, log_std = distribution(moved(fraction))
            return surrogate(policy, log_std), mean_kl(policy, log_std)

        fraction, objective_after, kl, found = backtracking_line_search(
            evaluate, objective, cfg.target_kl, cfg.line_search_max_iter,
            cfg.line_search_shrinking_factor)
        new_weights = [ops.where(found, new, old) for new, old in zip(moved(fraction), weights)]
        return {**state, "params": as_params(new_weights)}, objective_after, kl, found

    # -- the critic's steps --------------------------------------------------------------------
    def _critic_loss(self, params, non_trainable, batch):
        observations = ops.cast(batch["observations"], "float32")
        values, critic_states = stateless_apply(self.critic, params["critic"],
                                                non_trainable["critic"], observations, True)
        loss = value_loss(ops.reshape(values, (-1,)), batch["returns"])
        return loss, ({"critic": critic_states}, ())

    def _minibatch_step(self, carry, data, indices, i, number, learning_rate, clip_range):
        """One Adam step of the critic on the minibatch `indices[i]`; its loss joins the update's
        mean (`carry` as PPO's: (state, figure sums, updates))."""
        state, sums, steps = carry
        batch = self._minibatch(data, ops.take(indices, i, axis=0))
        new_state, loss, _ = self.learner.descend(
            state, self.optimizer_group, lambda params: self._critic_loss(params, state["non_trainable"], batch),
            learning_rate, updates_non_trainable=True)
        new_state = {**new_state, "step": new_state["step"] + 1}
        share = loss / indices.shape[0]
        zero = ops.zeros((), "float32")
        return new_state, sums + ops.stack([share, zero, share, zero, zero]), steps


def _flatten(arrays):
    """A list of arrays as one vector, in order."""
    return ops.concatenate([ops.reshape(a, (-1,)) for a in arrays], axis=0)
