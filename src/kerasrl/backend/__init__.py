"""The backend layer: the only place in kerasrl that imports jax, tensorflow or torch.

Importing this package settles which Keras backend runs and exposes, from one module per backend,
the same few functions, as Keras does in `keras/src/backend/__init__.py`:

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
- `devices()`: the devices the framework sees, named as `keras.device` takes them ("cpu:0",
  "gpu:1"); `kerasrl.devices` checks an agent's `device=` against them.
- `configure_precision(full=True)`: float32 matrix products at full precision (no TensorFloat-32
  on GPUs), which agents set unless KERASRL_FULL_PRECISION=0 (docs/reproducibility.md).

Devices: every tensor these functions make (`to_tensors`, `feed`, the scalars a compiled call
takes) lives on the device of the current `keras.device` scope (else the framework's default),
and where more than one device is visible a compiled call runs on the device of its first tensor
argument (JAX does that by itself). See docs/gpu.md.
- `write_rows(array, rows, values)`: rows of a storage held as tensors (a replay buffer) written in
  place between graphs (PyTorch); None elsewhere, where `scatter_rows` (one `keras.ops` scatter,
  updated in place by XLA inside compiled loops) serves.
- `check_traceable(fn, batch)`: trace `fn(batch)` without running it; raises where `fn` reads a
  tensor value in Python (checked when an agent is made, see `models.check_drivable`).
- `adam_moments_steps`: faster kernels for the Adam update of every weight at once where the
  backend has them (PyTorch's multi-tensor ops), else None and `kerasrl.optim` runs its
  `keras.ops` version weight by weight (which XLA fuses).

Everything else in kerasrl is written once with `keras.ops` and numpy.

Fast paths on private framework APIs. Where a private API measurably pays, it lives in the
fast-path modules of its backend: `torch_fast` (graphs traced with make_fx and replayed by
TorchScript; its graph rewrites, oneDNN matrix products among them, in `torch_fast_rewrites`) and
`tensorflow_fast` (calling traced functions through `ConcreteFunction._call_flat`, shapes through
`EagerTensor._shape_tuple`). Each is guarded: when a private API is missing, raises or computes
something else (a framework upgrade), kerasrl uses the public path instead (eager PyTorch or a
slower graph; TensorFlow's public calls), with one RuntimeWarning naming what failed, and the same
results. Set the environment variable `KERASRL_FAST_PATHS=0` (before the backend is
first used) to take the public paths only; JAX has no fast paths.

Which backend runs: one rule, applied when kerasrl is imported.
1. Keras already imported (`import keras` before `import kerasrl`): Keras's backend stands, since it
   cannot change within a process. Keras took KERAS_BACKEND if set, else `~/.keras/keras.json`,
   else its own default, TensorFlow.
2. Otherwise KERAS_BACKEND, when set (the CLI's `--backend` sets it too, through `use`).
3. Otherwise the fastest installed, in the order of PREFERENCE: JAX, TensorFlow, PyTorch.
   `keras.json` is not read: Keras writes `"backend": "tensorflow"` there on its first import, so
   the file does not show a choice.
The first agent made in a process says which backend runs and which of these applied, at INFO on
the "kerasrl" logger (`announce`; `kerasrl train` shows these lines). `kerasrl backends` says it too.

No framework that the running backend does not need is imported: third-party code that imports
every framework it finds (tensorboardX imports PyTorch; Keras's model serialization TensorFlow) runs
inside `unused_frameworks_hidden()`. Keras itself imports JAX on every backend when it is installed;
that is Keras's, not kerasrl's.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
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
    """Settle the Keras backend before Keras is imported, and return its name (the rule above)."""
    return _choose()[0]


def _choose() -> tuple[str, str]:
    """(backend, why it runs) by the rule in this module's docstring; sets KERAS_BACKEND when
    kerasrl picks."""
    if "keras" in sys.modules:  # Keras has already fixed its backend; respect it.
        import keras

        name = check_backend_name(keras.backend.backend())
        if os.environ.get("KERAS_BACKEND") == name:
            return name, f"KERAS_BACKEND={name}"
        why = ("Keras was imported before kerasrl and chose it, from ~/.keras/keras.json or its "
               "default, tensorflow")
        fastest = installed_backends()[0]
        if fastest != name:
            why += (f"; set KERAS_BACKEND={fastest}, or import kerasrl before keras, to run on "
                    f"{fastest}, the fastest installed")
        return name, why
    chosen = os.environ.get("KERAS_BACKEND")
    if chosen:
        return check_backend_name(chosen), f"KERAS_BACKEND={chosen}"
    available = installed_backends()
    if not available:
        raise BackendError(
            "No Keras backend is installed. Install one with: pip install 'kerasrl[jax]' "
            "(or [tensorflow], [torch], or [all])."
        )
    os.environ["KERAS_BACKEND"] = available[0]
    return available[0], (f"the fastest installed of {', '.join(available)}; set KERAS_BACKEND "
                          f"to choose")


def use(name: str) -> str:
    """Choose the backend by name before Keras is imported (the CLI's --backend)."""
    global NAME, REASON, COMPILED_LOOPS
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
    NAME, REASON = name, "chosen with --backend, or kerasrl.backend.use"
    COMPILED_LOOPS = name != "torch"
    return name


NAME, REASON = _choose()  # REASON: why NAME runs, in words (see `announce`)
_ANNOUNCED = False


def announce() -> None:
    """Say which backend runs and why, once per process: at INFO on the "kerasrl" logger (which
    `kerasrl train` shows). Called when an agent is made."""
    global _ANNOUNCED
    if not _ANNOUNCED:
        _ANNOUNCED = True
        logging.getLogger("kerasrl").info("Keras backend: %s (%s).", NAME, REASON)


@contextlib.contextmanager
def unused_frameworks_hidden():
    """Within: the frameworks that the running backend does not need, and that this process has
    not imported, cannot be imported (ImportError, as when they are not installed).

    For third-party code that imports every framework it finds, just in case, and works without
    them: tensorboardX imports PyTorch (to recognise its tensors), Keras's serialization
    (`model.save`, `to_json`) TensorFlow (to recognise a `tf.TensorShape`): 1.5 s and
    TensorFlow's log lines in a JAX run. No object of a framework that is not imported can be in
    what they look at, so only the time changes.

    Keras remembers a failed import in its private `keras.src.utils.module_utils` LazyModules
    (`tensorflow`, `gfile`) and would go on taking TensorFlow as missing (its preprocessing
    layers would refuse to be made): what they remembered is restored on exit. Where a Keras
    release holds that elsewhere, nothing is hidden: the frameworks are imported as before.
    """
    hidden = [module for backend_name, module in _FRAMEWORK.items()
              if backend_name != NAME and module not in sys.modules]
    remembered = _keras_import_memory(hidden)
    if remembered is None:
        hidden = []
    for module in hidden:
        sys.modules[module] = None  # the import system's own "not importable" mark
    try:
        yield
    finally:
        for module in hidden:
            if module in sys.modules and sys.modules[module] is None:
                del sys.modules[module]
        for lazy, state in (remembered or {}).items():
            lazy._available, lazy.module = state


def _keras_import_memory(modules: list[str]) -> dict | None:
    """{Keras LazyModule of one of `modules`: (its _available, its module)}; None when Keras's
    private module_utils is not as this code knows it (see `unused_frameworks_hidden`)."""
    try:
        from keras.src.utils import module_utils
    except ImportError:
        return None
    # vars(), not getattr: a LazyModule imports its module to answer an attribute it lacks.
    lazies = [vars(value) | {"self": value} for value in vars(module_utils).values()
              if isinstance(value, vars(module_utils).get("LazyModule", ()))]
    if not any(lazy.get("name") == "tensorflow" for lazy in lazies) or not all(
            {"name", "_available", "module"} <= lazy.keys() for lazy in lazies):
        return None
    return {lazy["self"]: (lazy["_available"], lazy["module"]) for lazy in lazies
            if lazy["name"].split(".")[0] in modules}


# Whether `fori_loop` inside `compile` runs as a compiled loop (XLA on JAX and TensorFlow). On
# PyTorch it is a Python loop, and a longer call gains nothing.
COMPILED_LOOPS = NAME != "torch"
# Where TensorFlow is imported (its backend, a SavedModel export), keep its start-up banner quiet.
# Must be set before TensorFlow is imported.
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
_FUNCTIONS = ("compile", "value_and_grad", "hessian_vector_product", "inference", "configure_threads",
              "to_numpy", "to_tensors",
              "feed", "fori_loop", "check_traceable", "on_cpu", "devices", "configure_precision")
# Faster kernels for a generic `keras.ops` computation, where a backend has them; None elsewhere.
# - `adam_moments_steps`: `kerasrl.optim.adam_moments_step` for every weight at once.
# - `write_rows`: in place where loops are Python (PyTorch); `scatter_rows` below elsewhere.
# - `count_ops`, `compile_unrolled`: the ops a call runs, and a loop's chunk compiled from one
#   traced step (PyTorch, whose loops are Python: kerasrl.backend.chunks).
# - `convolution_batch_limit`: the batch a convolutional model takes in one piece (JAX on a CPU).
# - `narrow_onnx_plugins`, `widen_onnx_plugins`: load only the converter plugins that a Keras
#   model's ONNX export needs, and the rest where it needs more (JAX's jax2onnx).
_OPTIONAL = ("adam_moments_steps", "write_rows", "count_ops", "compile_unrolled",
             "convolution_batch_limit", "narrow_onnx_plugins", "widen_onnx_plugins")


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
    "REASON",
    "announce",
    "check_backend_name",
    "fall_back",
    "fast_paths",
    "installed_backends",
    "select_backend",
    "unused_frameworks_hidden",
    "scatter_rows",
    "use",
    *_FUNCTIONS,
    *_OPTIONAL,
]
