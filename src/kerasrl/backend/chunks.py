"""PyTorch's loops: Python loops over traced chunks of iterations (the compiled loops, and the
agents' own updates where they step through minibatches: PPO's).

JAX and TensorFlow compile a whole call, loops included. PyTorch's loops are Python over traced
graphs (`kerasrl.backend.torch_fast`), and the Python between graph calls (flattening the runner
state into a graph's inputs, the eager ops between graphs) cost as much as the graphs on per-step
DQN. So a loop runs in chunks: one traced graph unrolls k iterations, with every piece the body
calls inlined and replay rows written in place inside the graph (`backend.write_rows`). k keeps a
chunk under CHUNK_OPS aten ops (tracing took 1 to 3 ms an op here, more per op in larger graphs);
a body larger than that runs as before, one iteration at a time through its own compiled pieces
(a DQN zoo round: about 35,000 ops; its 256 env steps are chunked instead), or, for a body with
no compiled pieces (a recurrent minibatch step: about 25,000 ops), as one traced graph per
iteration (`large_iterations="traced"`).
The graphs run the same kernels in the same order as the pieces did, so results do not change.
"""

from __future__ import annotations

import functools

import numpy as np

from kerasrl import backend

# Aten ops that one chunk runs eagerly, at most (its traced graph has about a third as many nodes).
CHUNK_OPS = 2000


def piece(loop, key, fn):
    """`fn` compiled on its own where loops are Python (PyTorch), once per `key`; `fn` itself
    where the whole call compiles (JAX, TensorFlow) or inside a chunk or piece being traced."""
    if backend.COMPILED_LOOPS or loop.__dict__.get("_inline"):
        return fn
    pieces = loop.__dict__.setdefault("_pieces", {})
    if key not in pieces:
        pieces[key] = backend.compile(_inlined(loop, fn))
    return pieces[key]


def _inlined(loop, fn):
    """`fn` with the pieces it calls inlined (traced into its graph, not called as graphs)."""
    @functools.wraps(fn)
    def run(*args):
        outer = loop.__dict__.get("_inline", False)
        loop._inline = True
        try:
            return fn(*args)
        finally:
            loop._inline = outer

    return run


def loop_in_chunks(loop, key, n, body, carry, chunks: bool = True, large_iterations: str = "pieces"):
    """`body(i, carry)` for i in [0, n): `backend.fori_loop` where loops compile (or inside a
    traced chunk); on PyTorch, chunks of iterations each run as one traced graph (see the module
    docstring). `key` names the body (with whatever it closes over that changes its graph).
    `chunks=False`: the body is known to be too large to chunk (counting its ops runs it eagerly
    once: 4 s for a DQN zoo round). A body of more than CHUNK_OPS ops runs one iteration at a
    time: through its own compiled pieces (`large_iterations="pieces"`), or as one traced graph
    whatever its size (`"traced"`, for a body with no compiled pieces of its own)."""
    if backend.COMPILED_LOOPS or loop.__dict__.get("_inline") or n < 1 or not chunks:
        return backend.fori_loop(0, n, body, carry)
    # Not folded into the test above: on JAX `n` may be traced there, so `n == 1` is tested only
    # once the compiled loops have returned.
    if n == 1 and large_iterations == "pieces":  # one iteration: through its own pieces
        return backend.fori_loop(0, n, body, carry)
    sizes = loop.__dict__.setdefault("_chunk_sizes", {})
    if key not in sizes:
        sizes[key] = _chunk_size(loop, body, carry)
    n_chunks = -(-n // sizes[key])
    if n_chunks == n and large_iterations == "pieces":  # the body's own pieces, as before
        return backend.fori_loop(0, n, body, carry)
    size = -(-n // n_chunks)  # chunks of equal size, but the last: two graphs at most
    chunks = loop.__dict__.setdefault("_chunks", {})
    for start in range(0, n, size):
        count = min(size, n - start)
        if (key, count) not in chunks:
            step = _inlined(loop, body)
            # One large iteration per graph is traced whatever its size: it runs every iteration.
            chunks[key, count] = backend.compile_unrolled(step, count, functools.partial(_unrolled, step, count),
                                                          any_size=size == 1)
        carry = chunks[key, count](np.int32(start), carry)  # the start is an input: one graph for all
    return carry


def _unrolled(body, count, start, carry):
    for j in range(count):
        carry = body(start + j, carry)
    return carry


def _chunk_size(loop, body, carry) -> int:
    """Iterations per chunk: CHUNK_OPS over the ops of one iteration, run eagerly on a copy of
    `carry` (a body may write rows in place); 1 where one is more, or ops cannot be counted."""
    if backend.count_ops is None:
        return 1
    n_ops = backend.count_ops(_inlined(loop, body), 0, _clone(carry))
    return max(1, CHUNK_OPS // n_ops) if n_ops else 1


def _clone(tree):
    if isinstance(tree, dict):
        return {key: _clone(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_clone(value) for value in tree)
    return tree.clone() if hasattr(tree, "clone") else tree
