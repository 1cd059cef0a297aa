"""PyTorch: compiled functions are traced once per input signature into graphs of aten ops.

Eager PyTorch pays for Keras's Python on every op (a DQN gradient step through Keras layers took
about 2 ms), and `torch.compile` costs 13 to 33 s of compilation here. So `compile(fn)` records,
the first time it sees a signature, the aten ops that `fn` runs and replays them as a TorchScript
graph, bit-identical to eager execution except that large matrix products run through oneDNN.
That tracing and replay use private PyTorch APIs and live in `kerasrl.backend.torch_fast`, each
guarded: what fails there falls back to plain eager PyTorch (or a slower graph), with one warning.
Everything else in this module is public PyTorch.

KERASRL_FAST_PATHS=0 (see `kerasrl.backend`) or KERASRL_TORCH_TRACE=0 runs compiled functions
eagerly; KERASRL_TORCH_COMPILE=1 uses `torch.compile` instead.

Devices. Keras's PyTorch backend moves every tensor a `keras.ops` function receives to its current
device (the `keras.device` scope's, else CUDA when visible), while native torch ops refuse tensors
on two devices ("Expected all tensors to be on the same device"). So every tensor kerasrl makes
goes to Keras's current device (`current_device`): numpy crosses the boundary through
`to_tensors` and `feed`, and Python or numpy scalars passed to a compiled call through the same
conversion. Where an accelerator is visible, a compiled call runs on the device of its first
tensor argument (the state or weights it reads): inside `keras.device` of that device, so that the
constants Keras makes inside land beside them. On a CPU-only machine none of this costs anything:
tensors are made with `torch.from_numpy` as before, and calls are not wrapped.
"""

from __future__ import annotations

import functools
import os

import keras
import numpy as np
import torch

from kerasrl.backend import fall_back, fast_paths
from kerasrl.backend.tree import flatten as _flatten
from kerasrl.backend.tree import unflatten as _unflatten


def compile(fn, donate_state: bool = False):  # noqa: A001
    """`fn` traced into a graph per input signature (see `kerasrl.backend.torch_fast`), run
    without recording gradients (they are taken inside, on purpose); eagerly when the fast paths
    are off or unavailable.

    `donate_state` is accepted for the other backends' sake: the graphs never write to their
    inputs, as eager `fn` would not.
    """
    del donate_state
    if os.environ.get("KERASRL_TORCH_COMPILE") == "1":
        return _on_data_device(_no_grad(torch.compile(fn, dynamic=False)))
    if os.environ.get("KERASRL_TORCH_TRACE", "1") == "0" or not fast_paths():
        return _on_data_device(_no_grad(fn))
    fast = _fast_module()
    if fast is None or fast.support() is None:
        return _on_data_device(_no_grad(fn))
    return _on_data_device(functools.wraps(fn)(fast.Traced(fn, current_device, MANY_DEVICES)))


def _fast_module():
    """`kerasrl.backend.torch_fast`, or None when it cannot be imported (one warning)."""
    try:
        from kerasrl.backend import torch_fast
    except Exception as error:  # noqa: BLE001 -- a PyTorch whose private modules moved
        fall_back("kerasrl.backend.torch_fast (traced graphs)", error,
                  "compiled functions run eagerly")
        return None
    return torch_fast


def _no_grad(fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with torch.no_grad():
            return fn(*args, **kwargs)

    return run


# -- devices -----------------------------------------------------------------------------------------
def _accelerator_visible() -> bool:
    return (torch.cuda.is_available() or torch.backends.mps.is_available()
            or (hasattr(torch, "xpu") and torch.xpu.is_available()))


# Whether tensors may live on more than one device here (an accelerator is visible): only then do
# compiled calls follow their data's device and graphs tell devices apart.
MANY_DEVICES = _accelerator_visible()
_DEVICES: dict = {}  # Keras's device names -> torch.device, with the index CUDA would use
_keras_device = None  # how Keras's current device is read (see `current_device`)


def _torch_device(name) -> torch.device:
    device = _DEVICES.get(name)
    if device is None:
        device = torch.device(name)
        if device.type == "cpu":
            device = torch.device("cpu")  # "cpu:0" is the one CPU; tensors say "cpu"
        elif device.index is None and device.type == "cuda":
            device = torch.device("cuda", torch.cuda.current_device())
        _DEVICES[name] = device
    return device


def current_device() -> torch.device:
    """Where Keras puts new tensors now: the device of the innermost `keras.device` scope, else
    Keras's default (CUDA when visible, else the CPU)."""
    global _keras_device
    if _keras_device is None:
        fast = _fast_module() if fast_paths() else None
        _keras_device = (fast.keras_device_reader() if fast is not None else None) or _public_device
    return _torch_device(_keras_device())


def _public_device():
    """Keras's current device through its public API: the device of a tensor it makes (~5 us)."""
    return str(keras.ops.zeros((), "bool").device)


def _as_tensor(x, device: torch.device):
    """`x` (a tensor, numpy array or scalar) as a tensor on `device`; numpy shares its memory
    where the device is the CPU and the dtype allows. Shapes are kept: a 0-d array (the
    optimizer's step count) stays 0-d (`np.ascontiguousarray` made it 1-d)."""
    if isinstance(x, torch.Tensor):
        return x if x.device == device else x.to(device)
    if isinstance(x, np.ndarray):
        tensor = torch.from_numpy(x if x.flags.c_contiguous else x.copy())
    else:
        tensor = torch.as_tensor(x)
    return tensor if device.type == "cpu" else tensor.to(device)


def _first_tensor(tree):
    """The first tensor (or Keras variable's value) of a nesting of lists, tuples and dicts."""
    if isinstance(tree, torch.Tensor):
        return tree
    if isinstance(tree, keras.Variable):
        return tree.value
    values = tree.values() if isinstance(tree, dict) else tree if isinstance(tree, (list, tuple)) else ()
    for value in values:
        found = _first_tensor(value)
        if found is not None:
            return found
    return None


def _on_data_device(fn):
    """`fn` run inside `keras.device` of its first tensor argument's device when that is not
    Keras's current one; `fn` itself where only one device exists (a CPU-only machine)."""
    if not MANY_DEVICES:
        return fn

    @functools.wraps(fn)
    def run(*args, **kwargs):
        first = _first_tensor(args)
        if first is None or first.device == current_device():
            return fn(*args, **kwargs)
        with keras.device(str(first.device)):
            return fn(*args, **kwargs)

    run.__wrapped__ = fn
    return run


def _tree_map(fn, tree):
    leaves = []
    structure = _flatten(tree, leaves)
    return _unflatten(structure, iter([fn(leaf) for leaf in leaves]))


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


def hessian_vector_product(fn, params, vector):
    """`H v`: the Hessian of the scalar `fn(params)` at `params` (a list of tensors) times `vector`
    (a list of the same shapes), as a list: the gradient of `grad(fn) . v`, the first gradient
    taken with its graph (`create_graph`)."""
    params = [p.detach().requires_grad_(True) for p in params]
    with torch.enable_grad():
        grads = torch.autograd.grad(fn(params), params, create_graph=True, allow_unused=True)
        dot = sum((g * v).sum() for g, v in zip(grads, vector) if g is not None)
        if not isinstance(dot, torch.Tensor) or not dot.requires_grad:  # fn is linear in params
            return [torch.zeros_like(p) for p in params]
        products = torch.autograd.grad(dot, params, allow_unused=True)
    return [torch.zeros_like(p) if h is None else h.detach() for p, h in zip(params, products)]


def adam_moments_steps(params, grads, ms, vs, alpha, beta_1, beta_2, epsilon):
    """`kerasrl.optim.adam_moments_step` for every weight of a model at once, with PyTorch's
    multi-tensor (foreach) kernels: 7 ops for the whole model, where the generic version runs 12
    per weight. `lerp(a, b, w)` is `a + (b - a) * w` and `addcdiv(p, x, y, value=-1)` is
    `p - x / y`; nothing fuses them on this backend. Bit for bit the per-weight kernels (lerp,
    addcdiv) that ran before (checked when this was written); on CUDA they launch a few fused kernels instead of one per op and
    weight (why `torch.optim.Adam` takes them by default there); not timed on a GPU here. On a CPU
    they loop over the weights inside one op: per-step DQN's compiled loop ran 906 steps/s with
    them and 913 without (one core, within run-to-run noise). Returns new params, m and v."""
    ms = torch._foreach_lerp(ms, grads, 1.0 - beta_1)
    vs = torch._foreach_lerp(vs, torch._foreach_mul(grads, grads), 1.0 - beta_2)
    roots = torch._foreach_sqrt(vs)
    # PyTorch's placement makes epsilon a tensor (it depends on the step): added root by root,
    # since _foreach_add of a tensor reads its value, which a traced graph cannot do.
    if isinstance(epsilon, torch.Tensor):
        denominators = [root + epsilon for root in roots]
    else:
        denominators = torch._foreach_add(roots, epsilon)
    return torch._foreach_addcdiv(params, torch._foreach_mul(ms, alpha), denominators, value=-1.0), ms, vs


def inference():
    """Acting must not build an autograd graph."""
    return torch.no_grad()


def on_cpu() -> bool:
    """Whether computations run on the CPU (no CUDA, MPS or XPU device)."""
    return not MANY_DEVICES


def devices() -> list[str]:
    """Every device PyTorch sees, named as `keras.device` takes them: "cpu" (PyTorch has one CPU
    device), then "gpu:0", "gpu:1", ... for CUDA devices."""
    return ["cpu"] + [f"gpu:{i}" for i in range(torch.cuda.device_count())]


def configure_precision(full: bool = True) -> None:
    """float32 matrix products and cuDNN convolutions at full float32 precision (`full`: no
    TensorFloat-32 on Ampere and later GPUs), or at PyTorch's defaults (full for matrix products,
    TensorFloat-32 for cuDNN convolutions). The CPU computes float32 in full either way.

    PyTorch's older flags, not the `fp32_precision` ones of 2.9: a process that mixes the two
    raises when the older ones are read, and other libraries read them."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = not full
    torch.set_float32_matmul_precision("highest")


def configure_threads() -> None:
    """One thread unless KERASRL_TORCH_THREADS says otherwise.

    At its default thread count PyTorch ran 5x to 50x slower on this 2-core machine under any other
    load; small networks gain nothing from more threads.
    """
    torch.set_num_threads(int(os.environ.get("KERASRL_TORCH_THREADS", "1")))


def write_rows(array, rows, values):
    """`values` written into `array` at the first-axis indices `rows`, in place, where a
    functional scatter would copy the whole array (a 100,000-row replay buffer: about 8 ms an env
    step). Between graphs, or inside one: a traced graph then writes that input in place (tracing
    runs on copies, `kerasrl.backend.torch_fast`)."""
    array.index_copy_(0, rows.long(), values.to(array.dtype))
    return array


def compile_unrolled(step, count: int, fn, any_size: bool = False):
    """`fn(start, carry)`, which runs `step(start + j, carry)` for j in [0, count) (returning
    the carry), compiled from one traced step repeated (`compile` would trace every step: 1 to
    3 ms an op); `fn` eagerly where that fails, or where `compile` would run eagerly. `any_size`:
    traced however many ops a step runs (`compile` runs calls of more than
    torch_fast.MAX_OPS eagerly, as a trace costs about 0.3 ms an op), for a step run so often
    that its trace pays."""
    fast = _fast_module() if fast_paths() and os.environ.get("KERASRL_TORCH_TRACE", "1") != "0" else None
    if os.environ.get("KERASRL_TORCH_COMPILE") == "1" or fast is None or fast.support() is None:
        return compile(fn)
    return _on_data_device(functools.wraps(fn)(fast.Traced(fn, current_device, MANY_DEVICES, step, count,
                                                           any_size=any_size)))


def count_ops(fn, *args):
    """The number of aten ops `fn(*args)` runs (it runs, eagerly), or None where ops cannot be
    counted (the fast paths are off or unavailable)."""
    fast = _fast_module() if fast_paths() else None
    if fast is None or fast.support() is None:
        return None
    with fast.OpCounter() as counter, torch.no_grad():
        fn(*args)
    return counter.n_ops


def fori_loop(lower, upper, body, init, unroll=1):
    """`body(i, carry)` from lower to upper: a Python loop, unrolled into the trace."""
    del unroll
    carry = init
    for i in range(lower, upper):
        carry = body(i, carry)
    return carry


def to_tensors(tree):
    """Numpy arrays (any nesting) to tensors on Keras's current device (`current_device`),
    sharing memory on the CPU where the dtype allows."""
    device = current_device()
    return _tree_map(lambda x: _as_tensor(x, device), tree)


feed = to_tensors


def to_numpy(tree):
    """Tensors (any nesting of lists, tuples and dicts) to numpy."""
    return _tree_map(
        lambda x: x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x), tree
    )


def check_traceable(fn, batch) -> None:
    """Raise where `fn(batch)` reads a tensor's value in Python: a traced step would keep the
    branch taken while tracing for every later call.

    `torch.func.vmap` refuses exactly that (data-dependent control flow, `.item()`, `.numpy()`);
    other vmap limits (an op without a batching rule) say nothing about the model and pass.
    `batch`: an array or a tree (dicts, lists) of them, each with a leading batch axis.
    """
    from torch.utils._pytree import tree_map

    try:
        device = current_device()
        torch.func.vmap(lambda x: fn(tree_map(lambda t: t[None], x)), randomness="different")(
            tree_map(lambda a: _as_tensor(np.asarray(a), device), batch))
    except RuntimeError as error:
        message = str(error)
        reads_values = ("data-dependent", ".item()", "numpy", "doesn't have storage")
        if any(text in message for text in reads_values):
            raise
