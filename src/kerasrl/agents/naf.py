"""Normalized Advantage Functions (Gu et al., 2016), keras-rl's NAFAgent (continuous DQN).

Q-learning with a Q-function whose maximum over actions is known in closed form:
    Q(s, a) = V(s) + A(s, a),   A(s, a) = -1/2 (a - mu(s))^T P(s) (a - mu(s)),   P = L L^T
with L(s) lower-triangular, its diagonal exponentiated, so that P is positive definite and
argmax_a Q(s, a) = mu(s). Three networks of the observations: mu (the actor, D outputs, tanh: the
unit box), V (1 output) and L (D (D + 1) / 2 outputs, the lower triangle row by row).

One gradient step (keras-rl's NAFAgent.backward):
    y = reward_scale * r + discount * V_target(s')
    mu, V and L together: minimize mean 1/2 (V(s) + A(s, a) - y)^2   (one Adam, one loss)
    the target V: tau * online + (1 - tau) * target
Exploration: mu(s) plus Gaussian or Ornstein-Uhlenbeck noise (keras-rl's), clipped to the bounds.
The policy is mu alone (a DeterministicActorPolicy): V and L are only needed to learn.

Differences from keras-rl: L is a function of the observations only, as in the paper (keras-rl's
example feeds it the action too, which makes A no longer a quadratic in a); mu ends in a tanh and
acts in the unit box (scaled to the bounds, as DDPG's actor); a time-limit cut bootstraps.
"""

from __future__ import annotations

import keras
from keras import ops

from kerasrl.agents.continuous import ContinuousAgent
from kerasrl.agents.learner import Learner
from kerasrl.config import NAFConfig
from kerasrl.losses import clipped_double_q_target, naf_advantage, naf_loss
from kerasrl.models import build_model
from kerasrl.networks import actor_network
from kerasrl.policies import DeterministicActorPolicy


class NAF(ContinuousAgent):
    """Normalized Advantage Functions (continuous Q-learning) for continuous (Box) actions.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one; its action space must
            be a bounded one-dimensional Box.
        model: mu, the actor: a Keras model mapping observations to (batch, action_dim) in
            [-1, 1] (a tanh output), a callable `(observation_space, action_space) ->
            keras.Model`, or None for the default MLP. It is what the policy saves.
        value_model: V, observations to (batch, 1); a model, a callable building one, or None.
        l_model: L, observations to (batch, action_dim * (action_dim + 1) // 2), the lower
            triangle of L row by row (its diagonal is exponentiated); a model, a builder, or None.
        config: a `NAFConfig`; or give its fields as keyword arguments.

    `agent.critics` is [V, L]: the networks learned beside mu.
    """

    config_class = NAFConfig
    algorithm = "naf"
    policy_class = DeterministicActorPolicy
    loss_names = ("q_loss", "q_value")

    def __init__(self, env, *, model=None, value_model=None, l_model=None, config=None,
                 **hyperparameters):
        if "critic" in hyperparameters:
            raise TypeError("NAF has no critic=: its Q-function is V(s) + A(s, a); pass "
                            "value_model= (V) and l_model= (L) instead.")
        self._value_spec, self._l_spec = value_model, l_model
        super().__init__(env, model=model, config=config, **hyperparameters)

    def _build_critics(self):
        cfg, space, d = self.config, self.observation_space, self.action_dim
        n_l = d * (d + 1) // 2
        self.value_model = build_model(
            self._value_spec, space, 1, action_space=self.action_space, role="value model (V)",
            default=lambda: actor_network(space, 1, cfg.hidden_sizes, None, name="value"),
            seed=self.weights_seed, stream="value")
        self.l_model = build_model(
            self._l_spec, space, n_l, action_space=self.action_space,
            role=f"L model (the {n_l} entries of a lower-triangular {d}x{d} matrix)",
            default=lambda: actor_network(space, n_l, cfg.hidden_sizes, None, name="l"),
            seed=self.weights_seed, stream="l")
        return [self.value_model, self.l_model]

    def models_beside_policy(self) -> dict[str, keras.Model]:
        """V and L, those of them that are the user's, by their keywords (value_model, l_model)."""
        mine = {"value_model": (self._value_spec, self.value_model),
                "l_model": (self._l_spec, self.l_model)}
        return {name: model for name, (spec, model) in mine.items() if spec is not None}

    def _make_learner(self) -> Learner:
        return Learner({"actor": self.actor, "value": self.value_model, "l": self.l_model},
                       targets=("value",),
                       optimizers={"naf": (self._adam(), ("actor", "value", "l"))})

    def _step(self, state, batch, learning_rate):
        cfg, learner, obs = self.config, self.learner, batch["observations"]
        next_values = learner.apply("value", None, state, batch["next_observations"], target=True)
        targets = clipped_double_q_target([next_values], cfg.reward_scale * batch["rewards"],
                                          batch["discounts"])

        def objective(params):
            mu = learner.apply("actor", params, state, obs, training=True)
            values = learner.apply("value", params, state, obs, training=True)
            l_flat = learner.apply("l", params, state, obs, training=True)
            advantages = naf_advantage(l_flat, mu, batch["actions"])
            mean_q = ops.mean(ops.reshape(values, (-1,)) + advantages)  # logged, not learned
            return naf_loss(values, advantages, targets), ops.stop_gradient(mean_q)

        state, loss, mean_q = learner.descend(state, "naf", objective, learning_rate)
        state = learner.soft_update(state, cfg.tau)
        return {**state, "step": state["step"] + 1}, {"q_loss": loss, "q_value": mean_q}
