"""Deep Q-Networks (Mnih et al., 2015) and the Rainbow-era variants as flags: Double DQN
(van Hasselt et al., 2016), dueling heads (Wang et al., 2016), n-step returns, and prioritized
replay (Schaul et al., 2016).

The loop, per vector step:
    act epsilon-greedily from the online network   (numpy exploration: same draws on every backend)
    step the n_envs environments, store the transitions (true final observation on auto-reset)
    every `target_update_interval` env steps a target sync is due (hard copy or Polyak tau)
    every `train_freq` steps after `learning_starts`: `gradient_steps` Adam steps on sampled
        batches, with any due sync first, all in one compiled call (see QLearner)
"""

from __future__ import annotations

import keras
import numpy as np

from kerasrl.agents.base import Agent
from kerasrl.agents.q_learner import QAgentMixin, exploration_rate, q_learner_for
from kerasrl.buffers import (FrameStackReplayBuffer, PrioritizedFrameStackReplayBuffer,
                             PrioritizedReplayBuffer, ReplayBuffer)
from kerasrl.buffers.frame_stack import stacked_frames
from kerasrl.config import DQNConfig
from kerasrl.exploration import Boltzmann, EpsilonGreedy
from kerasrl.losses import q_learning_target
from kerasrl.models import adapt_model
from kerasrl.networks import dueling, is_image_space, mlp_torso, nature_cnn_torso
from kerasrl.policies import random_actions
from kerasrl.schedules import linear_schedule
from kerasrl.spaces import structure_of


def double_q_target(next_q_target, next_q_online, batch):
    """Double DQN: the online network picks the next (allowed) action, the target values it."""
    return q_learning_target(next_q_target, batch["rewards"], batch["discounts"], next_q_online,
                             next_masks=batch.get("next_action_masks"))


def max_q_target(next_q_target, next_q_online, batch):
    """DQN: r + discount * max_a Q_target(s', a), a over the allowed actions of s' if masked."""
    return q_learning_target(next_q_target, batch["rewards"], batch["discounts"],
                             next_masks=batch.get("next_action_masks"))


def dqn_target(config: DQNConfig):
    """(the TD target function, whether it needs the online network's next Q-values) of `config`."""
    return (double_q_target, True) if config.double_q else (max_q_target, False)


def dqn_learner(model: keras.Model, config: DQNConfig):
    """DQN's learner on the Q-network `model`: the agent's, and the compiled loop's."""
    return q_learner_for(model, config, *dqn_target(config))


def dueling_q_network(torso, observation_space, action_space, config: DQNConfig) -> keras.Model:
    """The dueling Q-network on the user's `torso` (a model or a builder), or on the default
    torso (Nature CNN for images, else an MLP of `config.hidden_sizes`)."""
    shape, n_actions = observation_space.shape, int(action_space.n)
    if torso is None:
        if is_image_space(observation_space):
            return dueling(nature_cnn_torso(observation_space), shape, n_actions)
        torso = mlp_torso(shape, config.hidden_sizes, observation_space=observation_space)
    else:
        if not isinstance(torso, keras.Model):
            torso = torso(structure_of(observation_space), action_space)
        torso = adapt_model(torso, observation_space)
    return dueling(torso, shape, n_actions)


class DQN(QAgentMixin, Agent):
    """Deep Q-learning for discrete actions.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one.
        model: a Keras model mapping observations to (batch, n_actions) Q-values, a callable
            `(observation_space, action_space) -> keras.Model`, or None for the default network.
            With `dueling=True` it is the torso: observations to features, any width.
        config: a `DQNConfig`; or give its fields as keyword arguments.
    """

    config_class = DQNConfig
    algorithm = "dqn"

    def _build(self, model) -> None:
        cfg = self.config
        self._require_discrete_actions()
        if cfg.dueling:
            model = dueling_q_network(model, self.observation_space, self.action_space, cfg)
        self._build_q_learner(model, *dqn_target(cfg))
        self.buffer = self._make_buffer()

    def _make_buffer(self):
        cfg = self.config
        args = (cfg.buffer_size, cfg.n_envs, self.observation_space.shape,
                self.observation_space.dtype, cfg.gamma, cfg.n_step_return)
        stacked = stacked_frames(self.env)
        if stacked is not None:  # an env that declares stacked frames (kerasrl.envs.atari)
            if cfg.prioritized_replay:
                return PrioritizedFrameStackReplayBuffer(
                    *args, alpha=cfg.prioritized_replay_alpha, eps=cfg.prioritized_replay_eps,
                    padding=stacked[1])
            return FrameStackReplayBuffer(*args, padding=stacked[1])
        if cfg.prioritized_replay:
            return PrioritizedReplayBuffer(*args, alpha=cfg.prioritized_replay_alpha,
                                           eps=cfg.prioritized_replay_eps)
        return ReplayBuffer(*args)

    # -- the loop -----------------------------------------------------------------------------
    def _learn(self, total_steps, stop_at, logger, callback):
        cfg = self.config
        sync_every = max(cfg.target_update_interval // cfg.n_envs, 1)  # vector steps, as SB3
        obs = self.loop.observations
        while self.num_timesteps < stop_at:
            epsilon = exploration_rate(cfg, self.num_timesteps, total_steps)
            masks = self.loop.action_masks  # None for an env without action masks
            if self.num_timesteps < cfg.learning_starts and cfg.random_warmup:
                actions = random_actions(self.n_actions, cfg.n_envs, self.rng, masks)
            else:
                actions = self._behaviour_actions(obs.astype(np.float32, copy=False), epsilon, masks)
            next_obs, rewards, terminated, truncated, final_obs, info = self._step_envs(actions,
                                                                                      logger)
            # The masks of s' go with the transition: the target's max is over those actions.
            self.loop.action_masks, next_masks = self._masks_after_step(info, terminated | truncated)
            self.buffer.add(obs, actions, rewards, final_obs, terminated, truncated,
                            next_action_masks=next_masks)
            obs = self.loop.observations = next_obs
            self._vector_steps += 1
            if self._vector_steps % sync_every == 0:
                self._pending_syncs += 1
            if self._vector_steps % cfg.train_freq == 0 and self.num_timesteps > cfg.learning_starts:
                logger.update(self.num_timesteps, loss=self._train_round(total_steps))
            logger.set(**self._exploration_figure(epsilon))
            if callback is not None and (terminated.any() or truncated.any()):
                if callback(self, logger.history) is False:
                    break

    # -- remote actors (kerasrl.distributed) ----------------------------------------------------
    def explorer(self, n_envs, epsilon=None):
        """Epsilon-greedy with `epsilon` (the engine's, per actor; default the final epsilon),
        or Boltzmann at the final temperature (`epsilon` unused)."""
        if self.config.exploration == "boltzmann":
            return Boltzmann(self.config.exploration_final_temperature)
        return EpsilonGreedy(self.config.exploration_final_eps if epsilon is None else epsilon)

    def random_warmup(self) -> bool:
        return self.config.random_warmup and self.num_timesteps < self.config.learning_starts

    def receive_transitions(self, chunk, steps_before, total_steps, logger) -> None:
        truncated = chunk["truncated"]
        if self.config.n_step_return > 1:
            # Rows of different actors interleave in the buffer: end n-step sums at the chunk's
            # last row, which then bootstraps from its own next observation (still correct).
            truncated = truncated.copy()
            truncated[-1] = True
        self._store_transitions(chunk, truncated)
        self.learn_from_received_steps(len(chunk["actions"]), steps_before, total_steps, logger)

    def learn_from_received_steps(self, vector_steps: int, steps_before: int, total_steps: int,
                                  logger) -> None:
        """Run the target syncs and training rounds that `vector_steps` vector steps collected
        elsewhere (already in the buffer, `num_timesteps` advanced from `steps_before`) make
        due, as the same steps would in a local run."""
        cfg = self.config
        self._pending_syncs += (self.num_timesteps // cfg.target_update_interval
                                - steps_before // cfg.target_update_interval)
        rounds = ((self._vector_steps + vector_steps) // cfg.train_freq
                  - self._vector_steps // cfg.train_freq)
        self._vector_steps += vector_steps
        if self.num_timesteps > cfg.learning_starts:
            for _ in range(rounds):
                logger.update(self.num_timesteps, loss=self._train_round(total_steps))

    def _train_round(self, total_steps: int) -> float:
        """Sample `gradient_steps` batches and run them, with any due target sync, in one call."""
        cfg = self.config
        target_tau = self._take_target_tau()
        if cfg.prioritized_replay:
            self.buffer.beta = linear_schedule(cfg.prioritized_replay_beta0, 1.0,
                                               self.num_timesteps / total_steps)
        batches = self.buffer.sample(cfg.batch_size, self.rng, n_batches=cfg.gradient_steps)
        indices = batches.pop("indices", None)
        loss, td_errors = self.learner.train(batches, self._learning_rate(total_steps), target_tau)
        self.n_updates += cfg.gradient_steps
        self.check_loss(loss, self.n_updates)
        self.diagnostics.after_update(
            loss, cfg.gradient_steps, batches["observations"], batches["rewards"],
            values=lambda: self.learner.q_values(batches["observations"][0].astype(np.float32)))
        if indices is not None:
            # Rows were sampled together; later rows' priorities (same transition) win.
            self.buffer.update_priorities(indices, td_errors)
        return loss

    # -- training state -----------------------------------------------------------------------
    def _extra_state(self):
        arrays = self.learner.arrays()
        arrays.update({f"buffer/{k}": np.array(v) for k, v in self.buffer.state_dict().items()})
        return arrays, self._counter_state()

    def _load_extra_state(self, arrays, meta):
        self.learner.load_arrays(arrays)
        self.buffer.load_state_dict({k[len("buffer/"):]: v for k, v in arrays.items()
                                     if k.startswith("buffer/")})
        self._load_counter_state(meta)

