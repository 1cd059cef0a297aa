"""The one place where a model is built, checked and owned: the default networks, critics and
actor-critics, and users' models alike.

`build_model` (a model of observations) and `build_critic` (of observations and actions) take a
Keras model, a function `(observation_space, action_space) -> keras.Model`, or None for the
default that kerasrl.networks builds. Either way the model is called once so that its weights
exist, its output is checked where a mistake is easiest to read, it is checked to run the way
kerasrl drives it (`stateless_apply`, in both modes and traced), its initial weights are drawn from
the agent's seed, and it is claimed: which models an agent owns is one record here (`claim`,
`check_unclaimed`, `is_claimed`), kept beside the models, never written onto a user's model. A
recurrent actor-critic is checked by `check_recurrent_model`. A user's model for a Dict or Tuple
observation space is adapted to the flat vector kerasrl carries (`adapt_model`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import gymnasium as gym
import keras
import numpy as np

from kerasrl import backend
from kerasrl.backend.layers import per_sample, slow_in_loops, walk_layers
from kerasrl.initializers import seed_initial_weights, seeded_build
from kerasrl.model_checks import warn_bounded_output, window_hint
from kerasrl.networks import (SplitLeaves, default_network, dueling, is_image_space, mlp_torso,
                              nature_cnn_torso, split_layer)
from kerasrl.spaces import has_named_leaves, structure_of


def takes_flat_observations(model: keras.Model) -> bool:
    """True for a model that splits kerasrl's flat Dict / Tuple observations itself: it holds a
    `SplitLeaves` layer (the default networks, an adapted user's model, or one loaded from a
    checkpoint)."""
    return any(isinstance(layer, SplitLeaves)
               for layer in walk_layers(model))


def adapt_model(model: keras.Model, observation_space: gym.Space) -> keras.Model:
    """A user's model for a Dict or Tuple observation space, taking the flat vector kerasrl carries:
    the model itself receives a dict {leaf name: (B, *leaf shape)} (a functional model's inputs
    are matched by name). Any other space (a Discrete one included: its model takes the one-hot
    vector), or a model that takes the flat vector already (`takes_flat_observations`): `model`
    unchanged."""
    if not has_named_leaves(observation_space) or takes_flat_observations(model):
        return model
    inputs = keras.Input(shape=tuple(observation_space.shape), name="observation")
    outputs = model(split_layer(observation_space)(inputs))
    claim(model)  # its weights are the adapted model's
    return keras.Model(inputs, outputs, name=f"{model.name}_on_leaves")


def adapt_critic(critic: keras.Model, observation_space: gym.Space, action_dim: int
                  ) -> keras.Model:
    """`adapt_model` for a critic [observations, actions] -> Q: it receives [leaves dict, actions]."""
    if not has_named_leaves(observation_space) or takes_flat_observations(critic):
        return critic
    observations = keras.Input(shape=tuple(observation_space.shape), name="observation")
    actions = keras.Input(shape=(action_dim,), name="action")
    outputs = critic([split_layer(observation_space)(observations), actions])
    claim(critic, "critic")  # its weights are the adapted critic's
    return keras.Model([observations, actions], outputs, name=f"{critic.name}_on_leaves")


def stateless_apply(model: keras.Model, params, non_trainable, inputs, training: bool):
    """`model(inputs, training=training)` with the weights `params` and `non_trainable`, without
    side effects. Returns (outputs, the new non-trainable values (batch-norm statistics, dropout
    seed state)).

    Keras's `stateless_call` hands `training=` straight to `call()`, which raises for a model
    written `def call(self, inputs)`. Going through `Layer.__call__` inside a `StatelessScope`
    passes `training` only to a `call()` that accepts it, and still puts nested layers (Dropout,
    BatchNormalization) in the right mode when the model's own `call()` does not take it.
    """
    mapping = list(zip(model.trainable_variables, params))
    mapping += list(zip(model.non_trainable_variables, non_trainable))
    with keras.StatelessScope(state_mapping=mapping) as scope:
        piece = batch_piece(model)  # None for most models: no look at the inputs then
        size = None if piece is None else keras.tree.flatten(inputs)[0].shape[0]
        if size is None or size <= piece:
            outputs = model(inputs, training=training)
        else:  # the same function, faster where a backend's convolutions want small batches
            pieces = [model(keras.tree.map_structure(lambda x: x[start:start + piece], inputs),
                            training=training) for start in range(0, size, piece)]
            outputs = keras.tree.map_structure(lambda *parts: keras.ops.concatenate(parts, 0),
                                               *pieces)
    return outputs, [scope.get_current_value(v) for v in model.non_trainable_variables]


_BATCH_PIECES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def batch_piece(model: keras.Model) -> int | None:
    """The largest batch `stateless_apply` runs `model` on in one piece, or None (any batch):
    `backend.convolution_batch_limit()` (JAX on a CPU: 64) for a model with Keras convolutions
    that maps each sample on its own (`backend.layers.per_sample`: no batch statistics, no noise,
    no user-written `call`), whose outputs are then the same whole or in pieces."""
    if model not in _BATCH_PIECES:
        limit = backend.convolution_batch_limit() if backend.convolution_batch_limit else None
        _BATCH_PIECES[model] = (limit if limit and slow_in_loops([model]) and per_sample(model)
                                else None)
    return _BATCH_PIECES[model]


def _error_text(error: BaseException, limit: int) -> str:
    """An exception as one line (Keras wraps the user's error in lines and terminal colours)."""
    text = " ".join(str(error).replace("\x1b[1m", "").replace("\x1b[0m", "").split())
    return f"{type(error).__name__}: {text[:limit]}"


def check_drivable(model: keras.Model, observation_space: gym.Space, role: str = "model") -> None:
    """Raise, naming the model's class and the fix, if kerasrl cannot drive `model`.

    kerasrl calls a model functionally (its weights passed in, in training and in inference mode)
    and inside compiled functions; a `call()` that reads tensor values in Python cannot be
    compiled. Checked here, when the agent is made, not at the first action or update.
    """
    name = type(model).__name__
    batch = dummy_observation(observation_space, batch_size=2)
    params = [v.value for v in model.trainable_variables]
    states = [v.value for v in model.non_trainable_variables]
    for training in (False, True):
        try:
            stateless_apply(model, params, states, batch, training)
        except Exception as error:  # the user's model, any error: say where it came from
            raise ValueError(
                f"The {role} ({name}) fails when called with training={training} on a batch of "
                f"shape {batch.shape}: {_error_text(error, 500)}. "
                f"kerasrl calls it as model(observations, training=...); its call() may take "
                f"`training` or not, but must not change its weights or layers while called."
            ) from error
    try:
        backend.check_traceable(
            lambda obs: stateless_apply(model, params, states, obs, False)[0], batch)
    except Exception as error:
        raise ValueError(
            f"The {role} ({name}) cannot be traced, so it cannot run inside a compiled step: "
            f"{_error_text(error, 300)}. Its call() "
            f"probably reads tensor values in Python (an `if` on a tensor, .numpy(), float(x)): "
            f"write such choices with keras.ops.where or keras.ops.cond."
        ) from error


def dummy_observation(observation_space: gym.Space, batch_size: int = 1) -> np.ndarray:
    """A zero batch with the space's shape, as float32 (the dtype every model receives)."""
    return np.zeros((batch_size, *observation_space.shape), dtype=np.float32)


# -- ownership: which models an agent owns ------------------------------------------------------
_OWNED: weakref.WeakSet = weakref.WeakSet()
"""Every model an agent owns. Weak: a model no longer used anywhere leaves it. Kept here so that a
user's model is never written on."""


def _recorded(models: weakref.WeakSet, model) -> bool:
    try:
        return model in models
    except TypeError:  # not weak-referenceable: not a model kerasrl could have recorded
        return False


def is_claimed(model) -> bool:
    """True once an agent owns `model` (its weights are that agent's)."""
    return _recorded(_OWNED, model)


_BUILT_IN: weakref.WeakSet = weakref.WeakSet()
"""The models kerasrl built itself (an agent's default network): every weight of theirs gets a
gradient (tests/test_diagnostics.py), so a new agent's gradient check skips them."""


def built_in(model):
    """Record that kerasrl built `model` (not the user); returns it."""
    _BUILT_IN.add(model)
    return model


def is_built_in(model) -> bool:
    """True for a model `built_in` recorded."""
    return _recorded(_BUILT_IN, model)


_RESTORED: weakref.WeakSet = weakref.WeakSet()
"""The models a checkpoint gave back: an agent's whole network as it trained it, never a torso
that the agent's config would wrap again (dueling or noisy streams)."""


def restored(model):
    """Record that `model` is a whole network from a checkpoint; returns it."""
    _RESTORED.add(model)
    return model


def is_restored(model) -> bool:
    """True for a model `restored` recorded."""
    return _recorded(_RESTORED, model)


def check_unclaimed(model, role: str = "model") -> None:
    """Raise, naming the fix, if another agent already owns `model`: two agents training one set
    of weights would each undo the other's updates."""
    if is_claimed(model):
        raise ValueError(
            f"This Keras model already belongs to another kerasrl agent. An agent owns its "
            f"model's weights; pass a new model, or a function that builds one, for the {role}.")


def claim(model, role: str = "model"):
    """Record that an agent owns `model` from now on (ValueError if another does); returns it."""
    check_unclaimed(model, role)
    _OWNED.add(model)
    return model


def call_builder(builder, observation_space: gym.Space, action_space: gym.Space, what: str):
    """`builder(observation_space, action_space)` (the observation space as the user's model sees
    it: `spaces.structure_of`), refused with the fix when `builder` cannot take those two
    arguments (a `lambda: MyNet()`), rather than a TypeError from inside kerasrl."""
    import inspect

    try:
        inspect.signature(builder).bind(None, None)
    except TypeError:
        raise TypeError(
            f"{what} is called with (observation_space, action_space) and returns a new "
            f"keras.Model, but {builder!r} does not take those two arguments. Write it as "
            f"`lambda observation_space, action_space: MyNet()` (or a function of both).") from None
    except ValueError:  # no signature to read (some builtins): call it and see
        pass
    try:
        return builder(structure_of(observation_space), action_space)
    except (ValueError, TypeError) as error:
        # Gymnasium's Discrete.n is a numpy integer, which Keras layers refuse with "expected a
        # positive integer. Received: units=2": a message that shows an integer.
        if "integer" in str(error) and isinstance(getattr(action_space, "n", None), np.integer):
            raise type(error)(
                f"{what} failed: {str(error).rstrip('.')}. Gymnasium's `action_space.n` is a "
                f"numpy integer ({type(action_space.n).__name__}), which Keras layers do not "
                f"take as a size: write `int(action_space.n)`.") from error
        raise


def build_model(
    model: keras.Model | Callable | None,
    observation_space: gym.Space,
    n_outputs: int | tuple[int, ...],
    *,
    action_space: gym.Space | None = None,
    default: Callable[[], keras.Model] | None = None,
    role: str = "model",
    seed: int | None = None,
    stream: str | None = None,
) -> keras.Model:
    """Return a built Keras model that maps (B, *obs_shape) float32 to (B, n_outputs), or to
    (B, *n_outputs) for a tuple (a distributional value head's (A, N)).

    `model` is a Keras model, a callable `(observation_space, action_space) -> keras.Model`, or
    None for `default()`. The model is called once on a dummy batch so that its weights exist, and
    its output shape is checked here, where a mistake is easiest to read. With a `seed`, its initial
    weights are then drawn from that seed with numpy (kerasrl.initializers), the same on every
    backend; `stream` (default: `role`) keeps an agent's several models apart.
    """
    user_model = model is not None
    if model is None:
        # Its weights are all drawn again from the seed below: Keras's own draw is skipped.
        model = built_in(seeded_build(
            default if default is not None else
            lambda: default_network(observation_space, n_outputs), seed))
    elif not isinstance(model, keras.Model):
        if not callable(model):
            raise TypeError(
                f"{role} must be a keras.Model, a callable (observation_space, action_space) -> "
                f"keras.Model, or None; got {type(model).__name__}."
            )
        builder = model
        built = seeded_build(lambda: call_builder(builder, observation_space, action_space,
                                                  f"the {role} builder"), seed)
        if not isinstance(built, keras.Model):
            raise TypeError(
                f"The {role} builder {getattr(model, '__name__', model)!r} returned "
                f"{type(built).__name__}, not a keras.Model."
            )
        model = built
    check_unclaimed(model, role)
    if user_model:
        model = adapt_model(model, observation_space)
    batch = dummy_observation(observation_space, batch_size=2)
    try:
        out = model(batch, training=False)
    except Exception as error:  # the user's model, any error: say where it came from
        raise ValueError(
            f"The {role} could not be called on a batch of observations of shape {batch.shape} "
            f"(float32): {type(error).__name__}: {error}{window_hint(model, observation_space)}"
        ) from error
    shape = tuple(out.shape)
    expected = (int(n_outputs),) if np.ndim(n_outputs) == 0 else tuple(int(n) for n in n_outputs)
    if shape != (2, *expected):
        last = (f"Dense({expected[0]})" if len(expected) == 1 else
                f"Dense({int(np.prod(expected))}) followed by Reshape({expected})")
        raise ValueError(
            f"The {role} must output (batch, {', '.join(map(str, expected))}) for this "
            f"environment, but it outputs {shape} for a batch of 2 observations of shape "
            f"{tuple(observation_space.shape)}. Make its last layer {last}."
        )
    if not model.trainable_variables:
        raise ValueError(f"The {role} ({type(model).__name__}) has no trainable weights.")
    if user_model:
        warn_bounded_output(model, role)
    check_drivable(model, observation_space, role)
    if seed is not None:
        seed_initial_weights(model, seed, stream or role)
    return claim(model, role)


def build_critic(critic, observation_space: gym.Space, action_space: gym.Space, *,
                 default: Callable[[], keras.Model], role: str = "critic",
                 seed: int | None = None, stream: str | None = None,
                 warn_output: bool = True, outputs: int = 1) -> keras.Model:
    """A built critic that maps [observations (B, *obs_shape), actions (B, action_dim)] float32 to
    (B, outputs) (a Q-value; TQC's quantiles): `critic` is a Keras model, a callable
    `(observation_space, action_space) -> keras.Model`, or None for `default()`. Checked here,
    when the agent is made; with a `seed`, its initial weights drawn from it with numpy as
    `build_model`'s. `warn_output=False` for the
    second critic of one user's spec (TD3's, SAC's): its last activation was warned of once."""
    user_critic = critic is not None
    if critic is None:
        critic = seeded_build(default, seed)
    elif not isinstance(critic, keras.Model):
        if not callable(critic):
            raise TypeError(f"{role} must be a keras.Model, a callable (observation_space, "
                            f"action_space) -> keras.Model, or None; got {type(critic).__name__}.")
        builder = critic
        critic = seeded_build(lambda: call_builder(builder, observation_space, action_space,
                                                   f"the {role} builder"), seed)
        if not isinstance(critic, keras.Model):
            raise TypeError(f"The {role} builder returned {type(critic).__name__}, not a keras.Model.")
    check_unclaimed(critic, role)
    action_dim = int(np.prod(action_space.shape))
    if user_critic:
        critic = adapt_critic(critic, observation_space, action_dim)
    observations = dummy_observation(observation_space, batch_size=2)
    actions = np.zeros((2, action_dim), dtype=np.float32)
    what = "Q-values" if outputs == 1 else f"{outputs} quantiles of the return"
    expected = (f"[observations (batch, {', '.join(map(str, observation_space.shape))}), "
                f"actions (batch, {action_dim})]")
    try:
        out = critic([observations, actions], training=False)
    except Exception as error:  # the user's model, any error: say where it came from
        raise ValueError(
            f"The {role} ({type(critic).__name__}) must take two inputs, {expected}, and return "
            f"{what} (batch, {outputs}); calling it on them failed: {_error_text(error, 400)}. "
            f"Build it with two keras.Input layers, e.g. kerasrl.networks.critic_network."
        ) from error
    if tuple(out.shape) != (2, outputs):
        raise ValueError(f"The {role} must output {what} of shape (batch, {outputs}) for {expected}, "
                         f"but it outputs {tuple(out.shape)} for a batch of 2. Make its last "
                         f"layer Dense({outputs}).")
    if not critic.trainable_variables:
        raise ValueError(f"The {role} ({type(critic).__name__}) has no trainable weights.")
    if user_critic and warn_output:
        warn_bounded_output(critic, role)
    if seed is not None:
        seed_initial_weights(critic, seed, stream or role)
    return claim(critic, role)


# -- recurrent actor-critics ---------------------------------------------------------------------
def recurrent_state_sizes(model: keras.Model) -> tuple[int, ...]:
    """The sizes of a recurrent model's states: its inputs after the observation, each (B, size)."""
    return tuple(int(x.shape[-1]) for x in model.inputs[1:])


def check_recurrent_model(model, observation_space: gym.Space, n_outputs: int,
                          role: str = "recurrent model") -> tuple[int, ...]:
    """Raise, saying what the contract is, unless `model` takes one step of a recurrent
    actor-critic: `[observation (B, *obs_shape), *states (B, size_i)] -> [policy (B, n_outputs),
    value (B, 1), *new states (B, size_i)]` (a functional Keras model, states in the same order
    in and out). Returns the state sizes."""
    contract = (f"A {role} is a functional keras.Model that takes one step: inputs [observation "
                f"(batch, {', '.join(map(str, observation_space.shape))}), state_1 (batch, size_1), "
                f"...] and outputs [policy (batch, {n_outputs}), value (batch, 1), new state_1 "
                f"(batch, size_1), ...], e.g. h, c = keras.layers.LSTMCell(units)(x, [h, c]); see "
                f"kerasrl.networks.recurrent_actor_critic and docs/recurrent.md.")
    if not isinstance(model, keras.Model) or not getattr(model, "inputs", None):
        raise ValueError(f"{contract} Got {type(model).__name__}, which is not a functional "
                         f"keras.Model with declared inputs.")
    if len(model.inputs) < 2 or any(len(x.shape) != 2 for x in model.inputs[1:]):
        shapes = [tuple(x.shape) for x in model.inputs]
        raise ValueError(f"{contract} This model's inputs are {shapes}: it takes no state "
                         f"(batch, size) after the observation.")
    sizes = recurrent_state_sizes(model)
    batch = [np.zeros((2, *observation_space.shape), np.float32)]
    batch += [np.zeros((2, size), np.float32) for size in sizes]
    try:
        outputs = model(batch, training=False)
    except Exception as error:
        raise ValueError(f"{contract} Calling it on zeros failed: {error}") from error
    shapes = [tuple(o.shape) for o in outputs] if isinstance(outputs, (list, tuple)) else None
    expected = [(2, n_outputs), (2, 1), *((2, size) for size in sizes)]
    if shapes is None or len(shapes) != len(expected) or shapes[0] != expected[0] \
            or shapes[1] not in ((2, 1), (2,)) or shapes[2:] != expected[2:]:
        raise ValueError(f"{contract} For a batch of 2 it outputs {shapes}, not {expected}.")
    if not model.trainable_variables:
        raise ValueError(f"The {role} ({type(model).__name__}) has no trainable weights.")
    return sizes


def dueling_q_network(torso, observation_space: gym.Space, action_space: gym.Space,
                      hidden_sizes=(64, 64)) -> keras.Model:
    """A dueling Q-network (DQN's `dueling=True`) on the user's `torso` (a model or a builder), or
    on the default torso (the Nature CNN for images, else an MLP of `hidden_sizes`)."""
    shape, n_actions = observation_space.shape, int(action_space.n)
    if torso is None:
        if is_image_space(observation_space):
            return built_in(dueling(nature_cnn_torso(observation_space), shape, n_actions))
        return built_in(dueling(mlp_torso(shape, hidden_sizes, observation_space=observation_space),
                                shape, n_actions))
    return dueling(resolve_torso(torso, observation_space, action_space), shape, n_actions)


def resolve_torso(torso, observation_space: gym.Space, action_space: gym.Space) -> keras.Model:
    """A user's torso (a model, or a builder `(observation_space, action_space) -> model`) as a
    model of the observations the agent feeds."""
    if not isinstance(torso, keras.Model):
        torso = call_builder(torso, observation_space, action_space, "the torso builder")
    return adapt_model(torso, observation_space)
