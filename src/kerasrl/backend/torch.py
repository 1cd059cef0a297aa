"""PyTorch: eager execution, gradients from `torch.autograd.grad`, no graph while acting."""

from __future__ import annotations

import functools
import os

import numpy as np
import torch
import torch.utils._pytree as pytree


def compile(fn, donate_state: bool = False):  # noqa: A001
    """Run `fn` eagerly without recording a graph (gradients are taken inside, on purpose).

    `torch.compile` costs 13 to 33 s of compilation here for a 3x faster step; it is used only when
    KERASRL_TORCH_COMPILE=1.
    """
    del donate_state
    if os.environ.get("KERASRL_TORCH_COMPILE") == "1":
        fn = torch.compile(fn, dynamic=False)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with torch.no_grad():
            return fn(*args, **kwargs)

    return run


def value_and_grad(fn):
    """`fn(params, *args) -> (loss, aux)` to `f(params, *args) -> ((loss, aux), grads)`."""

    def wrapped(params, *args):
        params = [p.detach().requires_grad_(True) for p in params]
        with torch.enable_grad():
            loss, aux = fn(params, *args)
            grads = torch.autograd.grad(loss, params, allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
        aux = pytree.tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, aux)
        return (loss.detach(), aux), grads

    return wrapped


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
    """`body(i, carry)` from lower to upper: a Python loop (eager execution)."""
    del unroll
    carry = init
    for i in range(lower, upper):
        carry = body(i, carry)
    return carry


def to_tensors(tree):
    """Numpy arrays (any nesting) to tensors, sharing memory where the dtype allows."""
    return pytree.tree_map(lambda x: torch.from_numpy(x if x.flags.c_contiguous else x.copy())
                           if isinstance(x, np.ndarray) else torch.as_tensor(x), tree)


feed = to_tensors


def to_numpy(tree):
    """Tensors (any nesting of lists, tuples and dicts) to numpy."""
    return pytree.tree_map(
        lambda x: x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x), tree
    )
