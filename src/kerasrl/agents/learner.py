"""The learner contract: explicit state, pure losses, one compiled round, explicit weight flow.

A learner holds the training state of one algorithm as a dict of backend tensors:

    state = {
        "params":               {name: [trainable arrays]},      one entry per Keras model, plus
                                                                  plain parameters without a model
                                                                  (SAC's log alpha, PPO's log std)
        "non_trainable":        {name: [non-trainable arrays]},  (batch-norm statistics, seeds)
        "target_params":        {name: [arrays]},                for the models that have a target
        "target_non_trainable": {name: [arrays]},                their non-trainable state
        "opt":                  {group: Adam state},             one optimizer per parameter group
        "step":                 int32 scalar,                    gradient steps taken (TD3's delay)
    }

An agent writes its gradient step as a pure function `state, batch -> state, losses` from pure
`keras.ops` losses (kerasrl.losses), using `apply` (a model with given weights) and `descend` (one
Adam step of one group on the gradient of a loss), and the learner runs a whole round of such
steps as one compiled call (`compile_round` / `run_round`, with `kerasrl.backend`'s compile,
value_and_grad and fori_loop: nothing here is backend-specific).

Weights reach the Keras models through one public call, `push_weights()`; checkpoints use
`arrays()` / `load_arrays()`. The target weights are second sets of weights for the same model,
used through `models.stateless_apply` and never differentiated.

Devices: a learner lives on the device of the agent that makes it (`kerasrl.devices.active()`
when it is made): its state is made and updated there, and the Python loop acts through
`acting_weights()`, which on a GPU machine may be a host copy of the weights (docs/gpu.md).

Every agent runs on this class: DDPG, TD3 and SAC directly, the value-based agents through
`dqn.QLearner` (one Q-network and its target) and PPO through `ppo.PPOLearner` (actor,
critic, log std).
"""

from __future__ import annotations

from collections.abc import Callable

import keras
import numpy as np
from keras import ops
from keras import tree

from kerasrl import backend, devices
from kerasrl.agents.base import flatten_arrays, unflatten_arrays, variable_values
from kerasrl.backend.layers import slow_in_loops
from kerasrl.layers import noise_slots, with_noise
from kerasrl.models import stateless_apply
from kerasrl.optim import Adam, copy_state, polyak

# A round longer than this runs as several calls of fully unrolled steps where loops are Python
# anyway (PyTorch), and for networks with convolutions: XLA on the CPU runs a convolution inside a
# loop body about 10x slower than outside one, while an MLP runs as fast in a rolled loop as
# unrolled and compiles five times sooner (a 128-step round of the RL-Zoo CartPole net: 1 s
# against 5 s). Elsewhere a round is one call with a rolled loop.
UNROLLED_STEPS_PER_CALL = 16


def unrolled_steps(models) -> bool:
    """Whether gradient steps through `models` (Keras models) run unrolled rather than in a
    compiled loop: where loops are Python anyway (PyTorch), and on XLA's CPU backend (JAX,
    TensorFlow) when a model has layers whose gradient is slow inside its loops (Keras's
    convolutions, `backend.layers.slow_in_loops`). The value learners' rounds, PPO's update and
    the compiled engine's choice of loop all ask this one question."""
    return not backend.COMPILED_LOOPS or (backend.on_cpu() and bool(slow_in_loops(models)))


class Learner:
    """The training state of some Keras models, their targets and optimizers.

    Args:
        models: name -> built Keras model (e.g. {"actor": ..., "critic_0": ..., "critic_1": ...}).
        targets: names of the models that have target weights (initially equal to the online ones).
        optimizers: group name -> (Adam, names of the models or plain parameters it updates).
        parameters: name -> list of numpy arrays: trainable parameters without a Keras model.
    """

    def __init__(self, models: dict[str, keras.Model], *, targets=(),
                 optimizers: dict[str, tuple[Adam, tuple[str, ...]]],
                 parameters: dict[str, list[np.ndarray]] | None = None):
        self.models = dict(models)
        self.targets = tuple(targets)
        self.optimizers = dict(optimizers)
        self.parameters = {k: [np.asarray(v, np.float32) for v in vs]
                           for k, vs in (parameters or {}).items()}
        unknown = [n for _, names in self.optimizers.values() for n in names
                   if n not in self.models and n not in self.parameters]
        if unknown or any(t not in self.models for t in self.targets):
            raise ValueError(f"Learner: unknown model or parameter names {unknown or self.targets}.")
        # The agent's placement, or the host CPU for small networks under "auto" (kerasrl.devices).
        self.placement = devices.active().for_learner(self.models.values())
        # Where the Python loop acts (None: where the state lives).
        self.acting_device = self.placement.acting_device(self.models.values())
        # Where each model's NoisyDense layers keep their noise (kerasrl.layers; () for none).
        self.noise_slots = {name: noise_slots(m) for name, m in self.models.items()}
        self.reset_from_models()

    @property
    def state(self) -> dict:
        """The training state (see the module docstring)."""
        return self._state

    @state.setter
    def state(self, value: dict) -> None:
        self._state = value
        self._acting = None  # the host copy of the weights, if any, is out of date

    def on_device(self):
        """The scope of the device the state lives on (see `kerasrl.devices`)."""
        return self.placement.scope()

    def acting_scope(self):
        """The scope of the device the Python loop acts on, where observations are fed (nothing
        where that is the framework's default device)."""
        return devices.scope(self.acting_device or self.placement.learning)

    def acting_weights(self) -> tuple[dict, dict]:
        """(trainable, non-trainable) weights of the models, {name: [arrays]}, to act from: the
        state's own, or, where the Python loop acts on another device (`acting_device`), a copy
        there, made once per change of the state. Call inside `acting_scope()`."""
        if self._acting is None:
            state = self._state
            weights = ({name: state["params"][name] for name in self.models},
                       {name: state["non_trainable"][name] for name in self.models})
            if self.acting_device is not None:
                with self.acting_scope():
                    weights = backend.to_tensors(backend.to_numpy(weights))
            self._acting = weights
        return self._acting

    def reset_from_models(self) -> None:
        """Start from the models' current weights: targets equal to them, optimizers fresh.

        Values are copied out of the models (through numpy) so that donated buffers never alias
        the models' own.
        """
        with self.on_device():
            self.state = self._initial_state()

    def _initial_state(self) -> dict:
        params = {name: variable_values(m.trainable_variables) for name, m in self.models.items()}
        states = {name: variable_values(m.non_trainable_variables) for name, m in self.models.items()}
        return backend.to_tensors(self.fresh_state(params, states))

    def fresh_state(self, params: dict, non_trainable: dict, copies: int | None = None) -> dict:
        """A training state (numpy) that starts from the given weights of the models ({name:
        [arrays]}, every model): targets equal to them, optimizers at their start, step 0. With
        `copies`, every given array has a leading axis of that many independent copies (a
        compiled loop's seeds) and so has every array of the state.
        """
        def first(arrays):
            return arrays if copies is None else [a[0] for a in arrays]

        def stacked(arrays):
            return arrays if copies is None else [np.stack([a] * copies) for a in arrays]

        params = {name: [np.array(w) for w in params[name]] for name in self.models}
        params.update({name: stacked([v.copy() for v in vs]) for name, vs in self.parameters.items()})
        states = {name: [np.array(w) for w in non_trainable[name]] for name in self.models}
        state = {
            "params": params,
            "non_trainable": states,
            "target_params": {n: [w.copy() for w in params[n]] for n in self.targets},
            "target_non_trainable": {n: [s.copy() for s in states[n]] for n in self.targets},
            "step": np.zeros(() if copies is None else (copies,), np.int32),
            "opt": {},
        }
        for group, (adam, names) in self.optimizers.items():
            start = backend.to_numpy(adam.init(backend.to_tensors(
                first(self._group(params, names)))))
            state["opt"][group] = start if copies is None else tree.map_structure(
                lambda x: np.stack([x] * copies), start)
        return state

    def load_state(self, state: dict) -> None:
        """Continue from `state` (numpy or tensors, this learner's layout: what another loop of
        the same algorithm left, e.g. a compiled loop), placed on this learner's device."""
        try:
            tree.assert_same_structure(state, self.state)
        except (TypeError, ValueError):
            raise ValueError(f"{type(self).__name__}.load_state: the state's layout differs from "
                             "this learner's; give it a state of the same algorithm and "
                             "models.") from None
        with self.on_device():
            self.state = backend.to_tensors(backend.to_numpy(state))

    # -- inside a compiled step ---------------------------------------------------------------
    @staticmethod
    def _group(params: dict, names) -> list:
        return [p for name in names for p in params[name]]

    def apply(self, name: str, params: dict, state, inputs, *, target: bool = False,
              training: bool = False, returns_state: bool = False, noise=None):
        """The model `name` on `inputs` with the weights in `params` (or its target weights);
        `returns_state`: (outputs, its non-trainable state after the call), for a forward pass
        in training mode whose batch-norm statistics the step keeps (`descend`'s
        `updates_non_trainable`). `noise`: the noise of its NoisyDense layers for this pass (one
        array per `noise_slots[name]`; None: none, the mean network); the state keeps zeros."""
        if target:
            weights, non_trainable = state["target_params"][name], state["target_non_trainable"][name]
        else:
            weights, non_trainable = params[name], state["non_trainable"][name]
        slots = self.noise_slots[name] if noise is not None else ()
        outputs, new_state = stateless_apply(self.models[name], weights,
                                             with_noise(non_trainable, slots, noise), inputs,
                                             training)
        if returns_state:
            new_state = with_noise(new_state, slots, [non_trainable[i] for i, _ in slots])
            return outputs, new_state
        return outputs

    def descend(self, state, group: str, loss_fn: Callable, learning_rate, *args, enabled=None,
                updates_non_trainable: bool = False):
        """One Adam step of the optimizer `group` on `loss_fn(params, *args) -> (loss, aux)`,
        differentiated with respect to that group's parameters only (`params` is the whole
        {name: arrays} dict, the group's entries being the ones differentiated).

        `enabled` (a boolean scalar tensor, or None for always) keeps the old parameters,
        optimizer state (and non-trainable state) when false: TD3's delayed actor update inside
        a compiled loop.
        `updates_non_trainable`: `aux` is `(non_trainable, aux)`, the models' non-trainable state
        after a forward pass in training mode (batch-norm statistics), which replaces the state's.
        Returns (state, loss, aux).
        """
        adam, names = self.optimizers[group]
        sizes = [len(state["params"][n]) for n in names]

        def group_loss(flat, *loss_args):
            params, i = dict(state["params"]), 0
            for name, size in zip(names, sizes):
                params[name] = list(flat[i:i + size])
                i += size
            return loss_fn(params, *loss_args)

        flat = self._group(state["params"], names)
        (loss, aux), grads = backend.value_and_grad(group_loss)(flat, *args)
        new_flat, opt, _ = adam.update(grads, state["opt"][group], flat, learning_rate)
        if enabled is not None:
            new_flat = [ops.where(enabled, new, old) for new, old in zip(new_flat, flat)]
            opt = tree.map_structure(lambda new, old: ops.where(enabled, new, old),
                                     opt, state["opt"][group])
        params, i = dict(state["params"]), 0
        for name, size in zip(names, sizes):
            params[name] = new_flat[i:i + size]
            i += size
        state = {**state, "params": params, "opt": {**state["opt"], group: opt}}
        if updates_non_trainable:
            non_trainable, aux = aux
            if enabled is not None:
                non_trainable = tree.map_structure(
                    lambda new, old: ops.where(enabled, new, old), non_trainable,
                    {name: state["non_trainable"][name] for name in non_trainable})
            state["non_trainable"] = {**state["non_trainable"], **non_trainable}
        return state, loss, aux

    def soft_update(self, state, tau, names=None):
        """Polyak-average the targets of `names` (all by default) towards the online weights."""
        names = self.targets if names is None else names
        target, target_states = dict(state["target_params"]), dict(state["target_non_trainable"])
        for name in names:
            target[name] = polyak(state["params"][name], target[name], tau)
            target_states[name] = copy_state(state["non_trainable"][name], target_states[name], tau)
        return {**state, "target_params": target, "target_non_trainable": target_states}

    # -- running rounds -----------------------------------------------------------------------
    def compile_round(self, step_fn: Callable, loss_names) -> Callable:
        """The compiled round of `step_fn(state, batch, *scalars) -> (state, {name: scalar})`
        (`loss_names` its keys): one gradient step per leading row of `batches` (G, B, ...), the
        losses averaged over the round."""
        names = tuple(loss_names)

        def round_fn(state, batches, *scalars):
            n_steps = tree.flatten(batches)[0].shape[0]

            def step(i, state):
                return step_fn(state, tree.map_structure(lambda x: x[i], batches), *scalars)

            if n_steps == 1:
                return step(0, state)
            zeros = {name: ops.zeros((), "float32") for name in names}

            def body(i, carry):
                state, sums = carry
                state, losses = step(i, state)
                return state, {name: sums[name] + losses[name] for name in names}

            state, sums = backend.fori_loop(0, n_steps, body, (state, zeros),
                                            unroll=n_steps if not backend.COMPILED_LOOPS else 1)
            return state, {name: sums[name] / n_steps for name in names}

        return backend.compile(round_fn, donate_state=True)

    def run_round(self, compiled: Callable, batches: dict[str, np.ndarray],
                  *scalars) -> dict[str, float]:
        """Run `compiled` (from `compile_round`) on numpy `batches` (G, B, ...): one call, or
        calls of UNROLLED_STEPS_PER_CALL steps where loops are Python. Returns mean losses."""
        n_steps = len(next(iter(batches.values())))
        per_call = n_steps if backend.COMPILED_LOOPS else UNROLLED_STEPS_PER_CALL
        scalars = tuple(np.float32(s) for s in scalars)
        results, weights = [], []
        with self.on_device():
            for start in range(0, n_steps, per_call):
                chunk = {k: v[start:start + per_call] for k, v in batches.items()}
                self.state, losses = compiled(self.state, backend.feed(chunk), *scalars)
                results.append(losses)
                weights.append(min(per_call, n_steps - start))
        results = backend.to_numpy(results)
        return {name: float(np.average([r[name] for r in results], weights=weights))
                for name in results[0]}

    # -- weights out and in -------------------------------------------------------------------
    def push_weights(self) -> None:
        """Write the learner's current weights into the Keras models: the one call through which
        weights leave the learner (copies: buffer donation never reaches the models)."""
        params = backend.to_numpy(self.state["params"])
        states = backend.to_numpy(self.state["non_trainable"])
        with self.on_device():  # JAX: an assigned value goes where the scope says
            for name, model in self.models.items():
                for variable, value in zip(model.trainable_variables, params[name]):
                    variable.assign(np.array(value))
                for variable, value in zip(model.non_trainable_variables, states[name]):
                    variable.assign(np.array(value))

    def parameter(self, name: str) -> list[np.ndarray]:
        """A plain parameter's current value (numpy copies), e.g. SAC's log alpha."""
        return [np.array(v) for v in backend.to_numpy(self.state["params"][name])]

    def weights(self, name: str, state: dict | None = None) -> list[np.ndarray]:
        """The online weights of model `name` (trainable, then non-trainable) in `state` (default:
        this learner's own), as numpy."""
        state = self.state if state is None else state
        return [np.array(w) for w in backend.to_numpy(
            list(state["params"][name]) + list(state["non_trainable"][name]))]

    def target_weights(self, name: str) -> list[np.ndarray]:
        """The target weights of model `name` (trainable, then non-trainable), as numpy."""
        return [np.array(w) for w in backend.to_numpy(
            self.state["target_params"][name] + self.state["target_non_trainable"][name])]

    def arrays(self) -> dict[str, np.ndarray]:
        """The whole state as flat numpy arrays (for checkpoints and parity checks)."""
        return flatten_arrays("learner", backend.to_numpy(self.state))

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore from `arrays()` output (shapes checked), then push the weights to the models."""
        with self.on_device():
            self.state = backend.to_tensors(
                unflatten_arrays("learner", arrays, backend.to_numpy(self.state)))
        self.push_weights()
