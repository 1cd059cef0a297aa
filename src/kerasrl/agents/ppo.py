"""Proximal Policy Optimization (Schulman et al., 2017), with GAE (Schulman et al., 2016).

The loop, per rollout:
    for n_steps vector steps:
        normalize the observations (optional running statistics, kept by the policy)
        one forward pass: logits or Gaussian means, and V(s)
        sample actions numpy-side from the agent's seeded generator (same draws on every backend)
        step the n_envs environments (Gaussian actions clipped to the Box bounds only here)
        where an episode was truncated, V(true final observation) for its bootstrap
    GAE in numpy (kerasrl.returns), with V of the observations after the rollout
    n_epochs passes over the rollout in random minibatches: clipped surrogate + value loss -
        entropy bonus, one Adam step each; ALL of them in ONE compiled call (the minibatch index
        permutations are drawn numpy-side and passed in; keras.ops.fori_loop runs them)

The learner (agents/learner.py) holds the weights of the actor and critic (or of the one shared
model, "actor"), the Gaussian's log std (a plain parameter "log_std", not a weight of a Keras
model) and one Adam over all of them (group "ppo").

This file holds the algorithm: construction, the compiled update, acting and the loop. Two parts
of the agent live beside it: its networks (`agents/actor_critic.py`: `ActorCriticNetworks` and
the default `actor_critic_mlp`) and its state besides the learner's weights (`agents/ppo_state.py`:
`PPOState`, the normalization statistics and the rollout in a checkpoint, and `scale_rewards`).
"""

from __future__ import annotations

import warnings

import numpy as np
from keras import ops
from keras import tree

from kerasrl import backend
from kerasrl.agents.actor_critic import ActorCriticNetworks, actor_critic_mlp
from kerasrl.agents.base import Agent
from kerasrl.agents.learner import UNROLLED_STEPS_PER_CALL, unrolled_steps
from kerasrl.agents.ppo_state import PPOState, scale_rewards
from kerasrl.backend.chunks import loop_in_chunks
from kerasrl.buffers.rollout import RolloutBuffer, minibatch_indices, stored_observation_dtype
from kerasrl.config import PPOConfig
from kerasrl.exploration import RolloutSampler
from kerasrl.losses import (categorical_entropy, categorical_log_prob, gaussian_entropy,
                            gaussian_log_prob, mask_values, normalize_advantages, ppo_loss)
from kerasrl.masks import masked_logits
from kerasrl.optim import Adam
from kerasrl.policies import RunningMeanStd, categorical_mode, sample_categorical, sample_gaussian
from kerasrl.schedules import linear_schedule

# The order of the figures each compiled update reports (means over the minibatches it ran).
METRICS = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")

# Defined with the part of the agent they belong to; imported from here too.
__all__ = ["METRICS", "PPO", "actor_critic_mlp", "scale_rewards"]


class PPO(ActorCriticNetworks, PPOState, Agent):
    """Proximal Policy Optimization for Discrete, MultiDiscrete and Box action spaces.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one.
        model: the actor, a Keras model mapping observations to (batch, n_actions) logits
            (Discrete; for MultiDiscrete (batch, sum(nvec)), the components' logits side by side)
            or (batch, action_dim) Gaussian means (Box); or a shared actor-critic model
            with two outputs `[that, values (batch, 1)]`; or a callable
            `(observation_space, action_space) -> keras.Model`; or None for the default.
        value_model: the critic, observations to (batch, 1), or a callable; None for the default
            MLP (not allowed with a shared `model`).
        config: a `PPOConfig`; or give its fields as keyword arguments.
    """

    config_class = PPOConfig
    algorithm = "ppo"
    optimizer_group = "ppo"  # the learner's name of the one optimizer (in checkpoints)

    def __init__(self, env, *, model=None, value_model=None, config: PPOConfig | None = None,
                 **hyperparameters):
        self._value_model_spec = value_model
        super().__init__(env, model=model, config=config, **hyperparameters)

    # -- construction -------------------------------------------------------------------------
    def _build(self, model) -> None:
        cfg = self.config
        self._check_spaces()
        self._build_networks(model)
        self.learner = self._new_learner()
        action_shape = tuple(self.action_space.shape)  # () Discrete, (components,), (action_dim,)
        self.buffer = RolloutBuffer(
            cfg.n_steps, cfg.n_envs, self.observation_space.shape, action_shape,
            np.int32 if self.discrete else np.float32,
            stored_observation_dtype(self.observation_space, cfg.normalize_observations))
        self._check_minibatches()
        self.obs_rms = (RunningMeanStd(self.observation_space.shape)
                        if cfg.normalize_observations else None)
        self.return_rms = RunningMeanStd(()) if cfg.normalize_reward else None
        self._discounted_returns = np.zeros(cfg.n_envs)  # for reward scaling
        self._remote_returns = np.zeros(0)  # the same for remote actors' envs (receive_rollouts)
        self._log_std = None if self.discrete else self.learner.parameter("log_std")[0]
        self._forward = backend.compile(
            lambda params, non_trainable, obs: self._outputs(params, non_trainable, obs, False)[:2])
        # Every minibatch step in one compiled loop where that runs fast; unrolled where XLA's CPU
        # loops slow the networks' gradients down (Keras convolutions: learner.unrolled_steps).
        # PyTorch's traced update is unrolled already, its loop being Python.
        self.unrolled = backend.COMPILED_LOOPS and unrolled_steps(self.learner.models.values())
        # (PyTorch's update steps through loop_in_chunks instead; `_train` there is the same
        # update traced whole, which the parity workers run on every backend. Built lazily.)
        self._train = backend.compile(self._train_epochs, donate_state=True)
        self._train_part = backend.compile(self._train_steps, donate_state=True)
        self._start = backend.compile(self.update_start)  # where the steps run apart from it
        self.n_updates = 0
        self._policy = None
        self._eval_outputs = None

    def _check_minibatches(self) -> None:
        cfg = self.config
        n_samples = cfg.n_steps * cfg.n_envs
        if n_samples % cfg.batch_size:
            warnings.warn(
                f"batch_size={cfg.batch_size} does not divide a rollout of n_steps * n_envs = "
                f"{n_samples} transitions: each epoch leaves out {n_samples % cfg.batch_size} "
                f"random ones so that every minibatch has the same shape.", stacklevel=5)

    def _optimizer(self):
        """The optimizer of all the parameters (the learner's group `optimizer_group`)."""
        return Adam.from_config(self.config)

    # -- the compiled update -------------------------------------------------------------------
    def _batch_outputs(self, params, non_trainable, batch):
        """`_outputs` in training mode on a minibatch: (policy (B, n_outputs), values (B,), new
        non-trainable weights). Recurrent PPO replays its sequences here."""
        return self._outputs(params, non_trainable, batch["observations"], training=True)

    def _minibatch(self, data, rows):
        """The minibatch of `data` (from `_training_data`) at `rows` (batch_size,) int32."""
        return tree.map_structure(lambda x: ops.take(x, rows, axis=0), data)

    def _training_data(self, buffer):
        """(the rollout's arrays as the compiled update reads them, the minibatch rows of all
        epochs (M, batch_size) int32): transitions flattened to (T * N, ...), drawn at random."""
        epochs, batch_size = self.update_batches()
        indices = minibatch_indices(buffer.n_steps * buffer.n_envs, batch_size, epochs, self.rng)
        return buffer.training_data(), indices

    def _evaluate_actions(self, params, non_trainable, batch):
        """`(log pi(a|s) (B,), entropy (B,) or a scalar, V(s) (B,), new non-trainable weights)`
        of a minibatch's observations and actions, the models in training mode."""
        # Stored uint8 frames become float32 here, on the learner's device, a minibatch at a time.
        batch = {**batch, "observations": ops.cast(batch["observations"], "float32")}
        policy, values, non_trainable = self._batch_outputs(params, non_trainable, batch)
        if self.discrete:
            # Masked actions' logits at the float32 minimum: probability exactly 0, entropy over
            # the allowed actions only.
            policy = mask_values(policy, batch.get("action_masks"))
            log_probs = categorical_log_prob(policy, batch["actions"], self.action_sizes)
            entropy = categorical_entropy(policy, self.action_sizes)
        else:
            log_std = params["log_std"][0]
            log_probs = gaussian_log_prob(policy, log_std, batch["actions"])
            entropy = gaussian_entropy(log_std)
        return log_probs, entropy, values, non_trainable

    def _loss(self, params, non_trainable, batch, clip_range):
        cfg = self.config
        log_probs, entropy, values, non_trainable = self._evaluate_actions(params, non_trainable,
                                                                           batch)
        advantages = batch["advantages"]
        if cfg.normalize_advantage and cfg.batch_size > 1:
            advantages = normalize_advantages(advantages)
        loss, metrics = ppo_loss(
            log_probs, batch["old_log_probs"], advantages, values, batch["returns"], entropy,
            clip_range=clip_range, ent_coef=cfg.ent_coef, vf_coef=cfg.vf_coef,
            old_values=batch["old_values"], clip_range_vf=cfg.clip_range_vf)
        return loss, (non_trainable, metrics)

    def _train_epochs(self, state, data, indices, learning_rate, clip_range):
        """Every minibatch of every epoch, one Adam step each, in one compiled call.

        `data`: the rollout's flat (T * N, ...) arrays; `indices`: (M, batch_size) int32, the
        minibatches of all epochs in order. With target_kl, the first minibatch whose approximate
        KL exceeds 1.5 * target_kl (before its step, as SB3) stops all further steps. Returns
        `(state, metric sums (len(METRICS),), steps taken)`.
        """
        return self._train_steps(*self.update_start(state, data), data, indices, 0, learning_rate,
                                 clip_range)

    def _train_steps(self, state, sums, steps, data, indices, first, learning_rate, clip_range):
        """The steps of the minibatches `indices` (G, batch_size), the update's numbers `first` to
        `first + G - 1`, after `steps` taken with figures summing to `sums`: in a compiled loop,
        or unrolled where such a loop runs slowly (`self.unrolled`); the same numbers either way.
        Returns `(state, sums, steps)` after them."""
        def body(i, carry):
            return self._minibatch_step(carry, data, indices, i, first + i, learning_rate,
                                        clip_range)

        carry = (state, sums, steps)
        if self.unrolled:
            for i in range(indices.shape[0]):
                carry = body(i, carry)
            return carry
        return ops.fori_loop(0, indices.shape[0], body, carry)

    def update_parts(self, n_minibatches: int) -> list[tuple[int, int]]:
        """(start, stop) of the minibatches each compiled call of an update of `n_minibatches`
        runs: one call, or where the steps are unrolled, calls of at most
        UNROLLED_STEPS_PER_CALL (as the value learners' rounds: compiling more unrolled steps
        at once costs more than the calls save)."""
        per_call = UNROLLED_STEPS_PER_CALL if self.unrolled else n_minibatches
        return [(start, min(start + per_call, n_minibatches))
                for start in range(0, n_minibatches, per_call)]

    def _minibatch_step(self, carry, data, indices, i, number, learning_rate, clip_range):
        """One Adam step on the minibatch `indices[i]`, the update's step `number`: `carry` is
        `(state, metric sums, steps taken)`, as `_train_steps` passes it from step to step."""
        state, sums, steps = carry
        batch = self._minibatch(data, ops.take(indices, i, axis=0))  # i may be a tensor (traced chunks)
        new_state, loss, metrics = self.learner.descend(
            state, self.optimizer_group,
            lambda params: self._loss(params, state["non_trainable"], batch, clip_range),
            learning_rate, updates_non_trainable=True)
        new_state = {**new_state, "step": new_state["step"] + 1}
        figures = ops.stack([loss] + [metrics[k] for k in METRICS[1:]])
        target_kl = self.config.target_kl
        if target_kl is None:
            return new_state, sums + figures, steps + 1.0
        go = ops.logical_and(steps >= ops.cast(number, "float32"),
                             metrics["approx_kl"] <= 1.5 * target_kl)
        new_state = tree.map_structure(lambda new, old: ops.where(go, new, old), new_state, state)
        weight = ops.cast(go, "float32")
        return new_state, sums + weight * figures, steps + weight

    # -- what a loop compiled whole runs (kerasrl.compiled.ppo): this agent's math, on a state --
    def act_outputs(self, state, observations):
        """(policy outputs (B, n_outputs), values (B,)) of the weights in the learner `state` for
        float32 `observations`, in inference mode."""
        policy, values, _ = self._outputs(state["params"], state["non_trainable"], observations,
                                          training=False)
        return policy, values

    def update_batches(self) -> tuple[int, int]:
        """(epochs, minibatch size) of an update: the rows of `train_epochs`'s `indices`, which a
        loop compiled whole draws itself."""
        return self.config.n_epochs, self.config.batch_size

    def train_epochs(self, state, data, indices, learning_rate, clip_range):
        """PPO's update of one rollout as a pure function of the learner `state` (what this
        agent's update compiles): `data` as `RolloutBuffer.training_data()` gives it (tensors),
        `indices` (M, batch_size) int32 the minibatches of all epochs. Returns `(state, sums of
        self.metrics, steps taken)`."""
        return self._train_epochs(state, data, indices, learning_rate, clip_range)

    def update_start(self, state, data):
        """The carry an update of the rollout `data` starts from: `(state, metric sums (zeros),
        steps taken (0.0))` (TRPO takes its policy step here, before the critic's steps)."""
        return state, ops.zeros((len(self.metrics),), "float32"), ops.zeros((), "float32")

    def train_minibatch(self, carry, data, indices, i, learning_rate, clip_range):
        """Step `i` of `train_epochs`, for a loop that runs the update step by step (PyTorch's
        compiled loop traces one step and repeats its graph, where tracing every step costs
        seconds): `carry` is `(state, metric sums, steps taken)` after the steps before `i`, from
        `update_start(state, data)`; returns it after step `i`. The same numbers as `train_epochs`."""
        return self._minibatch_step(carry, data, indices, i, i, learning_rate, clip_range)

    # -- acting --------------------------------------------------------------------------------
    def _evaluate_networks(self, observations: np.ndarray):
        """Policy outputs (B, n_outputs) and values (B,) as numpy, for normalized observations."""
        with backend.inference(), self.learner.acting_scope():
            params, non_trainable = self.learner.acting_weights()
            policy, values = self._forward(params, non_trainable, backend.feed(observations))
        policy, values = backend.to_numpy((policy, values))
        return np.asarray(policy), np.asarray(values)

    def _sample(self, policy: np.ndarray, rng: np.random.Generator, action_masks=None):
        """(actions to store, actions for the env, log-probabilities), drawn numpy-side."""
        if self.discrete:
            actions, log_probs = sample_categorical(masked_logits(policy, action_masks), rng,
                                                    self.action_sizes)
            return actions, actions, log_probs
        actions, log_probs = sample_gaussian(policy, self._log_std, rng)
        return actions, np.clip(actions, self.action_space.low, self.action_space.high), log_probs

    def _act_greedy(self, observations, action_masks=None):
        policy, _ = self._evaluate_networks(self._normalize(observations, update=False))
        self._eval_outputs = policy  # for _explore, which sees only these actions
        if self.discrete:
            return categorical_mode(masked_logits(policy, action_masks), self.action_sizes)
        return np.clip(policy, self.action_space.low, self.action_space.high)

    def _explore(self, greedy_actions, rng, action_masks=None):
        return self._sample(self._eval_outputs, rng, action_masks)[1]

    # -- the loop ------------------------------------------------------------------------------
    def clip_range(self, total_steps: int) -> float:
        """PPO's clip range now: constant, or linear to 0 over the run; 0 for an agent on PPO's
        loop whose config has none (TRPO: its trust region is a KL bound)."""
        if not hasattr(self.config, "clip_range"):
            return 0.0
        clip = self.config.clip_range
        if self.config.clip_range_schedule == "linear":
            clip *= linear_schedule(1.0, 0.0, self.num_timesteps / total_steps)
        return clip

    def _learn(self, total_steps, stop_at, logger, callback):
        obs = self.loop.observations
        while self.num_timesteps < stop_at:
            obs_in = self._normalize(obs, update=True)
            policy, values = self._rollout_step(obs_in)
            masks = self.loop.action_masks  # None for an env without action masks
            stored, env_actions, log_probs = self._sample(policy, self.rng, masks)
            next_obs, rewards, terminated, truncated, final_obs, info = self._step_envs(
                env_actions, logger)
            self.loop.action_masks, _ = self._masks_after_step(info, terminated | truncated)
            # A time-limit cut bootstraps from the value of the true final observation.
            cut = truncated & ~terminated
            truncation_values = None
            if cut.any():
                truncation_values = np.zeros(self.config.n_envs, dtype=np.float32)
                truncation_values[cut] = self._final_values(
                    self._normalize(final_obs[cut], update=False), cut)
            rewards = self._scale_rewards(rewards, terminated | truncated)
            self.buffer.add(obs_in, stored, log_probs, values, rewards, terminated, cut,
                            truncation_values, action_masks=masks)
            obs = self.loop.observations = next_obs
            if self.buffer.full:
                self._update(total_steps, logger)
            if callback is not None and (terminated.any() or truncated.any()):
                if callback(self, logger.history) is False:
                    break

    def _rollout_step(self, observations: np.ndarray):
        """The networks' step of a rollout, for normalized observations (n_envs, *obs): policy
        outputs (n_envs, n_outputs) and values (n_envs,). A recurrent agent carries its state here."""
        return self._evaluate_networks(observations)

    def _final_values(self, observations: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Values (R,) of the true final observations (R, *obs) of the envs `rows` (n_envs,) bool
        whose episode the step just cut at the time limit."""
        return self._evaluate_networks(observations)[1]

    def _update(self, total_steps: int, logger) -> None:
        self.learn_from_rollout(self.buffer, self.loop.observations, total_steps, logger)
        self.buffer.reset()

    def learn_from_rollout(self, buffer, last_obs, total_steps: int, logger) -> None:
        """GAE over a finished rollout, then every epoch's minibatches in one compiled call.

        `buffer` is this agent's rollout, or one joined from remote actors' (the Ray engine);
        `last_obs` are the observations after its last step, for the bootstrap values.
        """
        cfg = self.config
        _, last_values = self._evaluate_networks(self._normalize(last_obs, update=False))
        buffer.compute_advantages(last_values, cfg.gamma, cfg.gae_lambda)
        learning_rate = np.float32(self._learning_rate(total_steps))
        sums, steps, scalars = self._update_on(buffer, learning_rate, total_steps)
        self.n_updates += steps
        figures = dict(zip(self.metrics, (np.asarray(sums) / max(steps, 1)).tolist()))
        self.check_loss(figures["loss"], self.n_updates)
        self.diagnostics.after_update(figures["value_loss"], steps, buffer.observations,
                                      buffer.rewards, values=buffer.values)
        if not self.discrete:
            self._log_std = self.learner.parameter("log_std")[0]
            figures["std"] = float(np.exp(self._log_std).mean())
        var = np.var(buffer.returns)
        figures["explained_variance"] = (
            float(1.0 - np.var(buffer.returns - buffer.values) / var) if var > 0 else 0.0)
        logger.update(self.num_timesteps, **figures, learning_rate=float(learning_rate),
                      **scalars, gradient_steps=steps)

    metrics = METRICS
    """The figures `_update_on` sums over its gradient steps, in order."""

    def _update_on(self, buffer, learning_rate, total_steps: int):
        """PPO's update of a rollout whose advantages are computed: every epoch's minibatches in
        one compiled call. Returns `(sums of self.metrics, gradient steps taken, {name: figure}
        to log)`."""
        data, indices = self._training_data(buffer)
        clip_range = np.float32(self.clip_range(total_steps))
        if not backend.COMPILED_LOOPS:
            # PyTorch, whose loops are Python: a traced update costs about 0.3 ms an op to trace,
            # and one of SB3's defaults (320 minibatch steps, 100,000 ops) or of RecurrentPPO's
            # (one step 25,000 ops) ran eagerly. The steps run in chunks of one traced step
            # repeated (kerasrl.backend.chunks, as the compiled loop runs them): the same ops.
            with self.learner.on_device():
                inputs = backend.to_tensors((data, indices, learning_rate, clip_range))

                def step(i, carry):  # (learner state, metric sums, steps taken, *the update's inputs)
                    return (*self.train_minibatch(carry[:3], *carry[3:5], i, *carry[5:]), *carry[3:])

                start = (*self._start(self.learner.state, inputs[0]), *inputs)
                self.learner.state, sums, steps = loop_in_chunks(
                    self, "update", len(indices), step, start, large_iterations="traced")[:3]
        elif len(parts := self.update_parts(len(indices))) == 1:
            with self.learner.on_device():  # fed where the state lives (the host, for small nets)
                self.learner.state, sums, steps = self._train(
                    self.learner.state, backend.feed(data), backend.feed(indices), learning_rate,
                    clip_range)
        else:
            with self.learner.on_device():
                data = backend.to_tensors(data)  # moved once, read by every part
            state, sums, steps = self._start(self.learner.state, data)
            for start, stop in parts:
                state, sums, steps = self._train_part(
                    state, sums, steps, data, backend.feed(indices[start:stop]), np.int32(start),
                    learning_rate, clip_range)
            self.learner.state = state
        sums, steps = backend.to_numpy((sums, steps))
        # The clip range is logged where it exists (as the compiled loop's `clipped`).
        return sums, int(steps), ({"clip_range": float(clip_range)}
                                  if hasattr(self.config, "clip_range") else {})

    # -- remote actors (kerasrl.distributed) ----------------------------------------------------
    on_policy = True

    def explorer(self, n_envs, epsilon=None):
        return RolloutSampler()

    def receive_rollouts(self, rollouts, total_steps, logger) -> None:
        """Join the actors' rollouts column-wise into one (n_steps, all their envs), scale the
        rewards as a local run does, and run the update on it; then fold the raw observations
        into the observation statistics (as `_normalize` does during a local rollout)."""
        cfg = self.config
        joined = {key: np.concatenate([r[key] for r in rollouts], axis=1)
                  for key in ("observations", "raw_observations", "actions", "log_probs",
                              "values", "rewards", "terminated", "truncated", "truncation_values")}
        n_columns = joined["rewards"].shape[1]
        buffer = RolloutBuffer(cfg.n_steps, n_columns, self.observation_space.shape,
                               self.buffer.actions.shape[2:], self.buffer.actions.dtype,
                               self.buffer.observations.dtype)
        done = joined["terminated"] | joined["truncated"]
        if len(self._remote_returns) != n_columns:  # the actors' envs' running returns
            self._remote_returns = np.zeros(n_columns)
        for t in range(cfg.n_steps):
            rewards = self._scale_rewards(joined["rewards"][t], done[t], self._remote_returns)
            buffer.add(joined["observations"][t], joined["actions"][t], joined["log_probs"][t],
                       joined["values"][t], rewards, joined["terminated"][t],
                       joined["truncated"][t], joined["truncation_values"][t])
        last_obs = np.concatenate([r["last_observations"] for r in rollouts])
        self.learn_from_rollout(buffer, last_obs, total_steps, logger)
        if self.obs_rms is not None:
            raw = joined["raw_observations"]
            self.obs_rms.update(raw.reshape(-1, *raw.shape[2:]))
