"""The backend layer: the only place in kerasrl that imports jax, tensorflow or torch.

Importing this package settles which Keras backend runs (see `select_backend`) and exposes, from one
module per backend, the same few functions, as Keras does in `keras/src/backend/__init__.py`:

- `compile(fn)`: a compiled version of a pure function of arrays (jit, tf.function, or eager).
- `value_and_grad(fn)`: `fn(params, *args) -> (loss, aux)` becomes
  `f(params, *args) -> ((loss, aux), grads)`, gradients taken with respect to `params` only.
- `inference()`: a context in which no autograd graph is recorded.
- `configure_threads()`: thread counts that suit a small network on a small machine.
- `to_numpy(x)`: a backend tensor (or nested structure of them) as numpy.
- `to_tensors(x)`: numpy arrays (any nesting) as backend tensors, for state kept between calls.
- `feed(x)`: numpy inputs of one compiled call in the form that call takes fastest.
- `fori_loop(lower, upper, body, init, unroll)`: a loop inside a compiled step.
- `on_cpu()`: whether computations run on the CPU (no accelerator).
- `write_rows(array, rows, values)`: rows of a storage held as tensors (a replay buffer) written in
  place between graphs (PyTorch); None elsewhere, where `scatter_rows` (one `keras.ops` scatter,
  updated in place by XLA inside compiled loops) serves.
- `check_traceable(fn, batch)`: trace `fn(batch)` without running it; raises where `fn` reads a
  tensor value in Python (checked when an agent is made, see `networks.check_drivable`).
- `adam_moments_step`: faster kernels for one weight's Adam update where the backend has them
  (PyTorch), else None and `kerasrl.optim` runs its `keras.ops` version (which XLA fuses).

Everything else in kerasrl is written once with `keras.ops` and numpy.

Fast paths on private framework APIs. Where a private API measurably pays, it lives in one module
per backend: `torch_fast` (graphs traced with make_fx and replayed by TorchScript, oneDNN matrix
products) and `tensorflow_fast` (calling traced functions through `ConcreteFunction._call_flat`,
shapes through `EagerTensor._shape_tuple`). Each is guarded: when a private API is missing, raises
or computes something else (a framework upgrade), kerasrl uses the public path instead (eager
PyTorch or a slower graph; TensorFlow's public calls), with one RuntimeWarning naming what failed,
and the same results. Set the environment variable `KERASRL_FAST_PATHS=0` (before the backend is
first used) to take the public paths only; JAX has no fast paths.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import warnings

SUPPORTED = ("jax", "tensorflow", "torch")
# The extra that installs each backend's framework, for error messages.
EXTRAS = {"jax": "jax", "tensorflow": "tensorflow", "torch": "torch"}
# The framework module whose presence means a backend can run.
_FRAMEWORK = {"jax": "jax", "tensorflow": "tensorflow", "torch": "torch"}
# Fastest first, as measured on a 2-core CPU machine (BENCHMARKS.md): used when the user chose none.
PREFERENCE = ("jax", "tensorflow", "torch")


class BackendError(RuntimeError):
    """The requested backend is unknown or its framework is not installed."""


def installed_backends() -> list[str]:
    """Backends whose framework is importable, in order of preference (nothing is imported)."""
    return [name for name in PREFERENCE if importlib.util.find_spec(_FRAMEWORK[name]) is not None]


def check_backend_name(name: str) -> str:
    """Return `name` if kerasrl can run on it, else raise a BackendError that says what to do."""
    if name not in SUPPORTED:
        raise BackendError(
            f"Unknown Keras backend {name!r}. kerasrl runs on {', '.join(SUPPORTED)}: "
            f"set KERAS_BACKEND (or pass --backend) to one of them."
        )
    if importlib.util.find_spec(_FRAMEWORK[name]) is None:
        raise BackendError(
            f"The {name!r} backend was requested but {_FRAMEWORK[name]!r} is not installed. "
            f"Install it with: pip install 'kerasrl[{EXTRAS[name]}]'"
        )
    return name


def select_backend() -> str:
    """Settle the Keras backend before Keras is imported, and return its name.

    The user's choice wins: KERAS_BACKEND, or the backend of a Keras already imported. Only when
    there is none does kerasrl pick the fastest installed backend.
    """
    if "keras" in sys.modules:  # Keras has already fixed its backend; respect it.
        import keras

        return check_backend_name(keras.backend.backend())
    chosen = os.environ.get("KERAS_BACKEND")
    if chosen:
        return check_backend_name(chosen)
    available = installed_backends()
    if not available:
        raise BackendError(
            "No Keras backend is installed. Install one with: pip install 'kerasrl[jax]' "
            "(or [tensorflow], [torch], or [all])."
        )
    os.environ["KERAS_BACKEND"] = available[0]
    return available[0]


def use(name: str) -> str:
    """Choose the backend by name before Keras is imported (the CLI's --backend)."""
    global NAME, COMPILED_LOOPS
    check_backend_name(name)
    if "keras" in sys.modules:
        import keras

        if keras.backend.backend() != name:
            raise BackendError(
                f"Keras is already running on {keras.backend.backend()!r}; the backend cannot "
                f"change to {name!r} in the same process. Set KERAS_BACKEND={name} before "
                f"importing keras or kerasrl."
            )
    os.environ["KERAS_BACKEND"] = name
    NAME = name
    COMPILED_LOOPS = name != "torch"
    return name


NAME = select_backend()
# Whether `fori_loop` inside `compile` runs as a compiled loop (XLA on JAX and TensorFlow). On
# PyTorch it is a Python loop, and a longer call gains nothing.
COMPILED_LOOPS = NAME != "torch"
# Keras imports TensorFlow (when installed) on every backend; keep its start-up banner quiet. Must be
# set before TensorFlow is imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

_FELL_BACK: set[str] = set()  # fast paths that failed and were warned about


def fast_paths() -> bool:
    """Whether the backends may take their fast paths on private framework APIs: yes unless the
    environment variable KERASRL_FAST_PATHS is 0 (or false, no, off)."""
    return os.environ.get("KERASRL_FAST_PATHS", "1").strip().lower() not in ("0", "false", "no", "off")


def fall_back(what: str, error: BaseException, instead: str) -> None:
    """Warn, once per `what`, that the fast path through `what` failed with `error` and that
    `instead` happens (its public fallback)."""
    if what in _FELL_BACK:
        return
    _FELL_BACK.add(what)
    warnings.warn(
        f"kerasrl: the fast path through {what} failed ({type(error).__name__}: "
        f"{str(error).strip()[:300]}), so {instead}; results are the same. This PyTorch or "
        f"TensorFlow release may have changed a private API; KERASRL_FAST_PATHS=0 takes the "
        f"public paths without trying.", RuntimeWarning, stacklevel=3)


# The implementation is imported on first use, so that `import kerasrl` settles the backend
# without paying for Keras and its framework until an agent is made.
_FUNCTIONS = ("compile", "value_and_grad", "inference", "configure_threads", "to_numpy", "to_tensors",
              "feed", "fori_loop", "check_traceable", "on_cpu")
# Faster kernels for a generic `keras.ops` computation, where a backend has them; None elsewhere.
# - `adam_moments_step`: see `kerasrl.optim.adam_moments_step`.
# - `write_rows`: in place where loops are Python (PyTorch); `scatter_rows` below elsewhere.
_OPTIONAL = ("adam_moments_step", "write_rows")


def scatter_rows(array, rows, values):
    """`values` written into `array` at the first-axis indices `rows` (int32, (n,)): a new array,
    a scatter that XLA updates in place inside a compiled loop (JAX, TensorFlow)."""
    from keras import ops

    return ops.scatter_update(array, ops.expand_dims(rows, -1), values)


def __getattr__(name: str):
    if name in _FUNCTIONS or name in _OPTIONAL:
        impl = importlib.import_module(f"kerasrl.backend.{NAME}")
        for function in _FUNCTIONS:
            globals()[function] = getattr(impl, function)
        for function in _OPTIONAL:
            globals()[function] = getattr(impl, function, None)
        return globals()[name]
    raise AttributeError(f"module 'kerasrl.backend' has no attribute {name!r}")


__all__ = [
    "COMPILED_LOOPS",
    "NAME",
    "SUPPORTED",
    "BackendError",
    "check_backend_name",
    "fall_back",
    "fast_paths",
    "installed_backends",
    "select_backend",
    "scatter_rows",
    "use",
    *_FUNCTIONS,
    *_OPTIONAL,
]
