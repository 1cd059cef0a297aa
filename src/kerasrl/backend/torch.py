"""PyTorch: compiled functions are traced once per input signature into graphs of aten ops.

Eager PyTorch pays for Keras's Python on every op: a DQN gradient step through Keras layers took
about 2 ms, acting on one observation about 350 us. `torch.compile` costs 13 to 33 s of
compilation here. So `compile(fn)` instead records, the first time it sees a signature (the
nesting, shapes and dtypes of its arguments), the aten ops that `fn` runs, with
`torch.fx.experimental.proxy_tensor.make_fx`. That tracer sits below autograd, so it also records
the backward ops of `torch.autograd.grad` inside `value_and_grad` (as AOTAutograd does), and
below Keras, whose Python then runs only once. The graph is then replayed by TorchScript's C++
interpreter (about 1 us per op, against 4 us for the FX graph's Python). Later calls run only the
graph: the same kernels in the same order, so results are bit-identical to eager execution, with
one exception: large matrix products run through oneDNN instead of MKL (see ONEDNN_MIN_MACS), which
differs by float summation order.

What a trace would get wrong runs eagerly instead, with one warning per function: a function that
reads a tensor's value into Python (data-dependent control flow; Keras's seeded random ops, whose
seed would be frozen into the graph), or that fails to trace. Unseeded random ops (Keras's default
dropout) draw from PyTorch's global generator in the graph too, so they are fresh every call.
KERASRL_TORCH_TRACE=0 runs everything eagerly (debugging); KERASRL_TORCH_COMPILE=1 uses
`torch.compile` instead.
"""

from __future__ import annotations

import collections
import functools
import os
import warnings

import keras
import numpy as np
import torch
from torch._guards import TracingContext, tracing
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# Signatures kept per compiled function: acting at batch 1 and at n_envs, a training round with
# and without a target sync, a last shorter chunk, need a handful.
CACHE_SIZE = 8
# Calls of more aten ops than this run eagerly: tracing costs about 0.3 ms per op (a 16-step DQN
# round is about 3,500 ops; PPO's default update, 320 minibatches in one call, about 100,000).
MAX_OPS = 20_000
# Graphs of more ops than this run as FX's Python code rather than TorchScript, whose trace time
# grows faster than linearly (0.5 s at 3,000 ops, 5 s at 13,000).
MAX_SCRIPTED_OPS = 8_000

# Ops that do nothing when no gradient is recorded.
_NO_OPS = (torch.ops.aten.detach.default, torch.ops.aten.alias.default)
_EAGER = object()  # cache entry of a signature that runs eagerly


def compile(fn, donate_state: bool = False):  # noqa: A001
    """`fn` traced into a graph per input signature (see the module docstring), run without
    recording gradients (they are taken inside, on purpose).

    `donate_state` is accepted for the other backends' sake: the graphs never write to their
    inputs, as eager `fn` would not.
    """
    del donate_state
    if os.environ.get("KERASRL_TORCH_COMPILE") == "1":
        return _no_grad(torch.compile(fn, dynamic=False))
    if os.environ.get("KERASRL_TORCH_TRACE", "1") == "0":
        return _no_grad(fn)
    return functools.wraps(fn)(_Traced(fn))


def _no_grad(fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with torch.no_grad():
            return fn(*args, **kwargs)

    return run


class _Traced:
    """The graphs of one function, by input signature (LRU); see `compile`."""

    def __init__(self, fn):
        self.fn = fn
        self.graphs = collections.OrderedDict()
        self.warned = False

    def __call__(self, *args, **kwargs):
        leaves = []
        structure = _flatten((args, kwargs), leaves)
        tensors, signature = [], [structure]
        for leaf in leaves:
            tensor = _as_input(leaf)
            if tensor is not None:
                tensors.append(tensor)
                signature.append((tensor.shape, tensor.dtype))
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
                self.graphs[signature] = graph
                if len(self.graphs) > CACHE_SIZE:
                    self.graphs.popitem(last=False)
                if graph is _EAGER:
                    return result
                # The graph's own result, not the eager run's: they differ where the graph uses
                # other kernels (oneDNN), and a run resumed from a checkpoint must compute
                # every call as the uninterrupted run did.
                return graph(tensors)
            self.graphs.move_to_end(signature)
            if graph is _EAGER:
                return self.fn(*args, **kwargs)
            return graph(tensors)

    def _trace(self, structure, leaves, tensors):
        """`(graph, result)`: the graph of `fn` for these inputs, or _EAGER (with a warning when
        a trace would be wrong), and the result of this call, run eagerly."""
        where = [i for i, leaf in enumerate(leaves) if _as_input(leaf) is not None]
        outputs = {}

        def flat_fn(*inputs):
            full = list(leaves)
            for i, tensor in zip(where, inputs):
                full[i] = tensor
            args, kwargs = _unflatten(structure, iter(full))
            outputs["result"] = result = self.fn(*args, **kwargs)
            outputs["leaves"] = out_leaves = []
            outputs["structure"] = _flatten(result, out_leaves)
            return tuple(x for x in out_leaves if isinstance(x, torch.Tensor))

        with _OpCounter() as counter:
            flat_fn(*tensors)
        result = outputs["result"]
        if counter.n_ops > MAX_OPS:
            return _EAGER, result  # not an error: as fast as before, only not faster
        try:
            # make_fx (a real-tensor trace) makes a FakeTensorMode for every op's metadata unless
            # a tracing context offers one: 3x slower.
            with tracing(TracingContext(FakeTensorMode(allow_fallback_kernels=True))), \
                    _TraceableOps():
                graph = make_fx(flat_fn, tracing_mode="real")(*tensors)
        except Exception as error:  # noqa: BLE001 -- any failure to trace means: run eagerly
            if "_local_scalar_dense" in str(error):
                reason = ("it reads a tensor's value into Python (data-dependent control flow, "
                          "or a seeded Keras random op), which a trace would freeze")
            else:
                reason = f"tracing failed ({type(error).__name__}: {str(error).strip()[:300]})"
            return self._eager(reason), result
        script = counter.n_ops <= MAX_SCRIPTED_OPS
        return _Graph(graph, outputs["structure"], outputs["leaves"], tensors, script), result

    def _eager(self, reason: str):
        if not self.warned:
            self.warned = True
            warnings.warn(f"kerasrl: {getattr(self.fn, '__qualname__', self.fn)} runs eagerly on "
                          f"PyTorch, several times slower, because {reason}.", RuntimeWarning,
                          stacklevel=4)
        return _EAGER


class _Graph:
    """A traced graph, run by TorchScript (or as FX's Python code when `script` is False or
    TorchScript fails), with the outputs' nesting put back."""

    def __init__(self, graph: torch.fx.GraphModule, out_structure, out_leaves, example_inputs,
                 script: bool):
        _simplify(graph)
        _onednn_matmuls(graph)
        self.fx = self.module = self.run = graph
        if script:
            try:
                with warnings.catch_warnings():  # TorchScript is deprecated, but the fastest here
                    warnings.simplefilter("ignore", DeprecationWarning)
                    self.module = torch.jit.trace(graph, tuple(example_inputs),
                                                  check_trace=False, strict=False)
                self.run = self.module.forward  # skips nn.Module's call machinery
            except Exception:  # noqa: BLE001 -- the FX graph gives the same results, only slower
                pass
        self.out_structure = out_structure
        # Non-tensor outputs (None, Python numbers) are constants of the trace.
        self.out_leaves = [None if isinstance(x, torch.Tensor) else x for x in out_leaves]
        self.tensor_at = [i for i, x in enumerate(out_leaves) if isinstance(x, torch.Tensor)]

    def __call__(self, tensors):
        # Without TorchScript's profiling and optimization passes: they cost seconds on a long
        # graph, and on CPU (no fusion) the plain interpreter runs it as fast.
        optimize = torch._C._get_graph_executor_optimize(False)
        try:
            results = self.run(*tensors)
        finally:
            torch._C._get_graph_executor_optimize(optimize)
        leaves = list(self.out_leaves)
        for i, tensor in zip(self.tensor_at, results):
            leaves[i] = tensor
        return _unflatten(self.out_structure, iter(leaves))


def _flatten(tree, leaves: list):
    """Append the leaves of nested dicts, lists and tuples to `leaves`; return the nesting, as a
    hashable value for `_unflatten`. (torch's pytree took 0.2 ms per call on a learner state.)"""
    if isinstance(tree, dict):
        return dict, tuple(tree), tuple(_flatten(v, leaves) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return type(tree), None, tuple(_flatten(v, leaves) for v in tree)
    leaves.append(tree)
    return None


def _unflatten(structure, leaves):
    """The nesting `structure` (from `_flatten`) filled from the iterator `leaves`."""
    if structure is None:
        return next(leaves)
    kind, keys, children = structure
    values = [_unflatten(child, leaves) for child in children]
    if kind is dict:
        return dict(zip(keys, values))
    if kind is list or kind is tuple:
        return kind(values)
    return kind(*values)  # a namedtuple


def _tree_map(fn, tree):
    leaves = []
    structure = _flatten(tree, leaves)
    return _unflatten(structure, iter([fn(leaf) for leaf in leaves]))


def _as_input(leaf):
    """The tensor a leaf is passed to a graph as, or None if it is not an array.

    Floats become 0-d float32 tensors (as Keras converts them) and numpy scalars 0-d tensors of
    their dtype, so that a new learning rate does not mean a new trace. Python ints and bools stay
    constants: they are shapes, counts and switches.
    """
    if isinstance(leaf, torch.Tensor):
        return leaf
    if isinstance(leaf, keras.Variable):
        return leaf.value
    if isinstance(leaf, np.ndarray):
        return torch.from_numpy(leaf if leaf.flags.c_contiguous else leaf.copy())
    if isinstance(leaf, np.generic):
        return torch.from_numpy(np.asarray(leaf))
    if isinstance(leaf, float):
        return torch.tensor(leaf, dtype=torch.float32)
    return None


def _simplify(graph: torch.fx.GraphModule) -> None:
    """Fewer ops to dispatch, same results: drop detach and alias (no-ops without autograd), ops
    repeated on the same inputs (Keras recomputes `tau >= 1` for every weight), and dead code.

    A repeat is merged only when it is pure and neither it nor the op it would reuse is written
    to in place or returned (two outputs must not become one tensor)."""
    nodes = graph.graph.nodes
    written = set()  # results, and the bases of views, that an in-place op writes to
    for node in nodes:
        for tensor in _written_args(node):
            while isinstance(tensor, torch.fx.Node):
                written.add(tensor)
                tensor = tensor.args[0] if _is_view(tensor) else None
    returned = set(graph.graph.output_node().all_input_nodes)
    first = {}
    for node in list(nodes):
        if node.op != "call_function":
            continue
        if node.target in _NO_OPS:
            node.replace_all_uses_with(node.args[0])
            graph.graph.erase_node(node)
            continue
        if node.is_impure() or node in written or node in returned:
            continue
        key = (node.target, _hashable(node.args), _hashable(node.kwargs))
        try:
            earlier = first.setdefault(key, node)
        except TypeError:  # an argument that cannot be compared
            continue
        if earlier is not node:
            node.replace_all_uses_with(earlier)
            graph.graph.erase_node(node)
    graph.graph.eliminate_dead_code()  # keeps random and in-place ops
    graph.recompile()


# Matrix products of at least this many multiply-adds run through oneDNN instead of MKL. On this
# machine's AMD CPU MKL's sgemm ran at about a third of XLA's speed (a 1024x256 by 256x256
# product: 1.35 ms against 0.36 ms), oneDNN at 0.6 ms (64x256 by 256x256: 88, 50 and 41 us;
# 1024x256 by 256x2: MKL 223 us, oneDNN 68); below about 500k multiply-adds oneDNN's fixed cost
# (about 10 us) loses. A fixed rule, not a timing, so that a graph computes the same in every
# run. Results differ from MKL's by summation order (~5e-7).
ONEDNN_MIN_MACS = 1 << 19


def _define_onednn_mm():
    """`kerasrl::onednn_mm(a, b) = a @ b` through oneDNN's linear op, registered as an op of its
    own: TorchScript cannot record oneDNN's op directly (it takes a list of optional scalars)."""
    if not torch.backends.mkldnn.is_available():
        return None
    if hasattr(torch.ops.kerasrl, "onednn_mm"):  # this module imported a second time
        return torch.ops.kerasrl.onednn_mm.default
    library = torch.library.Library("kerasrl", "DEF")
    library.define("onednn_mm(Tensor a, Tensor b) -> Tensor")
    linear = torch.ops.mkldnn._linear_pointwise.default
    library.impl("onednn_mm", lambda a, b: linear(a, b.t(), None, "none", [], ""), "CPU")
    _define_onednn_mm.library = library  # kept alive: the op is unregistered with it
    return torch.ops.kerasrl.onednn_mm.default


_ONEDNN_MM = _define_onednn_mm()


def _onednn_matmuls(graph: torch.fx.GraphModule) -> None:
    """Large float32 `mm` nodes of a traced graph to `kerasrl::onednn_mm` (see ONEDNN_MIN_MACS)."""
    if _ONEDNN_MM is None:
        return
    changed = False
    for node in graph.graph.nodes:
        if node.target is not torch.ops.aten.mm.default:
            continue
        a, b = (arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None for arg in node.args)
        if (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.dtype == b.dtype == torch.float32
                and a.shape[0] * a.shape[1] * b.shape[1] >= ONEDNN_MIN_MACS):
            node.target = _ONEDNN_MM
            changed = True
    if changed:
        graph.recompile()


def _schema(node):
    if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
        return node.target._schema
    return None


def _written_args(node):
    """The arguments of `node` that it writes to in place."""
    schema = _schema(node)
    if schema is None or not schema.is_mutable:
        return []
    values = dict(zip((a.name for a in schema.arguments), node.args), **node.kwargs)
    return [values.get(a.name) for a in schema.arguments
            if a.alias_info is not None and a.alias_info.is_write]


def _is_view(node) -> bool:
    """Whether `node`'s result shares memory with its first argument."""
    schema = _schema(node)
    return bool(schema and schema.returns and schema.returns[0].alias_info is not None
                and node.args)


def _hashable(args):
    """`args` as a hashable key; numbers keep their type (`x + 1` is not `x + 1.0`)."""
    if isinstance(args, (list, tuple)):
        return type(args), tuple(_hashable(a) for a in args)
    if isinstance(args, dict):
        return dict, tuple((k, _hashable(v)) for k, v in args.items())
    return type(args), args


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


class _OpCounter(TorchDispatchMode):
    """Counts the aten ops a call runs (the size its trace would have)."""

    def __init__(self):
        super().__init__()
        self.n_ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n_ops += 1
        return func(*args, **(kwargs or {}))


def value_and_grad(fn):
    """`fn(params, *args) -> (loss, aux)` to `f(params, *args) -> ((loss, aux), grads)`."""

    def wrapped(params, *args):
        params = [p.detach().requires_grad_(True) for p in params]
        with torch.enable_grad():
            loss, aux = fn(params, *args)
            grads = torch.autograd.grad(loss, params, allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
        aux = _tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, aux)
        return (loss.detach(), aux), grads

    return wrapped


def adam_moments_step(param, grad, m, v, alpha, beta_1, beta_2, epsilon):
    """`kerasrl.optim.adam_moments_step` in 7 kernels instead of 12, the same arithmetic:
    `lerp(a, b, w)` is `a + (b - a) * w` and `addcdiv(p, x, y, value=-1)` is `p - x / y`. Each
    kernel makes a pass over the weight, and nothing fuses them on this backend."""
    m = torch.lerp(m, grad, 1.0 - beta_1)
    v = torch.lerp(v, grad * grad, 1.0 - beta_2)
    return torch.addcdiv(param, m * alpha, torch.sqrt(v) + epsilon, value=-1.0), m, v


def inference():
    """Acting must not build an autograd graph."""
    return torch.no_grad()


def configure_threads() -> None:
    """One thread unless KERASRL_TORCH_THREADS says otherwise.

    At its default thread count PyTorch ran 5x to 50x slower on this 2-core machine under any other
    load; small networks gain nothing from more threads.
    """
    torch.set_num_threads(int(os.environ.get("KERASRL_TORCH_THREADS", "1")))


def fori_loop(lower, upper, body, init, unroll=1):
    """`body(i, carry)` from lower to upper: a Python loop, unrolled into the trace."""
    del unroll
    carry = init
    for i in range(lower, upper):
        carry = body(i, carry)
    return carry


def to_tensors(tree):
    """Numpy arrays (any nesting) to tensors, sharing memory where the dtype allows."""
    return _tree_map(lambda x: torch.from_numpy(x if x.flags.c_contiguous else x.copy())
                           if isinstance(x, np.ndarray) else torch.as_tensor(x), tree)


feed = to_tensors


def to_numpy(tree):
    """Tensors (any nesting of lists, tuples and dicts) to numpy."""
    return _tree_map(
        lambda x: x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x), tree
    )
