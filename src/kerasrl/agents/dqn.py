"""Deep Q-Networks (Mnih et al., 2015) and the Rainbow-era variants as flags: Double DQN
(van Hasselt et al., 2016), dueling heads (Wang et al., 2016), n-step returns, and prioritized
replay (Schaul et al., 2016); and the family's value learner, which SARSA and Expected SARSA run
with their targets, and QR-DQN and C51 (subclasses of DQN) with their value heads and targets.

One DQN update, env step to weights, reads this file, agents/base.py (`_step_envs`: the envs'
step and episode booking) and agents/learner.py (`descend`: gradients and Adam; `soft_update`):
    DQN._learn        act epsilon-greedily (numpy draws: the same on every backend), step the envs,
                      store the transitions; a target sync is due every `target_update_interval`
                      env steps, a training round every `train_freq` after `learning_starts`
    DQN._train_round  sample `gradient_steps` batches, run them in one compiled call
    QLearner.round    any due sync, the TD targets, the head's loss and an Adam step per batch;
                      the compiled loop (kerasrl.compiled) runs it inside its own call
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import keras
import numpy as np
from keras import ops
from keras import tree

from kerasrl import backend
from kerasrl.agents.base import Agent, multiples_passed
from kerasrl.agents.learner import UNROLLED_STEPS_PER_CALL, Learner, unrolled_steps
from kerasrl.agents.state_arrays import (load_replay_learning_arrays, replay_learning_arrays,
                                         with_model_level)
from kerasrl.buffers import FrameStackReplayBuffer, frames_last, model_layout, replay_buffer_for
from kerasrl.config import DQNConfig
from kerasrl.exploration import exploration_rate, value_explorer
from kerasrl.heads import ValueHead, head_spec
from kerasrl.losses import double_q_target, max_q_target
from kerasrl.masks import masked_argmax
from kerasrl.models import build_model, dueling_q_network, stateless_apply
from kerasrl.optim import Adam
from kerasrl.policies import (QPolicy, boltzmann, epsilon_greedy, forward_fn, greedy_fn,
                              random_actions)
from kerasrl.schedules import linear_schedule

# target_fn(next_q_target (B, A), next_q_online (B, A) or None, batch) -> targets (B,); with an
# env's action masks the batch holds "next_action_masks" (B, A) bool, the allowed actions of s'.
# With a value head other than DQN's (kerasrl.heads), the first two are the target and online
# networks' raw outputs (B, *output_shape) and the targets have whatever shape (B, ...) the
# head's loss reads (QR-DQN: (B, N) quantiles).
TargetFn = Callable[..., object]


def dqn_target(config: DQNConfig):
    """(the TD target function, whether it needs the online network's next Q-values) of `config`."""
    return (double_q_target, True) if config.double_q else (max_q_target, False)


class QLearner(Learner):
    """A `Learner` of one Q-network ("q"), its target and Adam, with the compiled training round.

    Args:
        model: a built Keras Q-network.
        optimizer: a `kerasrl.optim.Adam`.
        target_fn: the TD target, see `TargetFn`.
        needs_online_next: compute the online network's next-state Q-values for `target_fn`
            (Double DQN, Expected SARSA's behaviour policy).
        head: the value head (`kerasrl.heads.ValueHead`): how outputs become action values, what
            a taken action selects of them, and the loss with its priorities.
    """

    def __init__(self, model: keras.Model, *, optimizer: Adam, target_fn: TargetFn, head: ValueHead,
                 needs_online_next: bool = False):
        super().__init__({"q": model}, targets=("q",), optimizers={"q": (optimizer, ("q",))})
        self.model = model
        self.target_fn, self.head, self.needs_online_next = target_fn, head, needs_online_next
        # DQN's head passes no transform: its compiled acting is exactly what it was without heads.
        action_values = None if head_spec(self.head) is None else self.head.action_values
        self._forward = forward_fn(model, action_values)
        self._greedy = greedy_fn(model, action_values)
        # One compiled round serves every sync pattern (target_tau 0 leaves the target as it
        # was): one compilation, where a second costs more than the sync's few ops ever do.
        self._train_round = backend.compile(self.round, donate_state=True)
        self._frames_last = backend.compile(frames_last)
        # Gradient steps per call: the whole round in a rolled loop where that runs fast, else
        # calls of fully unrolled steps (see agents/learner.py's UNROLLED_STEPS_PER_CALL).
        self.unrolled = unrolled_steps([model])

    # -- the compiled round -------------------------------------------------------------------
    def _targets(self, state, batch):
        """TD targets from the target weights, in inference mode."""
        next_obs = batch["next_observations"]
        next_q_target = self.apply("q", None, state, next_obs, target=True)
        next_q_online = (self.apply("q", state["params"], state, next_obs)
                         if self.needs_online_next else None)
        return self.target_fn(next_q_target, next_q_online, batch)

    def _gradient_step(self, state, batch, learning_rate, targets=None):
        if targets is None:
            targets = self._targets(state, batch)

        def td_objective(params):
            """The head's loss of the online weights in training mode (batch norm, dropout
            active), and its priorities (DQN: the TD errors)."""
            outputs, non_trainable = stateless_apply(self.model, params["q"],
                                                     state["non_trainable"]["q"],
                                                     batch["observations"], True)
            loss, td_errors = self.head.loss(self.head.at_actions(outputs, batch["actions"]),
                                             targets, batch["weights"])
            return loss, ({"q": non_trainable}, td_errors)

        state, loss, td_errors = self.descend(state, "q", td_objective, learning_rate,
                                              updates_non_trainable=True)
        return {**state, "step": state["step"] + 1}, loss, td_errors

    def _round_targets(self, state, batches):
        """The TD targets of every step of a round (G, B, ...) from one forward pass over all G * B
        next observations: the target weights do not change within a round, and one large matrix
        product runs faster than G small ones."""
        n_steps, batch_size = batches["actions"].shape
        flat = tree.map_structure(
            lambda x: ops.reshape(x, (n_steps * batch_size, *x.shape[2:])), batches)
        targets = self._targets(state, flat)
        return ops.reshape(targets, (n_steps, batch_size, *targets.shape[1:]))

    def round(self, state, batches, learning_rate, target_tau=None):
        """One training round, a pure function of `state` (this learner's layout) and tensor
        `batches` (G, B, ...): sync the target by `target_tau` (1: copy, 0 or None: no sync), then
        one gradient step per leading row. Returns (state, mean loss, TD errors (G, B)). What
        `train` compiles, and loops compiled whole (kerasrl.compiled) call inside their own call:
        run as the parts `round_parts(G)` gives, the sync with the first, it is `train` bit for bit."""
        if target_tau is not None:
            state = self.soft_update(state, target_tau)
        # With the online network in the target (Double DQN, Expected SARSA) each step needs the
        # weights of the step before; otherwise all targets are known before the first step.
        all_targets = None if self.needs_online_next else self._round_targets(state, batches)

        def step(i, state):
            batch = tree.map_structure(lambda x: x[i], batches)
            targets = None if all_targets is None else all_targets[i]
            return self._gradient_step(state, batch, learning_rate, targets)

        n_steps = batches["actions"].shape[0]
        if n_steps == 1:
            state, loss, td_errors = step(0, state)
            return state, loss, ops.expand_dims(td_errors, 0)

        def body(i, carry):
            state, loss_sum, all_td = carry
            state, loss, td_errors = step(i, state)
            all_td = ops.slice_update(all_td, (i, 0), ops.expand_dims(td_errors, 0))
            return state, loss_sum + loss, all_td

        td_init = ops.zeros(batches["actions"].shape, "float32")
        state, loss_sum, all_td = backend.fori_loop(
            0, n_steps, body, (state, ops.zeros((), "float32"), td_init),
            unroll=n_steps if self.unrolled else 1)
        return state, loss_sum / n_steps, all_td

    def round_parts(self, n_steps: int) -> list[tuple[int, int]]:
        """(start, stop) of the gradient steps of each call a round of `n_steps` is run as: one
        call, or calls of UNROLLED_STEPS_PER_CALL fully unrolled steps (`unrolled_steps`)."""
        per_call = UNROLLED_STEPS_PER_CALL if self.unrolled else n_steps
        return [(start, min(start + per_call, n_steps)) for start in range(0, n_steps, per_call)]

    def action_values(self, state, observations):
        """Action values (B, A) of the online weights in `state` (the head's, from the network's
        outputs) for float32 `observations`, in inference mode: acting inside a compiled loop."""
        return self.head.action_values(self.apply("q", state["params"], state, observations))

    def greedy(self, state, observations):
        """Greedy actions (B,) int32 of `action_values`."""
        return ops.cast(ops.argmax(self.action_values(state, observations), axis=-1), "int32")

    # -- host side ----------------------------------------------------------------------------
    def train(self, batches: dict[str, np.ndarray], learning_rate: float, target_tau: float,
              frames_first: bool = False):
        """Run one round on numpy `batches` (G, B, ...), the target sync with its first part.
        `frames_first`: the observations are stacks of frames (G, B, K, H, W) as a frame replay
        buffer gathers them (uint8), put frames last and made float32 on this learner's device.
        Returns (mean loss, TD errors (G, B))."""
        learning_rate, parts = np.float32(learning_rate), self.round_parts(len(batches["actions"]))
        results = []
        with self.on_device():
            if frames_first:
                batches = {**batches, **self._frames_last(
                    backend.feed({key: batches[key] for key in ("observations", "next_observations")}))}
            for start, stop in parts:  # one part: every round of a per-step setting
                chunk = batches if len(parts) == 1 else {k: v[start:stop] for k, v in batches.items()}
                self.state, loss, td_errors = self._train_round(
                    self.state, backend.feed(chunk), learning_rate,
                    np.float32(target_tau if start == 0 else 0.0))
                results.append((loss, td_errors))
        losses, td_errors = zip(*backend.to_numpy(results))
        if len(parts) == 1:
            return float(losses[0]), td_errors[0]
        weights = [stop - start for start, stop in parts]
        return float(np.average(losses, weights=weights)), np.concatenate(td_errors)

    def q_values(self, observations: np.ndarray) -> np.ndarray:
        """Online action values (B, A) (the head's) for float32 observations, in inference mode."""
        with backend.inference(), self.acting_scope():
            params, non_trainable = self.acting_weights()
            q = self._forward(params["q"], non_trainable["q"], backend.feed(observations))
        return np.asarray(backend.to_numpy(q))

    def greedy_actions(self, observations: np.ndarray) -> np.ndarray:
        """Argmax of the online action values (B,) for float32 observations: acting, once per env
        step."""
        with backend.inference(), self.acting_scope():
            params, non_trainable = self.acting_weights()
            actions = self._greedy(params["q"], non_trainable["q"], backend.feed(observations))
        return backend.to_numpy(actions)

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore from `arrays()` output, or from kerasrl 0.1's layout (no "q" level)."""
        super().load_arrays(with_model_level(arrays, "q"))


def q_learner_for(model: keras.Model, config, target_fn: TargetFn,
                  needs_online_next: bool, head: ValueHead | None = None) -> QLearner:
    """The QLearner a value agent's `config` makes on `model` (Adam and the loss as configured,
    `head` its value head, None: DQN's): the agent's and its compiled loop's alike."""
    return QLearner(model, optimizer=Adam.from_config(config),
                    target_fn=target_fn, head=ValueHead(config.loss) if head is None else head,
                    needs_online_next=needs_online_next)


def dqn_learner(model: keras.Model, config: DQNConfig):
    """DQN's learner on the Q-network `model`: the agent's, and the compiled loop's."""
    return q_learner_for(model, config, *dqn_target(config))


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
                         head: ValueHead | None = None) -> None:
        """Build the value network (the user's, or the head's default) and its learner, and zero
        the counters. `head`: the value head (None: DQN's, with the config's loss)."""
        cfg = self.config
        self._require_discrete_actions()
        head = ValueHead(cfg.loss) if head is None else head
        self.q_network = build_model(
            model, self.observation_space, head.output_shape(self.n_actions),
            action_space=self.action_space,
            default=lambda: head.network(self.observation_space, self.n_actions, cfg.hidden_sizes),
            role="Q-network", seed=self.weights_seed,
        )
        self.learner = q_learner_for(self.q_network, cfg, target_fn, needs_online_next, head)
        # _pending_syncs: the target syncs due since the last training round.
        self.n_updates = self._vector_steps = self._pending_syncs = 0

    def _act_greedy(self, observations, action_masks=None):
        if self.config.exploration == "boltzmann":  # _explore samples from these Q-values
            self._eval_q = self.learner.q_values(observations)
            return masked_argmax(self._eval_q, action_masks)
        if action_masks is None:
            return self.learner.greedy_actions(observations)
        return masked_argmax(self.learner.q_values(observations), action_masks)

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
        network runs only if some env acts greedily); `masks` (B, A): the allowed actions."""
        masked = {} if masks is None else {"action_masks": masks}
        greedy = partial(self._act_greedy, np.asarray(observations, dtype=np.float32), **masked)
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

    def _build(self, model) -> None:
        cfg = self.config
        self._require_discrete_actions()
        if cfg.dueling:
            model = dueling_q_network(model, self.observation_space, self.action_space,
                                      cfg.hidden_sizes)
        self._build_q_learner(model, *dqn_target(cfg))
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
                                             frames_first=frames_first)
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

