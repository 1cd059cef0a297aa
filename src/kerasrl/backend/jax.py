"""JAX: `jax.jit` and `jax.value_and_grad`. The fastest backend for small networks on a CPU."""

from __future__ import annotations

import contextlib

import jax
import numpy as np


def compile(fn, donate_state: bool = False):  # noqa: A001
    """Jit `fn`. With `donate_state`, the first argument's buffers are reused for the result."""
    return jax.jit(fn, donate_argnums=(0,) if donate_state else ())


def value_and_grad(fn):
    """`fn(params, *args) -> (loss, aux)` to `f(params, *args) -> ((loss, aux), grads)`."""
    return jax.value_and_grad(fn, has_aux=True)


def hessian_vector_product(fn, params, vector):
    """`H v`: the Hessian of the scalar `fn(params)` at `params` (a list of arrays) times `vector`
    (a list of the same shapes), as a list; forward-mode over reverse-mode differentiation."""
    return jax.jvp(jax.grad(fn), (params,), (vector,))[1]


def inference():
    """JAX records no graph outside a transformation: nothing to switch off."""
    return contextlib.nullcontext()


def configure_threads() -> None:
    """Run computations on the calling thread instead of dispatching them to XLA's worker.

    Asynchronous dispatch hands each call to a worker thread and returns at once; when the result
    is needed right away (acting, every env step) Python then waits for that thread to wake,
    run, and wake it in turn. Between env steps the worker falls asleep, and the round trip cost
    60 to 90 us against 15 us inline (a 256x256 MLP at batch 1, this 2-core machine); the RL-Zoo
    CartPole DQN ran 25 % faster inline. The setting is read when JAX creates its CPU client (on
    the first array), so it takes effect only if no JAX array exists yet; XLA's thread pool size
    is set through XLA_FLAGS before start-up.
    """
    jax.config.update("jax_cpu_enable_async_dispatch", False)


def on_cpu() -> bool:
    """Whether computations run on the CPU (no GPU or TPU)."""
    return jax.default_backend() == "cpu"


def convolution_batch_limit() -> int | None:
    """The largest batch that a model with Keras convolutions takes in one piece (see
    `kerasrl.models.stateless_apply`), or None: no limit.

    XLA's CPU convolutions under JAX train at half their per-sample rate on batches over 64: the
    Nature CNN's gradient step on one AMD EPYC core took 1.4 ms a sample at batches of 32 and 64,
    2.3 at 128 and 2.7 to 3.3 at 256, and 256 applied as four pieces of 64 inside the same
    compiled step ran 1.6x to 1.9x faster. TensorFlow's XLA (1.6 ms a sample at 256, 5% faster in
    pieces) and PyTorch (1.25) have no such step, and GPUs want large batches: CPU only, JAX only.
    """
    return 64 if on_cpu() else None


def devices() -> list[str]:
    """Every device JAX sees, named as `keras.device` takes them: "cpu:0", ..., then "gpu:0", ...
    (or "tpu:0", ...) when an accelerator is the default backend."""
    names = [f"cpu:{d.id}" for d in jax.devices("cpu")]
    if jax.default_backend() != "cpu":
        names += [f"{d.platform}:{d.id}" for d in jax.devices()]
    return names


def configure_precision(full: bool = True) -> None:
    """float32 matrix products and convolutions at full float32 precision (`full`), or at XLA's
    default, which on a GPU with TensorFloat-32 (Ampere and later) rounds their inputs to 10
    mantissa bits. XLA's CPU backend computes float32 in full either way."""
    jax.config.update("jax_default_matmul_precision", "highest" if full else None)


def fori_loop(lower, upper, body, init, unroll=1):
    """`body(i, carry)` from lower to upper, `unroll` iterations per compiled loop step.

    XLA on the CPU runs a loop body several times slower than the same ops outside a loop (a
    small conv net: 10x), so short loops are best unrolled.
    """
    return jax.lax.fori_loop(lower, upper, body, init, unroll=unroll)


def to_tensors(tree):
    """Numpy arrays (any nesting) to device arrays (for state kept between compiled calls), on
    the device of the `keras.device` scope, committed to it: a jitted call then runs there, and
    one that mixes them with arrays committed to another device raises instead of copying. With
    no scope, on the default device, uncommitted (as `jnp.asarray` makes them)."""
    device = jax.config.jax_default_device  # what keras.device sets (jax.default_device)
    if device is None:
        # `jnp.asarray` compiled a conversion for each new shape (20-70 ms each on a CPU: 0.4 s of
        # a compiled loop's setup); device_put copies numpy without compiling (never sharing
        # its memory, which asarray did for large arrays) and keeps device arrays as they are.
        return jax.tree_util.tree_map(
            lambda x: x if isinstance(x, jax.Array) else jax.device_put(x, may_alias=False), tree)
    return jax.device_put(tree, device)


def feed(tree):
    """Inputs for one compiled call: jitted functions take numpy directly, fastest that way, and
    move it to the device their state is committed to (or the `keras.device` scope's)."""
    return tree


def to_numpy(tree):
    """Device arrays (any nesting of lists, tuples and dicts) to numpy."""
    if isinstance(tree, jax.Array):  # one array (acting, every env step): skip the tree walk
        return np.asarray(tree)
    return jax.tree_util.tree_map(np.asarray, tree)


def check_traceable(fn, batch) -> None:
    """Trace `fn(batch)` on shapes alone (nothing runs): raises where `fn` reads a tensor's value
    in Python, which a compiled step cannot do. `batch`: an array or a tree of them."""
    jax.eval_shape(fn, batch)


# jax2onnx's plugin trees that a Keras model never needs: equinox's plugins build example equinox
# modules when imported (96 XLA programs, 6 of the 9 s that `kerasrl export --format onnx` took on
# one core, jax2onnx 0.17), and `examples` registers jax2onnx's own test cases.
ONNX_PLUGINS_LEFT_OUT = ("equinox", "examples")


_onnx_plugins_narrowed = False


def narrow_onnx_plugins() -> bool:
    """Load jax2onnx's conversion plugins for a Keras model's JAX primitives ahead of its first
    conversion, which would otherwise import every plugin tree (ONNX_PLUGINS_LEFT_OUT too).
    True while only those are loaded; False where jax2onnx has loaded all of them, or discovers
    its plugins in a way this does not know (a release that renamed them: nothing is done then).
    `widen_onnx_plugins` loads the rest."""
    global _onnx_plugins_narrowed
    try:
        from jax2onnx.plugins import plugin_system
    except ImportError:
        return False
    import_tree = getattr(plugin_system, "_import_tree", None)
    if import_tree is None or getattr(plugin_system, "_already_imported_plugins", None) is not False:
        return _onnx_plugins_narrowed  # narrowed by an earlier export, or all loaded, or unknown
    from pathlib import Path

    root = Path(plugin_system.__file__).parent
    for tree in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("_")):
        if tree.name not in ONNX_PLUGINS_LEFT_OUT:
            import_tree(tree, f"jax2onnx.plugins.{tree.name}")
    plugin_system._already_imported_plugins = True
    _onnx_plugins_narrowed = True
    return True


def widen_onnx_plugins() -> None:
    """Every jax2onnx plugin, as its own first conversion loads them (after `narrow_onnx_plugins`,
    for a model that needs one of the plugins left out)."""
    global _onnx_plugins_narrowed
    from jax2onnx.plugins import plugin_system

    plugin_system._already_imported_plugins = False
    plugin_system.import_all_plugins()
    _onnx_plugins_narrowed = False
