"""TensorFlow: functions compiled with XLA, gradients from `tf.GradientTape`.

Calling a `tf.function` costs about 170 us in Python before any op runs: it builds a trace type for
every argument (the learner state alone is some 30 tensors) and matches it against its traces; for
a small network that is more than the step itself. So `compile` traces through `tf.function` once
per input signature and then calls the traced (concrete) function directly with a flat list of
tensors: about 20 us a call. With `donate_state` the state also crosses in and out packed in one
buffer per dtype (`_PackedState`), since each output of a call costs about 2 us.

Measured on a 2-core CPU (4-64-64-2 MLP): XLA (`jit_compile=True`) against plain graphs, 20 against
37 us to act at batch 1 and about 220 against 300 us for a DQN step at batch 32; state kept in
`tf.Variable`s cost as much as passing it in and out (each variable assigned ~2.5 us), and
variables gave acting no gain over tensors. Hence XLA everywhere and packed tensors, not variables.

The direct call and the signature's shapes go through private TensorFlow APIs; they live in
`kerasrl.backend.tensorflow_fast`, guarded, with TensorFlow's public calls as the fallback
(KERASRL_FAST_PATHS=0 takes those only).

Devices. TensorFlow runs an op where the `tf.device` scope (what `keras.device` enters) says, or
on its default device (a GPU when one is visible), and copies inputs from other devices itself:
a misplaced tensor costs a copy per call, never an error. Where more than one device is visible
(`MANY_DEVICES`), a compiled call runs on the device of its first tensor argument (the state or
weights it reads), and state made by `to_tensors` goes where the scope says, else to the default
device (not the host, where eager constants are made). On a machine with one CPU device none of
this runs.
"""

from __future__ import annotations

import contextlib
import operator

import keras
import numpy as np
import optree
import tensorflow as tf

from kerasrl.backend import tensorflow_fast

_EagerTensor = type(tf.constant(0.0))


# Whether more than one device is visible (several logical CPUs, or a GPU): then compiled calls
# follow their data's device. Read on first use (listing devices starts TensorFlow's runtime).
_MANY_DEVICES = None


def many_devices() -> bool:
    """Whether TensorFlow sees more than one (logical) device."""
    global _MANY_DEVICES
    if _MANY_DEVICES is None:
        _MANY_DEVICES = len(tf.config.list_logical_devices()) > 1
    return _MANY_DEVICES


# Numpy scalars seen lately (hyperparameters such as a learning rate), as tensors: a conversion
# costs about 5 us, a look-up well under one.
_SCALARS: dict = {}


def _to_tensor(x, device=None):
    """A numpy array or scalar as an eager tensor (same dtype), made in the current device scope;
    `device` (that scope's name, where compiled calls follow their data) keys the scalar cache."""
    if isinstance(x, np.generic):
        key = (type(x), x, device)
        tensor = _SCALARS.get(key)
        if tensor is None:
            if len(_SCALARS) >= 256:  # a schedule makes a new value each round
                _SCALARS.clear()
            tensor = _SCALARS[key] = tf.constant(x)
        return tensor
    return tf.constant(x)


def _data_device(leaves) -> str | None:
    """The device of the first tensor among `leaves` (packed slices: their buffer's), or None."""
    for leaf in leaves:
        if type(leaf) is _Slice:
            return leaf.buffer.device
        if type(leaf) is _EagerTensor or isinstance(leaf, tf.Variable):
            return leaf.device
    return None


class _Compiled:
    """`fn` traced once per input signature, then called through the traced function directly.

    Tensors, numpy arrays, `tf.Variable`s (passed by handle: the function reads them) and packed
    state slices (as their own tensors) are inputs; other leaves (Python numbers, strings)
    are constants of the trace, as in `tf.function`.
    """

    def __init__(self, fn, jit_compile: bool = True):
        self._fn = fn
        self._jit_compile = jit_compile
        self._traced = {}  # input signature -> (concrete function, output structure)
        self.tracing_count = 0

    def __call__(self, *args):
        if not tf.executing_eagerly():  # inside another traced function: inline into its graph
            return self._fn(*args)
        leaves, structure = optree.tree_flatten(args)
        _cut_slices([leaf for leaf in leaves if type(leaf) is _Slice and leaf._value is None])
        device = _data_device(leaves) if many_devices() else None
        if device is None:
            return self._call(leaves, structure, None)
        with tf.device(device):  # traced and run where its data lives
            return self._call(leaves, structure, device)

    def _call(self, leaves, structure, device):
        # How to rebuild each leaf inside the trace: an input or a constant. With the dtypes and
        # shapes of the inputs (and the device, where there are several), the recipes are the
        # signature traces are kept by.
        inputs, examples, recipes = [], [], [device]
        shape_tuple = tensorflow_fast.shape_tuple
        for leaf in leaves:
            if type(leaf) is _Slice:
                # Its own tensor, not the whole packed buffer: an XLA call copies its inputs,
                # and acting from the learner's 1 MB state cost 200 us.
                leaf = leaf.value()
            if type(leaf) is not _EagerTensor:
                if isinstance(leaf, tf.Variable):
                    recipes.append(("input", len(inputs), leaf.dtype, tuple(leaf.shape)))
                    inputs.append(leaf.handle)
                    examples.append(leaf)
                    continue
                if not isinstance(leaf, (np.ndarray, np.generic)):
                    recipes.append(("constant", type(leaf), leaf))
                    continue
                leaf = _to_tensor(leaf, device)
            recipes.append(("input", len(inputs), leaf.dtype, shape_tuple(leaf)))
            inputs.append(leaf)
            examples.append(leaf)
        signature = (structure, tuple(recipes))
        traced = self._traced.get(signature)
        if traced is None:
            concrete, output_structure = self._trace(structure, recipes, examples)
            function, outputs = tensorflow_fast.first_call(concrete, inputs)
            self._traced[signature] = function, output_structure
            return optree.tree_unflatten(output_structure, outputs)
        function, output_structure = traced
        return optree.tree_unflatten(output_structure, function(inputs))

    def _trace(self, structure, recipes, examples):
        """The traced (concrete) function of the flat input list, and the structure of its
        outputs."""
        output_structure = []

        def flat_fn(*tensors):
            leaves = []
            for kind, *how in recipes[1:]:  # recipes[0]: the device
                if kind == "input":
                    leaves.append(tensors[how[0]])
                elif kind == "constant":
                    leaves.append(how[1])
            outputs, out_structure = optree.tree_flatten(self._fn(*optree.tree_unflatten(structure, leaves)))
            output_structure.append(out_structure)
            return outputs

        # Without AutoGraph: kerasrl's functions run under jax.jit too, so they hold no Python
        # control flow on tensors for it to rewrite, and its source rewrite of every function the
        # trace calls took 5.8 of the 6.5 s of tracing a DQN round (a CartPole DQN's first 300
        # steps 3.8 -> 1.8 s). A model that needs it is refused when an agent is made
        # (check_traceable, which traces the same way).
        concrete = tf.function(flat_fn, jit_compile=self._jit_compile,
                               autograph=False).get_concrete_function(*examples)
        self.tracing_count += 1
        return concrete, output_structure[-1]


class _Slice:
    """One array of a state packed into a flat buffer (see `_PackedState`): read-only.

    It converts to numpy (`np.asarray`) and to a tensor (`tf.convert_to_tensor`, hence every
    `keras.ops` function); a compiled function takes each slice as its own tensor, cut from the
    buffer once and cached (passing the whole buffer instead made acting 4x slower: XLA's call
    handles every byte of its inputs).
    """

    __slots__ = ("buffer", "start", "stop", "shape", "_value")

    def __init__(self, buffer, start: int, stop: int, shape: tuple):
        self.buffer, self.start, self.stop, self.shape = buffer, start, stop, shape
        self._value = None

    @property
    def dtype(self):
        return self.buffer.dtype

    def numpy(self) -> np.ndarray:
        return np.array(np.asarray(self.buffer)[self.start:self.stop].reshape(self.shape))

    def __array__(self, dtype=None, copy=None):
        return self.numpy() if dtype is None else self.numpy().astype(dtype)

    def value(self):
        """The array as its own tensor, cut out of the buffer on first use (both are immutable)."""
        if self._value is None:
            _cut_slices([self])
        return self._value

    def __repr__(self):
        return f"<packed {self.dtype.name} array {self.shape}>"


def _cut_slices(slices) -> None:
    """Give `slices` their own tensors, cut from a numpy view of each buffer (no copy of the
    buffer; each piece is copied once into its tensor). Eager slicing cost about 80 us an array,
    a compiled cutting call 160 us: more than a small network's training step."""
    views = {}
    for piece in slices:
        view = views.get(id(piece.buffer))
        if view is None:
            # np.asarray shares the tensor's memory (EagerTensor.__array__), as `.numpy()` does not.
            view = views[id(piece.buffer)] = np.asarray(piece.buffer)
        value = view[piece.start:piece.stop].reshape(piece.shape)
        if many_devices():  # beside its buffer
            with tf.device(piece.buffer.device):
                piece._value = tf.identity(value)
        else:
            piece._value = tf.constant(value)


tf.register_tensor_conversion_function(
    _Slice, lambda x, dtype=None, name=None, as_ref=False: tf.convert_to_tensor(x.value(), dtype))


class _PackedState:
    """`fn(state, *args) -> (new_state, *rest)` with the state packed in one flat buffer per dtype.

    Each output of a compiled call costs about 2 us, each input less than 1 us: a learner state of
    ~30 arrays spent ~60 us a call on them, as much as a small network's whole training step. So
    the state crosses in and out of the compiled code as one flat tensor per dtype, and the state
    returned is the same structure of `_Slice`s into the new buffers. When the caller passes those
    back (the usual loop `state, ... = f(state, ...)`) they go in as they are; a state made
    elsewhere (a reset, a loaded checkpoint) is packed first. The returned slices are immutable
    snapshots: unlike JAX's donated buffers, an old state stays valid.
    """

    def __init__(self, fn):
        self._fn = fn
        self._layout = None  # (structure, dtypes of the buffers, (buffer, start, stop, shape) per leaf)
        self._step = None
        self._buffers = None
        self._slices = ()

    @property
    def tracing_count(self) -> int:
        return 0 if self._step is None else self._step.tracing_count

    def __call__(self, state, *args):
        if not tf.executing_eagerly():  # inside another traced function: inline into its graph
            return self._fn(state, *args)
        leaves = optree.tree_leaves(state)
        if len(leaves) != len(self._slices) or not all(map(operator.is_, leaves, self._slices)):
            self._buffers = self._pack(state)
        self._buffers, rest = self._step(self._buffers, *args)
        structure, _, places = self._layout
        self._slices = [_Slice(self._buffers[b], start, stop, shape)
                        for b, start, stop, shape in places]
        return (optree.tree_unflatten(structure, self._slices), *rest)

    def _pack(self, state):
        """`state` (tensors, numpy, slices, variables) as flat buffers; a new layout retraces."""
        leaves, structure = optree.tree_flatten(state)
        arrays = [np.asarray(x) for x in leaves]
        dtypes = tuple(dict.fromkeys(a.dtype for a in arrays))
        places, sizes = [], [0] * len(dtypes)
        for a in arrays:
            b = dtypes.index(a.dtype)
            places.append((b, sizes[b], sizes[b] + a.size, a.shape))
            sizes[b] += a.size
        layout = (structure, dtypes, tuple(places))
        if layout != self._layout:
            self._layout = layout
            self._step = _Compiled(self._update)  # the layout is baked into the trace
        flat = [np.concatenate([a.ravel() for a in arrays if a.dtype == dtype]) for dtype in dtypes]
        device = _data_device(leaves) if many_devices() else None
        if device is None:
            return tuple(tf.constant(f) for f in flat)
        with tf.device(device):  # where the state was
            return tuple(tf.identity(f) for f in flat)

    def _update(self, buffers, *args):
        structure, dtypes, places = self._layout
        state = optree.tree_unflatten(structure, [
            tf.reshape(buffers[b][start:stop], shape) for b, start, stop, shape in places])
        new_state, *rest = self._fn(state, *args)
        new_leaves, new_structure = optree.tree_flatten(new_state)
        if new_structure != structure:
            raise ValueError(
                f"A function compiled with donate_state=True must return (new_state, ...) with "
                f"new_state shaped like its state argument; got {new_structure} for {structure}.")
        new_buffers = []
        for b, dtype in enumerate(dtypes):
            parts = [tf.reshape(x, [-1]) for x, place in zip(new_leaves, places) if place[0] == b]
            if any(p.dtype != dtype for p in parts):
                raise ValueError(f"A state array changed dtype in a compiled step (was {dtype}).")
            new_buffers.append(tf.concat(parts, axis=0))
        return tuple(new_buffers), rest


def compile(fn, donate_state: bool = False):  # noqa: A001
    """XLA-compile `fn`, traced once per input signature (shapes and dtypes of its tensors).

    With `donate_state`, `fn(state, *args)` must return `(new_state, *rest)`; the state then stays
    packed in one buffer per dtype between calls (see `_PackedState`). As with JAX's buffer donation, the
    caller must not reuse a state after passing it in: the returned one replaces it.
    """
    return _PackedState(fn) if donate_state else _Compiled(fn)


def value_and_grad(fn):
    """`fn(params, *args) -> (loss, aux)` to `f(params, *args) -> ((loss, aux), grads)`."""

    def wrapped(params, *args):
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(params)
            loss, aux = fn(params, *args)
        grads = tape.gradient(loss, params, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return (loss, aux), grads

    return wrapped


def hessian_vector_product(fn, params, vector):
    """`H v`: the Hessian of the scalar `fn(params)` at `params` (a list of tensors) times `vector`
    (a list of the same shapes), as a list: the gradient of `grad(fn) . v`, one tape inside
    another."""
    zero = tf.UnconnectedGradients.ZERO
    with tf.GradientTape(watch_accessed_variables=False) as outer:
        outer.watch(params)
        with tf.GradientTape(watch_accessed_variables=False) as inner:
            inner.watch(params)
            value = fn(params)
        grads = inner.gradient(value, params, unconnected_gradients=zero)
        dot = tf.add_n([tf.reduce_sum(g * v) for g, v in zip(grads, vector)])
    return outer.gradient(dot, params, unconnected_gradients=zero)


def inference():
    """Eager TensorFlow records no graph without a tape: nothing to switch off."""
    return contextlib.nullcontext()


def on_cpu() -> bool:
    """Whether computations run on the CPU (no GPU)."""
    return not tf.config.list_physical_devices("GPU")


def devices() -> list[str]:
    """Every (logical) device TensorFlow sees, named as `keras.device` takes them: "cpu:0", ...,
    "gpu:0", ..."""
    return [":".join(d.name.split(":")[-2:]).lower() for d in tf.config.list_logical_devices()]


def configure_precision(full: bool = True) -> None:
    """float32 matrix products and convolutions at full float32 precision (`full`), or with
    TensorFloat-32 on GPUs that have it (Ampere and later; TensorFlow's default). The CPU computes
    float32 in full either way."""
    tf.config.experimental.enable_tensor_float_32_execution(not full)


def configure_threads() -> None:
    """One thread per op pool: small networks gain nothing from more on a 2-core machine."""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass  # TensorFlow has already started its pools; the user's setting stands.


def fori_loop(lower, upper, body, init, unroll=1):
    """`body(i, carry)` from lower to upper (a tf.while_loop; `unroll` is a hint XLA ignores).

    Bounds known when tracing set the loop's maximum_iterations: XLA differentiates a while loop
    only with it (its gradient keeps every iteration's values in a list of fixed size)."""
    del unroll
    if isinstance(lower, int) and isinstance(upper, int):
        _, carry = tf.while_loop(lambda i, _: i < upper, lambda i, carry: (i + 1, body(i, carry)),
                                 (tf.constant(lower), init), maximum_iterations=max(upper - lower, 0))
        return carry
    return keras.ops.fori_loop(lower, upper, body, init)


def to_tensors(tree):
    """Numpy arrays (any nesting) to tensors (for state kept between compiled calls) on the
    device of the `keras.device` scope, else on TensorFlow's default device (a GPU when visible:
    `tf.identity` is placed there, where a constant would stay in host memory)."""
    if many_devices():
        return tf.nest.map_structure(lambda x: tf.identity(tf.convert_to_tensor(x)), tree)
    return tf.nest.map_structure(tf.convert_to_tensor, tree)


def feed(tree):
    """Inputs for one compiled call, as tensors (in host memory: the call copies them to its
    device with its other inputs)."""
    return optree.tree_map(lambda x: x if isinstance(x, (tf.Tensor, _Slice)) else _to_tensor(x), tree)


def to_numpy(tree):
    """Tensors (any nesting of lists, tuples and dicts) to numpy."""
    return optree.tree_map(np.asarray, tree)


def check_traceable(fn, batch) -> None:
    """Trace `fn(batch)` into a graph (nothing runs): raises where `fn` reads a tensor's value in
    Python, which a compiled step cannot do. `batch`: an array or a tree (dicts, lists) of them."""
    tf.function(fn, autograph=False).get_concrete_function(tf.nest.map_structure(tf.convert_to_tensor, batch))
