"""The value learner of the DQN family: one Q-network, its target and Adam, and the compiled
training round that DQN, QR-DQN, C51, Rainbow, SARSA and Expected SARSA run with their targets and
value heads, in the Python loop and inside the compiled loops (kerasrl.compiled).

    QLearner.round    any due target sync, the TD targets, the head's loss and an Adam step per
                      batch (with noisy layers, fresh noise for the online and the target
                      network at every step)
    QLearner.train    the round on numpy batches, in the calls `round_parts` says
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import numpy as np
from keras import ops
from keras import tree

from kerasrl import backend
from kerasrl.agents.learner import UNROLLED_STEPS_PER_CALL, Learner, unrolled_steps
from kerasrl.agents.state_arrays import with_model_level
from kerasrl.buffers import frames_last
from kerasrl.config import DQNConfig
from kerasrl.heads import ValueHead, head_spec
from kerasrl.layers import draw_noise, with_noise
from kerasrl.losses import double_q_target, max_q_target
from kerasrl.optim import Adam
from kerasrl.policies import forward_fn, greedy_fn

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
        # A target that reads the target network's Q-values at s too (M-DQN's log-policy).
        self.reads_current_q = getattr(target_fn, "reads_current_q", False)
        # Noisy networks (NoisyDense layers): noise drawn per acting and per gradient step.
        self.noisy = bool(self.noise_slots["q"])
        # Whether acting and training rounds take random inputs (`acting_noise`, `round_noise`):
        # a noisy network's noise, IQN's fractions.
        self.random_inputs = self.noisy
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
    def _targets(self, state, batch, noise=None):
        """TD targets from the target weights, in inference mode (with noisy layers: the target
        network with its own noise, the online one with the step's online noise)."""
        noise = noise or {}
        next_obs = batch["next_observations"]
        if self.reads_current_q:
            batch = {**batch, "current_q_target": self.apply(
                "q", None, state, batch["observations"], target=True, noise=noise.get("target"))}
        next_q_target = self.apply("q", None, state, next_obs, target=True,
                                   noise=noise.get("target"))
        next_q_online = (self.apply("q", state["params"], state, next_obs,
                                    noise=noise.get("online"))
                         if self.needs_online_next else None)
        return self.target_fn(next_q_target, next_q_online, batch)

    def _gradient_step(self, state, batch, learning_rate, targets=None, noise=None):
        if targets is None:
            targets = self._targets(state, batch, noise)

        def td_objective(params):
            """The head's loss of the online weights in training mode (batch norm, dropout
            active), and its priorities (DQN: the TD errors)."""
            outputs, non_trainable = self._online_outputs(params, state, batch["observations"],
                                                          noise)
            loss, td_errors = self.head.loss(self.head.at_actions(outputs, batch["actions"]),
                                             targets, batch["weights"])
            return loss, ({"q": non_trainable}, td_errors)

        state, loss, td_errors = self.descend(state, "q", td_objective, learning_rate,
                                              updates_non_trainable=True)
        return {**state, "step": state["step"] + 1}, loss, td_errors

    def _online_outputs(self, params, state, observations, noise):
        """(outputs, non-trainable state) of the online weights `params` in training mode, with
        the step's online noise: what the head's `at_actions` reads."""
        return self.apply("q", params, state, observations, training=True, returns_state=True,
                          noise=None if noise is None else noise["online"])

    def _round_targets(self, state, batches):
        """The TD targets of every step of a round (G, B, ...) from one forward pass over all G * B
        next observations: the target weights do not change within a round, and one large matrix
        product runs faster than G small ones."""
        n_steps, batch_size = batches["actions"].shape
        flat = tree.map_structure(
            lambda x: ops.reshape(x, (n_steps * batch_size, *x.shape[2:])), batches)
        targets = self._targets(state, flat)
        return ops.reshape(targets, (n_steps, batch_size, *targets.shape[1:]))

    def round(self, state, batches, learning_rate, target_tau=None, noise=None):
        """One training round, a pure function of `state` (this learner's layout) and tensor
        `batches` (G, B, ...): sync the target by `target_tau` (1: copy, 0 or None: no sync), then
        one gradient step per leading row. `noise` (noisy layers only, `round_noise`): {"online":,
        "target":} lists of (G, size) noise, a row per step. Returns (state, mean loss, TD errors
        (G, B)). What `train` compiles, and loops compiled whole (kerasrl.compiled) call inside
        their own call: run as the parts `round_parts(G)` gives, the sync with the first, it is
        `train` bit for bit."""
        if target_tau is not None:
            state = self.soft_update(state, target_tau)
        # With the online network in the target (Double DQN, Expected SARSA) each step needs the
        # weights of the step before, and with noisy layers each step its own target noise;
        # otherwise all targets are known before the first step.
        per_step = self.needs_online_next or noise is not None
        all_targets = None if per_step else self._round_targets(state, batches)

        def step(i, state):
            batch = tree.map_structure(lambda x: x[i], batches)
            targets = None if all_targets is None else all_targets[i]
            step_noise = None if noise is None else tree.map_structure(lambda x: x[i], noise)
            return self._gradient_step(state, batch, learning_rate, targets, step_noise)

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

    def action_values(self, state, observations, noise=None):
        """Action values (B, A) of the online weights in `state` (the head's, from the network's
        outputs) for float32 `observations`, in inference mode (with `noise`, for noisy layers):
        acting inside a compiled loop."""
        return self.head.action_values(self.apply("q", state["params"], state, observations,
                                                  noise=noise))

    def greedy(self, state, observations, noise=None):
        """Greedy actions (B,) int32 of `action_values`."""
        return ops.cast(ops.argmax(self.action_values(state, observations, noise), axis=-1),
                        "int32")

    def round_noise(self, rng: np.random.Generator, n_steps: int, batch_size: int | None = None):
        """Independent noise for the online and the target network at each of `n_steps` gradient
        steps (of `batch_size` samples), drawn from `rng` (`round`'s and `train`'s `noise`);
        None without noisy layers."""
        if not self.noisy:
            return None
        drawn = draw_noise(self.noise_slots["q"], rng, 2 * n_steps)  # one draw: online rows first
        return {"online": [d[:n_steps] for d in drawn], "target": [d[n_steps:] for d in drawn]}

    def acting_noise(self, rng: np.random.Generator, n_observations: int = 1):
        """Noise for one acting step on `n_observations` (shared by them), drawn from `rng`; None
        without noisy layers."""
        return draw_noise(self.noise_slots["q"], rng) if self.noisy else None

    # -- host side ----------------------------------------------------------------------------
    def train(self, batches: dict[str, np.ndarray], learning_rate: float, target_tau: float,
              frames_first: bool = False, noise=None):
        """Run one round on numpy `batches` (G, B, ...), the target sync with its first part.
        `frames_first`: the observations are stacks of frames (G, B, K, H, W) as a frame replay
        buffer gathers them (uint8), put frames last and made float32 on this learner's device.
        `noise`: `round_noise`'s, with noisy layers. Returns (mean loss, TD errors (G, B))."""
        learning_rate, parts = np.float32(learning_rate), self.round_parts(len(batches["actions"]))
        results = []
        with self.on_device():
            if frames_first:
                batches = {**batches, **self._frames_last(
                    backend.feed({key: batches[key] for key in ("observations", "next_observations")}))}
            for start, stop in parts:  # one part: every round of a per-step setting
                chunk = batches if len(parts) == 1 else {k: v[start:stop] for k, v in batches.items()}
                noisy = () if noise is None else (backend.feed(tree.map_structure(
                    lambda x: x[start:stop], noise)),)
                self.state, loss, td_errors = self._train_round(
                    self.state, backend.feed(chunk), learning_rate,
                    np.float32(target_tau if start == 0 else 0.0), *noisy)
                results.append((loss, td_errors))
        losses, td_errors = zip(*backend.to_numpy(results))
        if len(parts) == 1:
            return float(losses[0]), td_errors[0]
        weights = [stop - start for start, stop in parts]
        return float(np.average(losses, weights=weights)), np.concatenate(td_errors)

    def q_values(self, observations: np.ndarray, noise=None) -> np.ndarray:
        """Online action values (B, A) (the head's) for float32 observations, in inference mode;
        `noise`: `acting_noise`'s (None: the mean network)."""
        with backend.inference(), self.acting_scope():
            q = self._forward(*self._acting_call(observations, noise))
        return np.asarray(backend.to_numpy(q))

    def greedy_actions(self, observations: np.ndarray, noise=None) -> np.ndarray:
        """Argmax of the online action values (B,) for float32 observations: acting, once per env
        step; `noise` as `q_values`'."""
        with backend.inference(), self.acting_scope():
            actions = self._greedy(*self._acting_call(observations, noise))
        return backend.to_numpy(actions)

    def _acting_call(self, observations, noise):
        """The Q-network's (trainable, non-trainable) acting weights, with `noise` in its noisy
        layers' slots, and its inputs, `observations` fed. Call inside `acting_scope()`."""
        params, non_trainable = self.acting_weights()
        if noise is not None:
            non_trainable = {"q": with_noise(non_trainable["q"], self.noise_slots["q"],
                                             backend.feed(list(noise)))}
        return params["q"], non_trainable["q"], backend.feed(observations)

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
