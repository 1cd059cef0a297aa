"""Synchronous advantage actor-critic, A2C (Mnih et al., 2016; OpenAI Baselines' synchronous form).

PPO's loop with a simpler update: the same rollout of n_envs environments (observation
normalization, numpy-side sampling, a time-limit cut bootstrapping from V of the true final
observation), the same GAE (kerasrl.returns; gae_lambda=1 gives A2C's n-step returns), the same
networks and policy. Per rollout, then:

    one gradient step on the whole rollout of n_steps * n_envs transitions:
        -mean(A * log pi(a|s)) + vf_coef * mean((R - V(s))**2) - ent_coef * mean(entropy)
    (no probability ratio, no clipping, no epochs or minibatches), with RMSprop as
    Stable-Baselines3's A2C (PyTorch's RMSprop: alpha 0.99, epsilon 1e-5 outside the root).

Everything but the update is PPO's (agents/ppo.py): this file is the loss and the step.
"""

from __future__ import annotations

from keras import ops

from kerasrl import backend
from kerasrl.agents.ppo import PPO
from kerasrl.config import A2CConfig
from kerasrl.losses import a2c_loss, normalize_advantages
from kerasrl.optim import RMSprop


class A2C(PPO):
    """Advantage actor-critic for Discrete, MultiDiscrete and Box action spaces.

    Args as `kerasrl.PPO`: `env`, `model` (the actor, or a shared actor-critic with outputs
    `[policy, value]`), `value_model`, and `config` (an `A2CConfig`, or its fields as keyword
    arguments). Saved policies are `ActorCriticPolicy`, as PPO's.
    """

    config_class = A2CConfig
    algorithm = "a2c"
    optimizer_group = "a2c"
    metrics = ("loss", "policy_loss", "value_loss", "entropy")

    def _build(self, model) -> None:
        super()._build(model)
        self._train = backend.compile(self._train_step, donate_state=True)

    def _check_minibatches(self) -> None:
        """Nothing to check: A2C's one batch is the whole rollout."""

    def _optimizer(self):
        cfg = self.config
        if cfg.optimizer == "adam":
            return super()._optimizer()
        return RMSprop(alpha=cfg.rms_prop_alpha, epsilon=cfg.rms_prop_epsilon,
                       max_grad_norm=cfg.max_grad_norm)

    def _loss(self, params, non_trainable, batch):
        cfg = self.config
        log_probs, entropy, values, non_trainable = self._evaluate_actions(params, non_trainable,
                                                                           batch)
        advantages = batch["advantages"]
        if cfg.normalize_advantage and cfg.n_steps * cfg.n_envs > 1:
            advantages = normalize_advantages(advantages)
        loss, metrics = a2c_loss(log_probs, advantages, values, batch["returns"], entropy,
                                 ent_coef=cfg.ent_coef, vf_coef=cfg.vf_coef)
        return loss, (non_trainable, metrics)

    def _train_step(self, state, data, learning_rate):
        """One optimizer step on the whole rollout `data` (flat (T * N, ...) arrays). Returns
        `(state, the figures of self.metrics (4,))`."""
        new_state, loss, metrics = self.learner.descend(
            state, self.optimizer_group,
            lambda params: self._loss(params, state["non_trainable"], data), learning_rate,
            updates_non_trainable=True)
        new_state = {**new_state, "step": new_state["step"] + 1}
        return new_state, ops.stack([loss] + [metrics[k] for k in self.metrics[1:]])

    def update_batches(self) -> tuple[int, int]:
        """One epoch of one minibatch: the whole rollout."""
        return 1, self.config.n_steps * self.config.n_envs

    def train_epochs(self, state, data, indices, learning_rate, clip_range):
        """A2C's update as the compiled loop runs PPO's (`PPO.train_epochs`): its one step on the
        whole rollout `data` in order (`indices` and `clip_range` unused). Returns `(state,
        figures of self.metrics, 1 step)`."""
        state, figures = self._train_step(state, data, learning_rate)
        return state, figures, ops.ones((), "float32")

    def _update_on(self, buffer, learning_rate, total_steps: int):
        """A2C's update of a rollout whose advantages are computed: one step (see `_update_on`
        of PPO for what it returns)."""
        with self.learner.on_device():  # fed where the state lives (the host, for small nets)
            self.learner.state, figures = self._train(
                self.learner.state, backend.feed(buffer.training_data()), learning_rate)
        return backend.to_numpy(figures), 1, {}
