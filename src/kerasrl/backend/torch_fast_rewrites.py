"""PyTorch's fast path, part two: rewrites of the graphs that `kerasrl.backend.torch_fast` traces.

Two rewrites, each the same results with less work, each on a private PyTorch API with its
fallback (one RuntimeWarning names it):

- `simplify`: fewer ops to dispatch (no-ops, repeated pure ops and dead code dropped), with what is
  written in place read from the op schemas (`torch._ops.OpOverload._schema`); without them graphs
  run as traced, unsimplified.
- `unrolled`: a graph of a loop's step repeated (public FX only), so that a loop of k steps is
  traced once, not k times.
- `light_metadata` (while tracing, not a rewrite): each op's output recorded as `TensorMeta`, what
  the rewrites read, instead of a fake tensor (`torch.fx.experimental.proxy_tensor.set_meta`
  swapped); without it make_fx records its own.
- `onednn_matmuls`: large float32 matrix products through oneDNN
  (`torch.ops.mkldnn._linear_pointwise`, registered as `kerasrl::onednn_mm`); without it they stay
  on `aten.mm` (MKL).
"""

from __future__ import annotations

import collections
import contextlib

import torch

from kerasrl.backend import fall_back

try:
    from torch._ops import OpOverload
except Exception:  # noqa: BLE001 -- a PyTorch without it: graphs run unsimplified (see simplify)
    OpOverload = None
try:
    from torch.fx.experimental import proxy_tensor as _proxy_tensor

    _FULL_SET_META = _proxy_tensor.set_meta
except Exception:  # noqa: BLE001 -- a PyTorch without it: make_fx records its own (light_metadata)
    _proxy_tensor = _FULL_SET_META = None

# Ops that do nothing when no gradient is recorded.
_NO_OPS = (torch.ops.aten.detach.default, torch.ops.aten.alias.default)
# A copy of a constant of the trace made at every call: needless where nothing writes to it.
_LIFT = torch.ops.aten.lift_fresh_copy.default


def simplify(graph: torch.fx.GraphModule) -> None:
    """Fewer ops to dispatch, same results: drop detach and alias (no-ops without autograd), the
    copies of constants that nothing writes to or returns (`lift_fresh_copy`), ops repeated on
    the same inputs (Keras recomputes `tau >= 1` for every weight), and dead code.

    A repeat is merged only when it is pure and neither it nor the op it would reuse is written
    to in place or returned (two outputs must not become one tensor). What is written to is read
    from the op schemas; without them the graph is left as traced."""
    nodes = graph.graph.nodes
    try:
        written = _written_nodes(nodes)
    except Exception as error:  # noqa: BLE001 -- cannot tell what is safe to merge: merge nothing
        fall_back("op schemas (torch._ops.OpOverload._schema)", error,
                  "traced graphs run unsimplified")
        return
    returned = set(graph.graph.output_node().all_input_nodes)
    returned_memory = _bases(returned)  # what a caller may write to later
    first = {}
    for node in list(nodes):
        if node.op != "call_function":
            continue
        if node.target in _NO_OPS or (node.target is _LIFT and node not in written
                                      and node not in returned_memory):
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


def _written_nodes(nodes) -> set:
    """The results, and the bases of views, that an in-place op of the graph writes to."""
    return _bases(tensor for node in nodes for tensor in _written_args(node))


def _bases(tensors) -> set:
    """`tensors` (nodes) and, through views, the nodes whose memory they share."""
    out = set()
    for tensor in tensors:
        while isinstance(tensor, torch.fx.Node):
            out.add(tensor)
            tensor = tensor.args[0] if _is_view(tensor) else None
    return out


def _schema(node):
    if node.op == "call_function" and isinstance(node.target, OpOverload):
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


# Matrix products of at least this many multiply-adds run through oneDNN instead of MKL. On this
# machine's AMD CPU MKL's sgemm ran at about a third of XLA's speed (a 1024x256 by 256x256
# product: 1.35 ms against 0.36 ms), oneDNN at 0.6 ms (64x256 by 256x256: 88, 50 and 41 us;
# 1024x256 by 256x2: MKL 223 us, oneDNN 68); below about 500k multiply-adds oneDNN's fixed cost
# (about 10 us) loses. A fixed rule, not a timing, so that a graph computes the same in every
# run. Results differ from MKL's by summation order (~5e-7).
ONEDNN_MIN_MACS = 1 << 19

_onednn = None  # the op, False when unavailable, None before the first large product


def onednn_mm():
    """`kerasrl::onednn_mm(a, b) = a @ b` through oneDNN's linear op, defined and checked on first
    use; None when this PyTorch has no oneDNN or its op fails."""
    global _onednn
    if _onednn is None:
        _onednn = _define_onednn_mm() or False
    return _onednn or None


def _define_onednn_mm():
    # An op of its own: TorchScript cannot record oneDNN's op directly (it takes a list of
    # optional scalars).
    if not torch.backends.mkldnn.is_available():
        return None  # a build without oneDNN: nothing failed
    try:
        if not hasattr(torch.ops.kerasrl, "onednn_mm"):  # once per process (the library lives on)
            torch.library.define("kerasrl::onednn_mm", "(Tensor a, Tensor b) -> Tensor")
            torch.library.impl("kerasrl::onednn_mm", "CPU", lambda a, b: (
                torch.ops.mkldnn._linear_pointwise.default(a, b.t(), None, "none", [], "")))
        op = torch.ops.kerasrl.onednn_mm.default
        # Small integers: exact in float32 whatever the summation order.
        a = (torch.arange(24, dtype=torch.float32) % 7).reshape(4, 6)
        b = (torch.arange(18, dtype=torch.float32) % 5).reshape(6, 3)
        if not torch.equal(op(a, b), a @ b):
            raise RuntimeError("it computed a wrong product")
        return op
    except Exception as error:  # noqa: BLE001
        fall_back("oneDNN matrix products (torch.ops.mkldnn._linear_pointwise)", error,
                  "large matrix products stay on aten.mm (MKL)")
        return None


def onednn_matmuls(graph: torch.fx.GraphModule) -> None:
    """Large float32 `mm` nodes of a traced graph to `kerasrl::onednn_mm` (see ONEDNN_MIN_MACS)."""
    changed = False
    for node in graph.graph.nodes:
        if node.target is not torch.ops.aten.mm.default:
            continue
        # A fake tensor (a graph input) or a TensorMeta (an op's output): shape, dtype, device.
        a, b = (arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None for arg in node.args)
        if (all(hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "device") for x in (a, b))
                and a.device.type == b.device.type == "cpu"  # oneDNN is a CPU library
                and a.dtype == b.dtype == torch.float32
                and a.shape[0] * a.shape[1] * b.shape[1] >= ONEDNN_MIN_MACS):
            op = onednn_mm()
            if op is None:
                return
            node.target = op
            changed = True
    if changed:
        graph.recompile()


def unrolled(graph: torch.fx.GraphModule, count: int) -> torch.fx.GraphModule:
    """The graph of `count` runs of `graph` one after another: its inputs are (start, carry...)
    and its outputs the carry; run j gets start + j and the carry run j - 1 gave. The same ops
    as tracing the unrolled loop records (`aten.add(start, j)` for the index), each once per run."""
    nodes = list(graph.graph.nodes)
    inputs = [node for node in nodes if node.op == "placeholder"]
    returned = graph.graph.output_node().args[0]
    new = torch.fx.Graph()
    placeholders = []
    for node in inputs:
        placeholders.append(new.placeholder(node.name))
        placeholders[-1].meta = dict(node.meta)
    start, carry = placeholders[0], placeholders[1:]
    for j in range(count):
        index = start if j == 0 else new.call_function(torch.ops.aten.add.Tensor, (start, j))
        env = dict(zip(inputs, [index, *carry]))
        for node in nodes:
            if node.op not in ("placeholder", "output"):
                env[node] = new.node_copy(node, lambda arg: env[arg])
        carry = [env[node] for node in returned]
    new.output(tuple(carry))
    return torch.fx.GraphModule(graph, new)


light_metadata_works = True  # until the probe (`torch_fast._check_support`) finds otherwise


class TensorMeta(collections.namedtuple("TensorMeta", "shape dtype device")):
    """What a traced node's metadata ("val") holds for a tensor an op made, in place of the fake
    tensor make_fx would make: all that the rewrites here read."""


@contextlib.contextmanager
def light_metadata():
    """make_fx, while it traces, with `TensorMeta` as the metadata of the tensors ops make: it
    makes a fake tensor of each (`proxy_tensor.set_meta`), a quarter of a trace's time here (PPO's
    compiled update on CartPole, 7,270 ops: 8.6 s -> 6.3 s). A graph's inputs keep theirs. Where
    that private function is missing, make_fx runs as it is."""
    if (not light_metadata_works or _proxy_tensor is None
            or getattr(_proxy_tensor, "set_meta", None) is not _FULL_SET_META):
        yield
        return

    def set_meta(proxy, val):
        if isinstance(val, torch.Tensor) and proxy.node.op != "placeholder":
            proxy.node.meta["val"] = TensorMeta(val.shape, val.dtype, val.device)
            return proxy
        return _FULL_SET_META(proxy, val)

    _proxy_tensor.set_meta = set_meta
    try:
        yield
    finally:
        _proxy_tensor.set_meta = _FULL_SET_META
