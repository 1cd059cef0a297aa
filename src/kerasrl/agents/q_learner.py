"""The learner shared by the value-based agents (DQN and its family, SARSA, Expected SARSA).

A `Learner` (agents/learner.py) of one Keras Q-network, its target weights and Adam, that runs a
whole training round (target sync when due, TD targets, loss, gradients, Adam, for every gradient
step) as one compiled call. Agents differ only in the TD target they pass in: a five-line function
of the target network's next-state Q-values and the batch.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import keras
import numpy as np
from keras import ops
from keras import tree

from kerasrl import backend
from kerasrl.agents.learner import UNROLLED_STEPS_PER_CALL, Learner, unrolled_steps
from kerasrl.heads import ValueHead, head_spec
from kerasrl.masks import masked_argmax
from kerasrl.models import build_model, stateless_apply
from kerasrl.optim import Adam
from kerasrl.policies import QPolicy, boltzmann, epsilon_greedy, forward_fn, greedy_fn
from kerasrl.schedules import linear_schedule

# target_fn(next_q_target (B, A), next_q_online (B, A) or None, batch) -> targets (B,); with an
# env's action masks the batch holds "next_action_masks" (B, A) bool, the allowed actions of s'.
# With a value head other than DQN's (kerasrl.heads), the first two are the target and online
# networks' raw outputs (B, *output_shape) and the targets have whatever shape (B, ...) the
# head's loss reads (QR-DQN: (B, N) quantiles).
TargetFn = Callable[..., object]

# XLA on the CPU runs a convolution inside a loop body about 10x slower than outside one, while an
# MLP runs as fast in a rolled loop as unrolled and compiles five times sooner (a 128-step round of
# the RL-Zoo CartPole net: 1 s against 5 s). So a round is one call with a rolled loop, except
# where `learner.unrolled_steps` says otherwise (Keras convolutions on XLA's CPU backend, and
# backends whose loops are Python anyway): there it is split into calls of
# UNROLLED_STEPS_PER_CALL fully unrolled steps.


def exploration_rate(config, num_timesteps: int, total_steps: int) -> float:
    """Epsilon now (with `exploration="boltzmann"`, the temperature): linear from initial to
    final over `exploration_fraction` of the run."""
    if config.exploration == "boltzmann":
        start, end = config.exploration_initial_temperature, config.exploration_final_temperature
    else:
        start, end = config.exploration_initial_eps, config.exploration_final_eps
    return linear_schedule(start, end,
                           num_timesteps / max(1.0, config.exploration_fraction * total_steps))


class QLearner(Learner):
    """A `Learner` of one Q-network ("q"), its target and Adam, with the compiled training round.

    Args:
        model: a built Keras Q-network.
        optimizer: a `kerasrl.optim.Adam`.
        target_fn: the TD target, see `TargetFn`.
        loss: "huber" or "mse".
        needs_online_next: compute the online network's next-state Q-values for `target_fn`
            (Double DQN, Expected SARSA's behaviour policy).
        head: the value head (`kerasrl.heads.ValueHead`): how outputs become action values, what
            a taken action selects of them, and the loss with its priorities. None: DQN's, with
            `loss`.
    """

    def __init__(self, model: keras.Model, *, optimizer: Adam, target_fn: TargetFn,
                 loss: str = "huber", needs_online_next: bool = False,
                 head: ValueHead | None = None):
        super().__init__({"q": model}, targets=("q",), optimizers={"q": (optimizer, ("q",))})
        self.model = model
        self.optimizer = optimizer
        self.target_fn = target_fn
        self.loss = loss
        self.needs_online_next = needs_online_next
        self.head = ValueHead(loss) if head is None else head
        # DQN's head passes no transform: its compiled acting is exactly what it was without heads.
        action_values = None if head_spec(self.head) is None else self.head.action_values
        self._forward = forward_fn(model, action_values)
        self._greedy = greedy_fn(model, action_values)
        # One compiled round serves every sync pattern (target_tau 0 leaves the target as it
        # was): one compilation, where a second costs more than the sync's few ops ever do.
        self._train_round = backend.compile(self._train_rounds, donate_state=True)
        # Gradient steps per call: the whole round in a rolled loop where that runs fast, else
        # calls of fully unrolled steps (see UNROLLED_STEPS_PER_CALL).
        self.unrolled = unrolled_steps([model])

    # -- the compiled round -------------------------------------------------------------------
    def _targets(self, state, batch):
        """TD targets from the target weights, in inference mode."""
        next_obs = batch["next_observations"]
        next_q_target = self.apply("q", None, state, next_obs, target=True)
        next_q_online = None
        if self.needs_online_next:
            next_q_online = self.apply("q", state["params"], state, next_obs)
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

    def _train_rounds(self, state, batches, learning_rate, target_tau=None):
        """Sync the target by `target_tau` (1: copy, 0 or None: no sync), then one gradient step per
        leading row of `batches` (G, B, ...). Returns (state, mean loss, TD errors (G, B))."""
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

    # -- what a compiled loop runs inside its own compiled call ---------------------------------
    def round(self, state, batches, learning_rate, target_tau=None):
        """One training round as a pure function of `state` (this learner's layout) and tensor
        `batches` (G, B, ...): what `train` runs, for loops that compile it into their own call
        (kerasrl.compiled). Returns (state, mean loss, TD errors (G, B)). Run a round of G steps
        as the parts `round_parts(G)` gives, the target sync with the first, to get `train`'s
        numbers bit for bit."""
        return self._train_rounds(state, batches, learning_rate, target_tau)

    def round_parts(self, n_steps: int) -> list[tuple[int, int]]:
        """(start, stop) of the gradient steps of each call a round of `n_steps` is run as: one
        call, or calls of UNROLLED_STEPS_PER_CALL fully unrolled steps (see the module's notes)."""
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
    def train(self, batches: dict[str, np.ndarray], learning_rate: float, target_tau: float):
        """Run one round on numpy `batches` (G, B, ...). Returns (mean loss, TD errors (G, B))."""
        learning_rate = np.float32(learning_rate)
        n_steps = len(batches["actions"])
        parts = self.round_parts(n_steps)
        if len(parts) == 1:  # one call (every round of a per-step setting): no splitting
            with self.on_device():
                self.state, loss, td_errors = self._train_round(
                    self.state, backend.feed(batches), learning_rate, np.float32(target_tau))
            loss, td_errors = backend.to_numpy((loss, td_errors))
            return float(loss), td_errors
        losses, td_errors = [], []
        with self.on_device():
            for start, stop in parts:
                chunk = backend.feed({k: v[start:stop] for k, v in batches.items()})
                tau = target_tau if start == 0 else 0.0
                self.state, loss, td = self._train_round(self.state, chunk, learning_rate,
                                                         np.float32(tau))
                losses.append(loss)
                td_errors.append(td)
        losses, td_errors = backend.to_numpy((losses, td_errors))
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
        """Restore from `arrays()` output; checkpoints of kerasrl 0.1's own Q-learner layout (one
        model's lists directly under each section, no "q" level) are read too."""
        super().load_arrays(_with_model_level(arrays, "q"))


def q_learner_for(model: keras.Model, config, target_fn: TargetFn,
                  needs_online_next: bool, head: ValueHead | None = None) -> QLearner:
    """The QLearner a value agent's `config` makes on `model` (Adam and the loss as configured,
    `head` its value head, None: DQN's): the agent's and its compiled loop's alike."""
    return QLearner(model, optimizer=Adam(epsilon=config.adam_epsilon,
                                          max_grad_norm=config.max_grad_norm),
                    target_fn=target_fn, loss=config.loss, needs_online_next=needs_online_next,
                    head=head)


STATE_SECTIONS = ("params", "non_trainable", "target_params", "target_non_trainable", "opt")


def _with_model_level(arrays: dict[str, np.ndarray], name: str) -> dict[str, np.ndarray]:
    """`learner/params/0` -> `learner/params/<name>/0` for a state saved before the learner held
    its models by name (no step counter then: it starts at zero)."""
    if any(k.split("/")[2:3] == [name] for k in arrays if k.startswith("learner/params/")):
        return arrays
    upgraded = {}
    for key, value in arrays.items():
        parts = key.split("/")
        if parts[0] == "learner" and len(parts) > 2 and parts[1] in STATE_SECTIONS:
            key = "/".join([*parts[:2], name, *parts[2:]])
        upgraded[key] = value
    upgraded.setdefault("learner/step", np.zeros((), np.int32))
    return upgraded


class QAgentMixin:
    """What DQN and SARSA share around their QLearner: acting, target syncs, counters, weights out.

    Mixed in before `Agent` (`class DQN(QAgentMixin, Agent)`); expects `self.learner`,
    `self.q_network`, `self.n_actions` and the counters `n_updates`, `_vector_steps`,
    `_pending_syncs`.
    """

    def loop_counters(self) -> dict[str, int]:
        """Vector steps taken and target syncs due: what a loop that continues this agent's
        training (the compiled engine) starts from."""
        return {"vector_steps": self._vector_steps, "pending_syncs": self._pending_syncs}

    def load_loop_counters(self, vector_steps: int, pending_syncs: int) -> None:
        """Continue from `loop_counters()` as another loop left them."""
        self._vector_steps, self._pending_syncs = int(vector_steps), int(pending_syncs)

    def _require_discrete_actions(self) -> None:
        """Refuse a non-discrete action space, naming the agent to use instead; set n_actions."""
        if not isinstance(self.action_space, gym.spaces.Discrete):
            raise ValueError(
                f"{type(self).__name__} needs a discrete action space, but {self.env_name} has "
                f"{self.action_space}. For continuous actions use kerasrl.PPO."
            )
        self.n_actions = int(self.action_space.n)
        self._mask_sizes = (self.n_actions,)

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
        self.n_updates = 0
        self._vector_steps = 0
        self._pending_syncs = 0  # target syncs due since the last training round

    def _act_greedy(self, observations, action_masks=None):
        if self.config.exploration == "boltzmann":  # _explore samples from these Q-values
            self._eval_q = self.learner.q_values(observations)
            return masked_argmax(self._eval_q, action_masks)
        if action_masks is None:
            return self.learner.greedy_actions(observations)
        return masked_argmax(self.learner.q_values(observations), action_masks)

    def _explore(self, greedy_actions, rng, action_masks=None):
        if self.config.exploration == "boltzmann":
            return boltzmann(self._eval_q, self.config.exploration_final_temperature, rng,
                             action_masks)
        return epsilon_greedy(greedy_actions, self.n_actions, self.config.exploration_final_eps,
                              rng, action_masks)

    def _behaviour_actions(self, observations, rate: float, masks=None) -> np.ndarray:
        """The behaviour policy's actions (B,) for float32 `observations`, drawn from `self.rng`:
        epsilon-greedy with epsilon `rate`, or with `exploration="boltzmann"` from
        softmax(Q / `rate`); among the allowed actions when `masks` (B, A) is given."""
        if self.config.exploration == "boltzmann":
            return boltzmann(self.learner.q_values(observations), rate, self.rng, masks)
        greedy = self._act_greedy(observations, **({} if masks is None else {"action_masks": masks}))
        return epsilon_greedy(greedy, self.n_actions, rate, self.rng, masks)

    def _exploration_figure(self, rate: float) -> dict[str, float]:
        """What the logger shows of the exploration now: epsilon, or the temperature."""
        return {"temperature" if self.config.exploration == "boltzmann" else "epsilon": rate}

    def _take_target_tau(self) -> float:
        """The Polyak step for the syncs due since the last round, and clear them.

        k syncs with the online weights unchanged in between are one step of 1 - (1 - tau)^k: the
        same target as syncing at each of those env steps (as Stable-Baselines3 does).
        """
        k, self._pending_syncs = self._pending_syncs, 0
        return 1.0 - (1.0 - self.config.tau) ** k if k else 0.0

    def _counter_state(self) -> dict:
        return {"n_updates": self.n_updates, "vector_steps": self._vector_steps,
                "pending_syncs": self._pending_syncs}

    def _load_counter_state(self, meta) -> None:
        self.n_updates = int(meta["n_updates"])
        self._vector_steps = int(meta["vector_steps"])
        self._pending_syncs = int(meta["pending_syncs"])

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
