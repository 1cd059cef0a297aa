"""PyTorch's fast path: compiled functions traced into graphs of aten ops and replayed.

This module and its graph rewrites (`kerasrl.backend.torch_fast_rewrites`) are the only ones of
kerasrl that use private PyTorch APIs; `kerasrl.backend.torch` imports this one, and everything
in both has a public fallback (see the list below).

Eager PyTorch pays for Keras's Python on every op: a DQN gradient step through Keras layers took
about 2 ms, acting on one observation about 350 us. `torch.compile` costs 13 to 33 s of
compilation here. So a compiled function instead records, the first time it sees a signature (the
nesting, shapes and dtypes of its arguments), the aten ops that it runs, with
`torch.fx.experimental.proxy_tensor.make_fx`. That tracer sits below autograd, so it also records
the backward ops of `torch.autograd.grad` inside `value_and_grad` (as AOTAutograd does), and
below Keras, whose Python then runs only once. The graph is then replayed by TorchScript's C++
interpreter (about 1 us per op, against 4 us for the FX graph's Python). Later calls run only the
graph: the same kernels in the same order, so results are bit-identical to eager execution, with
one exception: large matrix products run through oneDNN instead of MKL (see
`torch_fast_rewrites.ONEDNN_MIN_MACS`), which differs by float summation order.

What a trace would get wrong runs eagerly instead, with one warning per function: a function that
reads a tensor's value into Python (data-dependent control flow; Keras's seeded random ops, whose
seed would be frozen into the graph), or that fails to trace. Unseeded random ops (Keras's default
dropout) draw from PyTorch's global generator in the graph too, so they are fresh every call.

Private APIs, and what runs when one is missing or fails (checked once, on a tiny function, at
first use; one RuntimeWarning names it; results stay the same):

- `make_fx` (torch.fx.experimental) and `TorchDispatchMode` (torch.utils._python_dispatch), to
  trace and to count ops: without them compiled functions run eagerly (public PyTorch).
- `torch._guards.TracingContext` with a `torch._subclasses.FakeTensorMode`: make_fx traces 3x
  faster with one; without it make_fx makes its own.
- `torch.fx.experimental.proxy_tensor.set_meta` (`torch_fast_rewrites.light_metadata`), swapped
  while tracing for one that records a tensor's shape, dtype and device instead of a fake tensor
  (a quarter of the trace time): without it make_fx records its own metadata.
- TorchScript replay (`torch.jit.trace` of an FX graph, run with
  `torch._C._get_graph_executor_optimize` off): without it graphs run as the FX graph's Python code.
- `torch.ops.mkldnn._linear_pointwise`, registered as `kerasrl::onednn_mm` (in
  `torch_fast_rewrites`): without it large matrix products stay on `aten.mm`.
- op schemas (`torch._ops.OpOverload._schema`, in `torch_fast_rewrites`), to merge repeated ops
  safely: without them graphs run as traced, unsimplified.
- a graph that fails when first run: that signature runs eagerly.
- Keras's current device read through `keras.src.backend.torch.core.get_device` (a private Keras
  function, 0.3 us) where `kerasrl.backend.torch` makes a tensor: without it, the device of a
  tensor that Keras makes (public, about 5 us a conversion).

`KERASRL_FAST_PATHS=0` turns all of it off: `kerasrl.backend.torch.compile` then runs functions
eagerly and neither module is used.
"""

from __future__ import annotations

import collections
import functools
import warnings

import keras
import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from kerasrl.backend import fall_back
from kerasrl.backend import torch_fast_rewrites
from kerasrl.backend.torch_fast_rewrites import light_metadata, onednn_matmuls, simplify, unrolled
from kerasrl.backend.tree import flatten as _flatten
from kerasrl.backend.tree import unflatten as _unflatten

# Each private import on its own, so that one missing costs only its own fast path.
_IMPORT_ERRORS: dict[str, Exception] = {}
try:
    from torch.fx.experimental.proxy_tensor import make_fx
except Exception as _error:  # noqa: BLE001 -- a PyTorch without it: compiled functions run eagerly
    make_fx = None
    _IMPORT_ERRORS["make_fx"] = _error
try:
    from torch.utils._python_dispatch import TorchDispatchMode
except Exception as _error:  # noqa: BLE001
    TorchDispatchMode = None
    _IMPORT_ERRORS["TorchDispatchMode"] = _error
try:
    from torch._guards import TracingContext, tracing
    from torch._subclasses.fake_tensor import FakeTensorMode
except Exception as _error:  # noqa: BLE001
    TracingContext = tracing = FakeTensorMode = None
    _IMPORT_ERRORS["TracingContext"] = _error

# Signatures kept per compiled function: acting at batch 1 and at n_envs, a training round with
# and without a target sync, a last shorter chunk, need a handful.
CACHE_SIZE = 8
# Calls of more aten ops than this run eagerly: tracing costs about 0.3 ms per op (a 16-step DQN
# round is about 3,500 ops; PPO's default update, 320 minibatches in one call, about 100,000).
MAX_OPS = 20_000
# Graphs of more nodes than this (after `simplify`; a call runs about twice as many aten ops
# eagerly) run as FX's Python code rather than TorchScript, whose trace time grows faster than
# linearly (0.5 s at 3,000 ops, 5 s at 13,000).
MAX_SCRIPTED_OPS = 8_000

_EAGER = object()  # cache entry of a signature that runs eagerly


# -- what works with this PyTorch ------------------------------------------------------------------
class Support:
    """Which parts of the fast path work with the installed PyTorch (see `support`)."""

    def __init__(self, context: bool, script: bool):
        self.context = context  # make_fx inside a TracingContext with a FakeTensorMode
        self.script = script  # TorchScript replay


_support = None  # a Support, False when graphs cannot be traced, None before the first check


def support():
    """The `Support` of this PyTorch, checked on first use; None when nothing can be traced."""
    global _support
    if _support is None:
        _support = _check_support()
    return _support or None


def keras_device_reader():
    """A function returning the name of Keras's current device (its `keras.device` scope's, else
    its default), through Keras's private `get_device`; None (with one warning) where that is
    missing or disagrees with the device of a tensor Keras makes."""
    try:
        from keras.src.backend.torch.core import get_device

        public = str(keras.ops.zeros((), "bool").device)
        if torch.device(get_device()).type != torch.device(public).type:
            raise RuntimeError(f"it said {get_device()!r} where Keras made a tensor on {public!r}")
        return get_device
    except Exception as error:  # noqa: BLE001 -- a Keras whose private modules moved
        fall_back("keras.src.backend.torch.core.get_device", error,
                  "Keras's device is read from a tensor it makes (about 5 us a conversion)")
        return None


def _probe_fn(x):
    return (torch.relu(x * 2.0) + 1.0,)


def _check_support():
    """Trace and replay a two-op function through each private API in turn; give up on each
    that is missing, raises, or computes something else (one warning each)."""
    x = torch.linspace(-1.0, 1.0, 5)
    expected = _probe_fn(x)[0]
    try:
        if make_fx is None or TorchDispatchMode is None:
            raise (_IMPORT_ERRORS.get("make_fx") or _IMPORT_ERRORS.get("TorchDispatchMode")
                   or ImportError("make_fx or TorchDispatchMode is missing"))
        with OpCounter() as counter:
            _probe_fn(x)
        if counter.n_ops < 3:
            raise RuntimeError(f"counted {counter.n_ops} ops of 3")
        plain = make_fx(_probe_fn, tracing_mode="real")(x)
        if not torch.equal(plain(x)[0], expected):
            raise RuntimeError("the traced graph computed something else")
    except Exception as error:  # noqa: BLE001
        fall_back("make_fx (torch.fx.experimental.proxy_tensor) with TorchDispatchMode", error,
                  "compiled functions run eagerly")
        return False
    try:
        with light_metadata():
            light = make_fx(_probe_fn, tracing_mode="real")(x)
        if not torch.equal(light(x)[0], expected):
            raise RuntimeError("the traced graph computed something else")
    except Exception as error:  # noqa: BLE001
        torch_fast_rewrites.light_metadata_works = False
        fall_back("torch.fx.experimental.proxy_tensor.set_meta (swapped while tracing)", error,
                  "make_fx records its own metadata (a quarter slower to trace)")
    try:
        graph = _make_fx_in_context(_probe_fn, (x,))
        if not torch.equal(graph(x)[0], expected):
            raise RuntimeError("the traced graph computed something else")
        context = True
    except Exception as error:  # noqa: BLE001
        fall_back("torch._guards.TracingContext with a FakeTensorMode", error,
                  "make_fx traces without it (about 3x slower to trace)")
        graph, context = plain, False
    try:
        optimize = torch._C._get_graph_executor_optimize(False)
        torch._C._get_graph_executor_optimize(optimize)
        if not isinstance(optimize, bool):
            raise TypeError(f"it returned {optimize!r}, not a bool")
        scripted = _script(graph, (x,))
        if not torch.equal(_run_scripted(scripted.forward, (x,))[0], expected):
            raise RuntimeError("the TorchScript graph computed something else")
        script = True
    except Exception as error:  # noqa: BLE001
        fall_back("TorchScript replay (torch.jit.trace, torch._C._get_graph_executor_optimize)",
                  error, "graphs run as FX's Python code (slower per op)")
        script = False
    return Support(context, script)


def _make_fx_in_context(fn, tensors):
    # make_fx (a real-tensor trace) makes a FakeTensorMode for every op's metadata unless a
    # tracing context offers one: 3x slower.
    if tracing is None or TracingContext is None or FakeTensorMode is None:
        raise (_IMPORT_ERRORS.get("TracingContext")
               or ImportError("TracingContext, tracing or FakeTensorMode is missing"))
    with (tracing(TracingContext(FakeTensorMode(allow_fallback_kernels=True))), _TraceableOps(),
          light_metadata()):
        return make_fx(fn, tracing_mode="real")(*tensors)


def _script(graph, example_inputs):
    with warnings.catch_warnings():  # TorchScript is deprecated, but the fastest here
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.trace(graph, tuple(example_inputs), check_trace=False, strict=False)


def _run_scripted(run, tensors):
    # Without TorchScript's profiling and optimization passes: they cost seconds on a long
    # graph, and on CPU (no fusion) the plain interpreter runs it as fast.
    optimize = torch._C._get_graph_executor_optimize(False)
    try:
        return run(*tensors)
    finally:
        torch._C._get_graph_executor_optimize(optimize)


# -- traced functions --------------------------------------------------------------------------------
class Traced:
    """The graphs of one function, by input signature (LRU), run without recording gradients
    (they are taken inside, on purpose). A graph writes to its inputs only where the function
    does (in place: `write_rows`); tracing runs on copies, so only the graph's runs write.

    `current_device()`: where arrays and scalars passed in become tensors (Keras's current
    device; None: the CPU). `many_devices`: tensors may live on several devices, so a signature
    holds each input's device (a graph holds the devices it was traced on). `step` and
    `unroll`: `fn(start, carry)` runs `step(start + j, carry)` for j in [0, unroll); one step is
    traced and its graph repeated (`torch_fast_rewrites.unrolled`), tracing costing 1 to 3 ms an op.
    `any_size`: traced however many ops a call runs (else calls of more than MAX_OPS run eagerly).
    """

    def __init__(self, fn, current_device=None, many_devices: bool = False, step=None, unroll: int = 0,
                 any_size: bool = False):
        self.fn, self.step, self.unroll, self.any_size = fn, step, unroll, any_size
        self.current_device = current_device
        self.many_devices = many_devices
        self.graphs = collections.OrderedDict()
        self.warned = False

    def __call__(self, *args, **kwargs):
        leaves = []
        structure = _flatten((args, kwargs), leaves)
        tensors, signature = [], [structure]
        device = None if self.current_device is None else self.current_device()
        many_devices = self.many_devices
        for leaf in leaves:
            tensor = _as_input(leaf, device)
            if tensor is not None:
                tensors.append(tensor)
                signature.append((tensor.shape, tensor.dtype, tensor.device) if many_devices
                                 else (tensor.shape, tensor.dtype))
            elif leaf is None or isinstance(leaf, (bool, int, str)):
                signature.append(leaf)  # a structural constant: counts, switches, names
            else:
                self._eager(f"an argument is a {type(leaf).__name__}, which is neither an array "
                            f"nor a constant")
                signature = None
                break
        with torch.no_grad():
            if signature is None:
                return self.fn(*args, **kwargs)
            signature = tuple(signature)
            graph = self.graphs.get(signature)
            if graph is None:
                graph, result = self._trace(structure, leaves, tensors)
                if graph is not _EAGER:
                    try:
                        # The graph's own result, not the eager run's: they differ where the graph
                        # uses other kernels (oneDNN), and a run resumed from a checkpoint must
                        # compute every call as the uninterrupted run did.
                        result = graph(tensors)
                    except Exception as error:  # noqa: BLE001 -- the eager run just succeeded
                        graph = self._eager(f"its traced graph failed when run "
                                            f"({type(error).__name__}: {str(error).strip()[:300]})")
                self.graphs[signature] = graph
                if len(self.graphs) > CACHE_SIZE:
                    self.graphs.popitem(last=False)
                return result
            self.graphs.move_to_end(signature)
            if graph is _EAGER:
                return self.fn(*args, **kwargs)
            return graph(tensors)

    def _trace(self, structure, leaves, tensors):
        """`(graph, result)`: the graph of `fn` for these inputs, or _EAGER (with a warning when
        a trace would be wrong), and the result of this call, run eagerly."""
        where = [i for i, leaf in enumerate(leaves) if _as_input(leaf, None) is not None]
        outputs = {}

        def flat_fn(*inputs, fn=self.fn):
            full = list(leaves)
            for i, tensor in zip(where, inputs):
                full[i] = tensor
            args, kwargs = _unflatten(structure, iter(full))
            outputs["result"] = result = fn(*args, **kwargs)
            outputs["leaves"] = out_leaves = []
            outputs["structure"] = _flatten(result, out_leaves)
            return tuple(x for x in out_leaves if isinstance(x, torch.Tensor))

        # The tracers know a tensor by its identity: arguments that are one tensor (a reset that
        # gives several state entries the same zeros) would become one input of the graph, and a
        # later call with distinct tensors would read the first for all of them.
        tensors = _distinct(tensors)
        # The eager run and the trace run on copies: a function may write rows of its inputs in
        # place (`write_rows`, a replay buffer), and only the graph's run below may write them.
        copies = [tensor.clone() for tensor in tensors]
        with OpCounter() as counter:
            flat_fn(*copies)
        result, out_structure, out_leaves = outputs["result"], outputs["structure"], outputs["leaves"]
        if self.unroll and (out_structure != structure[2][0][2][1] or len(tensors) != len(out_leaves) + 1
                            or not all(isinstance(x, torch.Tensor) for x in out_leaves)):
            return self._eager("its carry out is not its carry in"), result
        if self.unroll:  # trace one step
            flat_fn = functools.partial(flat_fn, fn=self.step)
        if not self.any_size and counter.n_ops > MAX_OPS:
            return _EAGER, result  # not an error: as fast as before, only not faster
        how = support()
        if how is None:  # this PyTorch cannot trace (warned once, when that was found)
            return _EAGER, result
        try:
            if how.context:
                graph = _make_fx_in_context(flat_fn, [tensor.clone() for tensor in tensors])
            else:
                with _TraceableOps(), light_metadata():
                    graph = make_fx(flat_fn, tracing_mode="real")(*[tensor.clone() for tensor in tensors])
        except Exception as error:  # noqa: BLE001 -- any failure to trace means: run eagerly
            if "_local_scalar_dense" in str(error):
                reason = ("it reads a tensor's value into Python (data-dependent control flow, "
                          "or a seeded Keras random op), which a trace would freeze")
            else:
                reason = f"tracing failed ({type(error).__name__}: {str(error).strip()[:300]})"
            return self._eager(reason), result
        if self.unroll:
            graph = unrolled(graph, self.unroll)
        example = [tensor.clone() for tensor in tensors]  # TorchScript's trace runs the graph
        return Graph(graph, out_structure, out_leaves, example, how.script), result

    def _eager(self, reason: str):
        if not self.warned:
            self.warned = True
            warnings.warn(f"kerasrl: {getattr(self.fn, '__qualname__', self.fn)} runs eagerly on "
                          f"PyTorch, several times slower, because {reason}.", RuntimeWarning,
                          stacklevel=4)
        return _EAGER


def _distinct(tensors: list) -> list:
    """`tensors` with every one that is, or shares memory with, an earlier one replaced by a copy."""
    seen, out = set(), []
    for tensor in tensors:
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset()) if tensor.numel() else id(tensor)
        out.append(tensor.clone() if key in seen else tensor)
        seen.add(key)
    return out


class Graph:
    """A traced graph, run by TorchScript (or as FX's Python code when `script` is False or
    TorchScript fails on it), with the outputs' nesting put back."""

    def __init__(self, graph: torch.fx.GraphModule, out_structure, out_leaves, example_inputs,
                 script: bool):
        simplify(graph)
        onednn_matmuls(graph)
        self.fx = self.module = self.run = graph
        self.scripted = False
        if script and len(graph.graph.nodes) <= MAX_SCRIPTED_OPS:
            try:
                self.module = _script(graph, example_inputs)
                self.run = self.module.forward  # skips nn.Module's call machinery
                self.scripted = True
            except Exception:  # noqa: BLE001 -- the FX graph gives the same results, only slower
                pass
        self.out_structure = out_structure
        # Non-tensor outputs (None, Python numbers) are constants of the trace.
        self.out_leaves = [None if isinstance(x, torch.Tensor) else x for x in out_leaves]
        self.tensor_at = [i for i, x in enumerate(out_leaves) if isinstance(x, torch.Tensor)]

    def __call__(self, tensors):
        results = _run_scripted(self.run, tensors) if self.scripted else self.run(*tensors)
        leaves = list(self.out_leaves)
        for i, tensor in zip(self.tensor_at, results):
            leaves[i] = tensor
        return _unflatten(self.out_structure, iter(leaves))


def _as_input(leaf, device):
    """The tensor a leaf is passed to a graph as, or None if it is not an array.

    Floats become 0-d float32 tensors (as Keras converts them) and numpy scalars 0-d tensors of
    their dtype, so that a new learning rate does not mean a new trace. Python ints and bools stay
    constants: they are shapes, counts and switches. Arrays and scalars go to `device` (Keras's
    current one; None: left where they are made, for telling inputs apart only); tensors are
    passed as they are.
    """
    if isinstance(leaf, torch.Tensor):
        return leaf
    if isinstance(leaf, keras.Variable):
        return leaf.value
    if isinstance(leaf, np.ndarray):
        tensor = torch.from_numpy(leaf if leaf.flags.c_contiguous else leaf.copy())
    elif isinstance(leaf, np.generic):
        tensor = torch.from_numpy(np.asarray(leaf))
    elif isinstance(leaf, float):
        tensor = torch.tensor(leaf, dtype=torch.float32)
    else:
        return None
    return tensor if device is None or device.type == "cpu" else tensor.to(device)


# -- tracing helpers ---------------------------------------------------------------------------------
class _TraceableOps(TorchFunctionMode):
    """While tracing, ops whose PyTorch kernels read tensor values into Python (input checks that
    a trace cannot keep) are replaced by equivalent ops that do not."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.one_hot:
            return _one_hot(*args, **kwargs)
        return func(*args, **kwargs)


def _one_hot(tensor, num_classes=-1):
    """`one_hot` without its range check (Expected SARSA's epsilon-greedy probabilities need it):
    an index out of range gives a row of zeros instead of an error."""
    if num_classes < 0:  # the width is the largest index: data-dependent, left to fail
        return torch.nn.functional.one_hot(tensor, num_classes)
    return (tensor.unsqueeze(-1) == torch.arange(num_classes, device=tensor.device)).long()


class OpCounter(TorchDispatchMode or object):
    """Counts the aten ops a call runs (the size its trace would have)."""

    def __init__(self):
        super().__init__()
        self.n_ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n_ops += 1
        return func(*args, **(kwargs or {}))

