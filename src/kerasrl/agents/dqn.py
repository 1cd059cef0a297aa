"""Deep Q-Networks (Mnih et al., 2015), with Double DQN (van Hasselt et al., 2016) as a flag.

The loop, per vector step:
    act epsilon-greedily from the online network   (numpy exploration: same draws on every backend)
    step the n_envs environments, store the transitions (true final observation on auto-reset)
    every `target_update_interval` env steps: sync the target weights (hard copy or Polyak tau)
    every `train_freq` steps after `learning_starts`: `gradient_steps` Adam steps on sampled
        batches, all in one compiled call

The target network is a second set of weights for the same Keras model, used through
`stateless_call` and never differentiated.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from keras import ops
from keras import tree

from kerasrl import backend
from kerasrl.agents.base import (Agent, flatten_arrays, to_tensors, unflatten_arrays,
                                  variable_values)
from kerasrl.buffers import ReplayBuffer
from kerasrl.config import DQNConfig
from kerasrl.losses import q_learning_target, select, td_loss
from kerasrl.networks import build_model, default_network
from kerasrl.optim import Adam, copy_state, polyak
from kerasrl.policies import QPolicy, epsilon_greedy, forward_fn


class DQN(Agent):
    """Deep Q-learning for discrete actions.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one.
        model: a Keras model mapping observations to (batch, n_actions) Q-values, a callable
            `(observation_space, action_space) -> keras.Model`, or None for the default network.
        config: a `DQNConfig`; or give its fields as keyword arguments.
    """

    config_class = DQNConfig
    algorithm = "dqn"

    def _build(self, model) -> None:
        cfg = self.config
        if not isinstance(self.action_space, gym.spaces.Discrete):
            raise ValueError(
                f"DQN needs a discrete action space, but {self.env_name} has "
                f"{self.action_space}. For continuous actions use kerasrl.PPO."
            )
        self.n_actions = int(self.action_space.n)
        self.q_network = build_model(
            model, self.observation_space, self.n_actions, action_space=self.action_space,
            default=lambda: default_network(self.observation_space, self.n_actions, cfg.hidden_sizes),
            role="Q-network",
        )
        self.optimizer = Adam(epsilon=cfg.adam_epsilon, max_grad_norm=cfg.max_grad_norm)
        self.buffer = ReplayBuffer(cfg.buffer_size, cfg.n_envs, self.observation_space.shape,
                                   self.observation_space.dtype, gamma=cfg.gamma)
        self.state = self._initial_state()
        self._forward = forward_fn(self.q_network)
        # Two compiled variants: with the target sync folded in (when one is due) and without.
        self._train = backend.compile(self._train_rounds, donate_state=True)
        self._train_no_sync = backend.compile(lambda state, batches, learning_rate:
                                              self._train_rounds(state, batches, learning_rate),
                                              donate_state=True)
        self.n_updates = 0
        self._vector_steps = 0
        self._pending_syncs = 0  # target syncs due since the last training round
        self._policy = None

    def _initial_state(self):
        """The learner's state: online weights, target weights (equal at the start), Adam state.

        Copied out of the model (through numpy) so that donated buffers never alias the model's.
        """
        weights = variable_values(self.q_network.trainable_variables)
        states = variable_values(self.q_network.non_trainable_variables)
        params = to_tensors(weights)
        return {
            "params": params,
            "non_trainable": to_tensors(states),
            "target_params": to_tensors([w.copy() for w in weights]),
            "target_non_trainable": to_tensors([s.copy() for s in states]),
            "opt": self.optimizer.init(params),
        }

    # -- the compiled learning step -----------------------------------------------------------
    def _targets(self, state, batch):
        """TD targets from the target weights, in inference mode."""
        next_obs = batch["next_observations"]
        next_q_target, _ = self.q_network.stateless_call(
            state["target_params"], state["target_non_trainable"], next_obs, training=False)
        next_q_online = None
        if self.config.double_q:
            next_q_online, _ = self.q_network.stateless_call(
                state["params"], state["non_trainable"], next_obs, training=False)
        return q_learning_target(next_q_target, batch["rewards"], batch["discounts"], next_q_online)

    def _loss(self, params, non_trainable, batch, targets):
        """The TD loss of the online weights in training mode (batch norm, dropout active)."""
        q, non_trainable = self.q_network.stateless_call(
            params, non_trainable, batch["observations"], training=True)
        loss, td_errors = td_loss(select(q, batch["actions"]), targets, batch["weights"],
                                  self.config.loss)
        return loss, (non_trainable, td_errors)

    def _gradient_step(self, state, batch, learning_rate):
        targets = self._targets(state, batch)
        grad_fn = backend.value_and_grad(self._loss)
        (loss, (non_trainable, td_errors)), grads = grad_fn(
            state["params"], state["non_trainable"], batch, targets)
        params, opt, _ = self.optimizer.update(grads, state["opt"], state["params"], learning_rate)
        state = {**state, "params": params, "non_trainable": non_trainable, "opt": opt}
        return state, loss

    def _train_rounds(self, state, batches, learning_rate, target_tau=None):
        """Sync the target by `target_tau` (1: copy) if given, then one gradient step per leading
        row of `batches` (G, B, ...). Returns the new state and the mean loss."""
        if target_tau is not None:
            state = {
                **state,
                "target_params": polyak(state["params"], state["target_params"], target_tau),
                "target_non_trainable": copy_state(state["non_trainable"],
                                                   state["target_non_trainable"], target_tau),
            }
        n_steps = batches["actions"].shape[0]
        if n_steps == 1:
            return self._gradient_step(state, tree.map_structure(lambda x: x[0], batches),
                                       learning_rate)

        def body(i, carry):
            state, loss_sum = carry
            state, loss = self._gradient_step(state, tree.map_structure(lambda x: x[i], batches),
                                              learning_rate)
            return state, loss_sum + loss

        state, loss_sum = ops.fori_loop(0, n_steps, body, (state, ops.zeros((), "float32")))
        return state, loss_sum / n_steps

    # -- the loop -----------------------------------------------------------------------------
    def exploration_rate(self, total_steps: int) -> float:
        """Epsilon now: linear from initial to final over `exploration_fraction` of the run."""
        cfg = self.config
        progress = self.num_timesteps / max(1.0, cfg.exploration_fraction * total_steps)
        if progress >= 1.0:
            return cfg.exploration_final_eps
        return cfg.exploration_initial_eps + progress * (
            cfg.exploration_final_eps - cfg.exploration_initial_eps)

    def _q_values(self, observations: np.ndarray) -> np.ndarray:
        with backend.inference():
            q = self._forward(self.state["params"], self.state["non_trainable"],
                              backend.feed(observations))
        return np.asarray(backend.to_numpy(q))

    def _act_greedy(self, observations):
        return np.argmax(self._q_values(observations), axis=-1)

    def _explore(self, greedy_actions, rng):
        return epsilon_greedy(greedy_actions, self.n_actions, self.config.exploration_final_eps, rng)

    def _learn(self, total_steps, stop_at, logger, callback):
        cfg = self.config
        sync_every = max(cfg.target_update_interval // cfg.n_envs, 1)  # vector steps, as SB3
        obs = self._obs
        while self.num_timesteps < stop_at:
            epsilon = self.exploration_rate(total_steps)
            if self.num_timesteps < cfg.learning_starts:
                actions = self.rng.integers(0, self.n_actions, size=cfg.n_envs)
            else:
                greedy = self._act_greedy(obs.astype(np.float32, copy=False))
                actions = epsilon_greedy(greedy, self.n_actions, epsilon, self.rng)
            next_obs, rewards, terminated, truncated, final_obs, _ = self._step_envs(actions, logger)
            self.buffer.add(obs, actions, rewards, final_obs, terminated, truncated)
            obs = next_obs
            self._obs = obs
            self._vector_steps += 1
            if self._vector_steps % sync_every == 0:
                self._pending_syncs += 1
            if self._vector_steps % cfg.train_freq == 0 and self.num_timesteps > cfg.learning_starts:
                loss = self._train_round(total_steps)
                logger.update(self.num_timesteps, loss=loss)
            logger.set(epsilon=epsilon)
            if callback is not None and len(logger.history.episodes) and terminated.any() | truncated.any():
                if callback(self, logger.history) is False:
                    break

    def _train_round(self, total_steps: int) -> float:
        """Sample `gradient_steps` batches and run them, with any due target sync, in one call."""
        cfg = self.config
        # k syncs since the last round, with the online weights unchanged in between, are one
        # Polyak step of 1 - (1 - tau)^k: the same target as syncing at each of those env steps.
        target_tau = 1.0 - (1.0 - cfg.tau) ** self._pending_syncs if self._pending_syncs else 0.0
        self._pending_syncs = 0
        batches = backend.feed(self.buffer.sample(cfg.batch_size, self.rng,
                                                  n_batches=cfg.gradient_steps))
        learning_rate = np.float32(self._learning_rate(total_steps))
        if target_tau > 0.0:
            self.state, loss = self._train(self.state, batches, learning_rate, np.float32(target_tau))
        else:
            self.state, loss = self._train_no_sync(self.state, batches, learning_rate)
        self.n_updates += cfg.gradient_steps
        loss = float(backend.to_numpy(loss))
        self._check_loss(loss, self.n_updates)
        return loss

    # -- training state -----------------------------------------------------------------------
    def _extra_state(self):
        arrays = flatten_arrays("learner", backend.to_numpy(self.state))
        arrays.update({f"buffer/{k}": np.array(v) for k, v in self.buffer.state_dict().items()})
        meta = {"n_updates": self.n_updates, "vector_steps": self._vector_steps,
                "pending_syncs": self._pending_syncs}
        return arrays, meta

    def _load_extra_state(self, arrays, meta):
        state = unflatten_arrays("learner", arrays, backend.to_numpy(self.state))
        self.state = to_tensors(state)
        self.buffer.load_state_dict({k[len("buffer/"):]: v for k, v in arrays.items()
                                     if k.startswith("buffer/")})
        self.n_updates = int(meta["n_updates"])
        self._vector_steps = int(meta["vector_steps"])
        self._pending_syncs = int(meta["pending_syncs"])
        self._sync_model()

    # -- weights out --------------------------------------------------------------------------
    def _sync_model(self) -> None:
        for variable, value in zip(self.q_network.trainable_variables,
                                   backend.to_numpy(self.state["params"])):
            variable.assign(np.array(value))
        for variable, value in zip(self.q_network.non_trainable_variables,
                                   backend.to_numpy(self.state["non_trainable"])):
            variable.assign(np.array(value))

    @property
    def model(self):
        """The Keras Q-network holding the current online weights."""
        self._sync_model()
        return self.q_network

    @property
    def target_weights(self) -> list[np.ndarray]:
        """The target network's weights (trainable, then non-trainable), as numpy."""
        return [np.array(w) for w in backend.to_numpy(
            self.state["target_params"] + self.state["target_non_trainable"])]

    @property
    def policy(self) -> QPolicy:
        """The greedy policy of the current online weights (inference only)."""
        self._sync_model()
        if self._policy is None:
            self._policy = QPolicy(self.q_network, self.observation_space, self.action_space)
        return self._policy
