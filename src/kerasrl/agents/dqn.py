"""Deep Q-Networks (Mnih et al., 2015) and the Rainbow-era variants as flags: Double DQN
(van Hasselt et al., 2016), dueling heads (Wang et al., 2016), n-step returns, prioritized
replay (Schaul et al., 2016) and noisy networks (Fortunato et al., 2018); and what the family's
agents share around their value learner (`QAgentMixin`; the learner, agents/q_learner.py, which
SARSA and Expected SARSA run with their targets, and QR-DQN, C51 and Rainbow, subclasses of DQN,
with their value heads and targets).

One DQN update, env step to weights, reads this file, agents/q_learner.py, agents/base.py
(`_step_envs`: the envs' step and episode booking) and agents/learner.py (`descend`: gradients and
Adam; `soft_update`):
    DQN._learn        act epsilon-greedily (numpy draws: the same on every backend), step the envs,
                      store the transitions; a target sync is due every `target_update_interval`
                      env steps, a training round every `train_freq` after `learning_starts`
    DQN._train_round  sample `gradient_steps` batches, run them in one compiled call
    QLearner.round    any due sync, the TD targets, the head's loss and an Adam step per batch;
                      the compiled loop (kerasrl.compiled) runs it inside its own call
"""

from __future__ import annotations

from functools import partial

import keras
import numpy as np

from kerasrl.agents.base import Agent, multiples_passed
from kerasrl.agents.q_learner import (QLearner, TargetFn, dqn_learner, dqn_target,  # noqa: F401
                                      q_learner_for)
from kerasrl.agents.state_arrays import load_replay_learning_arrays, replay_learning_arrays
from kerasrl.buffers import FrameStackReplayBuffer, model_layout, replay_buffer_for
from kerasrl.config import DQNConfig
from kerasrl.exploration import exploration_rate, value_explorer
from kerasrl.heads import ValueHead
from kerasrl.masks import masked_argmax
from kerasrl.models import build_model
from kerasrl.policies import QPolicy, boltzmann, epsilon_greedy, random_actions
from kerasrl.schedules import linear_schedule
from kerasrl.value_networks import value_model

class QAgentMixin:
    """What DQN and SARSA share around their QLearner: acting, target syncs, counters, weights
    out. Mixed in before `Agent` (`class DQN(QAgentMixin, Agent)`); `_build_q_learner` sets up."""

    def loop_counters(self) -> dict[str, int]:
        """Vector steps taken and target syncs due: what a loop that continues this agent's
        training (the compiled engine) starts from."""
        return {"vector_steps": self._vector_steps, "pending_syncs": self._pending_syncs}

    def load_loop_counters(self, vector_steps: int, pending_syncs: int) -> None:
        """Continue from `loop_counters()` as another loop left them."""
        self._vector_steps, self._pending_syncs = int(vector_steps), int(pending_syncs)

    def _build_q_learner(self, model, target_fn, needs_online_next: bool,
                         head: ValueHead | None = None, make_learner=None) -> None:
        """Build the value network (the user's, or the head's default) and its learner, and zero
        the counters. `head`: the value head (None: DQN's, with the config's loss);
        `make_learner(network, config)`: a learner of its own (IQN's), else a QLearner."""
        cfg = self.config
        self._require_discrete_actions()
        head = ValueHead(cfg.loss) if head is None else head
        self.q_network = build_model(
            model, self.observation_space, head.output_shape(self.n_actions),
            action_space=self.action_space,
            default=lambda: head.network(self.observation_space, self.n_actions, cfg.hidden_sizes),
            role="Q-network", seed=self.weights_seed,
        )
        self.learner = (q_learner_for(self.q_network, cfg, target_fn, needs_online_next, head)
                        if make_learner is None else make_learner(self.q_network, cfg))
        # _pending_syncs: the target syncs due since the last training round.
        self.n_updates = self._vector_steps = self._pending_syncs = 0

    def _act_greedy(self, observations, action_masks=None, noise=None):
        """Greedy actions of the Q-network: of its mean network where it has noisy layers
        (evaluation), or with `noise` (`QLearner.acting_noise`: the behaviour policy)."""
        if self.config.exploration == "boltzmann":  # _explore samples from these Q-values
            self._eval_q = self.learner.q_values(observations, noise)
            return masked_argmax(self._eval_q, action_masks)
        if action_masks is None:
            return self.learner.greedy_actions(observations, noise)
        return masked_argmax(self.learner.q_values(observations, noise), action_masks)

    def _explore(self, greedy_actions, rng, action_masks=None, rate=None):
        """Epsilon-greedy around `_act_greedy`'s actions with epsilon `rate`, or with
        `exploration="boltzmann"` a sample of softmax(Q / `rate`), among the allowed actions of
        `action_masks`; `rate` None: the final epsilon or temperature (evaluation)."""
        cfg = self.config
        if cfg.exploration == "boltzmann":
            return boltzmann(self._eval_q, cfg.exploration_final_temperature if rate is None
                             else rate, rng, action_masks)
        return epsilon_greedy(greedy_actions, self.n_actions, cfg.exploration_final_eps if
                              rate is None else rate, rng, action_masks)

    def _behaviour_actions(self, observations, rate: float, masks=None) -> np.ndarray:
        """The behaviour policy's actions (B,) (`_explore` at `rate`, drawn from `self.rng`; the
        network runs only if some env acts greedily, on fresh random inputs where it takes them:
        noisy layers' noise shared by the envs, IQN's fractions); `masks` (B, A): the allowed
        actions."""
        masked = {} if masks is None else {"action_masks": masks}
        noisy = ({"noise": self.learner.acting_noise(self.rng, len(observations))}
                 if self.learner.random_inputs else {})
        greedy = partial(self._act_greedy, np.asarray(observations, dtype=np.float32), **masked,
                         **noisy)
        if self.config.exploration == "boltzmann":
            return self._explore(greedy(), self.rng, rate=rate, **masked)
        return epsilon_greedy(greedy, self.n_actions, rate, self.rng, masks, size=len(observations))

    def _exploration_figure(self, rate: float) -> dict[str, float]:
        """What the logger shows of the exploration now: epsilon, or the temperature."""
        return {"temperature" if self.config.exploration == "boltzmann" else "epsilon": rate}

    def _take_target_tau(self) -> float:
        """The Polyak step for the syncs due since the last round, and clear them: k syncs with
        the same online weights are one step of 1 - (1 - tau)^k (as SB3 syncing at each)."""
        k, self._pending_syncs = self._pending_syncs, 0
        return 1.0 - (1.0 - self.config.tau) ** k if k else 0.0

    def _counter_state(self) -> dict:
        return {"n_updates": self.n_updates, **self.loop_counters()}

    def _load_counter_state(self, meta) -> None:
        self.n_updates = int(meta["n_updates"])
        self.load_loop_counters(meta["vector_steps"], meta["pending_syncs"])

    def sync_model(self) -> None:
        """Write the online weights into the Keras Q-network (see `Agent.sync_model`)."""
        self.learner.push_weights()

    @property
    def model(self) -> keras.Model:
        """The Keras Q-network (weights as of the last `sync_model()`)."""
        return self.q_network

    @property
    def target_weights(self) -> list[np.ndarray]:
        """The target network's weights (trainable, then non-trainable), as numpy."""
        return self.learner.target_weights("q")

    @property
    def policy(self) -> QPolicy:
        """The greedy policy on the Q-network (inference only; see `Agent.policy`)."""
        if getattr(self, "_q_policy", None) is None:
            self._q_policy = QPolicy(self.q_network, self.observation_space, self.action_space,
                                     value_head=self.learner.head)
            # What made the network of a user's torso (dueling, noisy or IQN's layers around
            # it): `load_policy` makes it again around the torso a model_factory returns.
            self._q_policy.made_by = {"algorithm": self.algorithm, "config": self.config.to_dict()}
        self._q_policy.action_masks = self.loop.action_masks is not None
        return self._q_policy


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

    @staticmethod
    def outputs_per_action(config) -> int | None:
        """The network's outputs per action: None for DQN's one Q-value (QR-DQN's quantiles and
        C51's atoms otherwise)."""
        return None

    @classmethod
    def whole_model(cls, name, model, observation_space, action_space, config):
        """With dueling or noisy streams, the Q-network this agent makes of a torso `model`."""
        whole = value_model(model, observation_space, action_space, config,
                            cls.outputs_per_action(config))
        return None if whole is model or name != "model" else whole

    def _q_network(self, model):
        """The Q-network the config asks for on `model` (value_networks.value_model)."""
        self._require_discrete_actions()
        return value_model(model, self.observation_space, self.action_space, self.config,
                           self.outputs_per_action(self.config))

    def _build(self, model) -> None:
        cfg = self.config
        self._build_q_learner(self._q_network(model), *dqn_target(cfg))
        self.buffer = self._make_buffer()

    def _make_buffer(self):
        """The replay buffer the config asks for (QR-DQN and C51 build theirs here too); a frame
        buffer's stacks sent as gathered (`QLearner.train` puts their frames last)."""
        cfg = self.config
        buffer = replay_buffer_for(
            self.env, self.observation_space, cfg.buffer_size, cfg.n_envs, cfg.gamma,
            cfg.n_step_return, priority_alpha=cfg.prioritized_replay_alpha if
            cfg.prioritized_replay else None, priority_eps=cfg.prioritized_replay_eps,
            hindsight=self._hindsight_replay())
        if isinstance(buffer, FrameStackReplayBuffer):
            buffer.frames_first = True
        return buffer

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
                actions = self._behaviour_actions(obs, epsilon, masks)
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
        if self.learner.noisy:
            raise NotImplementedError(
                "its Q-network has noisy layers (NoisyDense), whose noise is drawn where the agent "
                "acts; remote actors would act with the mean network and not explore.")
        return value_explorer(self.config, epsilon)

    def random_warmup(self) -> bool:
        return self.config.random_warmup and self.num_timesteps < self.config.learning_starts

    def receive_transitions(self, chunk, steps_before, total_steps, logger) -> None:
        """Store a chunk collected elsewhere (`num_timesteps` already advanced from
        `steps_before`) and run the target syncs and training rounds its steps make due, as the
        same steps would in a local run."""
        cfg, n_rows, truncated = self.config, len(chunk["actions"]), chunk["truncated"]
        if cfg.n_step_return > 1:
            # Rows of different actors interleave in the buffer: end n-step sums at the chunk's
            # last row, which then bootstraps from its own next observation (still correct).
            truncated = truncated.copy()
            truncated[-1] = True
        self._store_transitions(chunk, truncated)
        self._pending_syncs += multiples_passed(steps_before, self.num_timesteps - steps_before,
                                                cfg.target_update_interval)
        rounds = multiples_passed(self._vector_steps, n_rows, cfg.train_freq)
        self._vector_steps += n_rows
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
        frames_first = self.buffer.frames_first
        loss, td_errors = self.learner.train(batches, self._learning_rate(total_steps), target_tau,
                                             frames_first=frames_first,
                                             noise=self.learner.round_noise(
                                                 self.rng, cfg.gradient_steps, cfg.batch_size))
        self.n_updates += cfg.gradient_steps
        self.check_loss(loss, self.n_updates)
        self.diagnostics.after_update(
            loss, cfg.gradient_steps, batches["observations"], batches["rewards"],
            values=lambda: self.learner.q_values(model_layout(batches["observations"][0], frames_first)))
        if indices is not None:
            # Rows were sampled together; later rows' priorities (same transition) win.
            self.buffer.update_priorities(indices, td_errors)
        return loss

    # -- training state -----------------------------------------------------------------------
    def _extra_state(self):
        return replay_learning_arrays(self.learner, self.buffer), self._counter_state()

    def _load_extra_state(self, arrays, meta):
        load_replay_learning_arrays(self.learner, self.buffer, arrays)
        self._load_counter_state(meta)

