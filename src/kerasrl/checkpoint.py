"""Checkpoints: backend-neutral folders, written atomically, verified before anything is parsed.

A checkpoint is a folder:

    manifest.json        format and version, kerasrl version, algorithm, backend, env id, and the
                         size and sha256 of every other file (checked before any file is parsed)
    config.json          the agent's config (its dataclass fields) and how it was made
    model.keras          architecture and online weights (Keras serialization, loaded with
                         safe_mode=True)
    policy.json          the policy's type and spaces, so that `kerasrl.load_policy` reads the
                         checkpoint like a policy folder
    training_state.npz   every array of `agent.state_dict()` and of the environments (read with
                         allow_pickle=False)
    state.json           the JSON half of `agent.state_dict()`, the environments' plain state,
                         and the run's total_steps

Nothing here unpickles or evaluates code. A folder appears under its final name only complete:
it is written beside it under a temporary name, fsynced, and renamed.

Only agents' public methods are used: `state_dict()` / `load_state_dict()` (the loop state, see
`kerasrl.agents.base.LoopState`, learner, buffers, RNG, history), `policy`, `reset_envs()`.

Environment state: `Agent.state_dict` leaves the envs out; here every layer of every sub-env (each
wrapper and the unwrapped env) and the vector env itself is captured generically, attribute by
attribute: numbers, strings, None, arrays, numpy Generators (their bit-generator state), and
lists, tuples, deques and dicts of those. Configuration objects (spaces, specs, enums, the
wrapped env, callables) are skipped: they are rebuilt from the env id. An env with any other
attribute (or one running in worker processes) cannot be restored exactly; it is then reset on
load, with a warning.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
import zipfile
from collections import deque
from pathlib import Path
from typing import Any

import gymnasium as gym
import keras
import numpy as np

from kerasrl import __version__, backend, devices, registry
from kerasrl.networks import adapt_model, dummy_observation
from kerasrl.runfiles import CHECKPOINT_NAME, CHECKPOINT_PREFIX, MANIFEST, list_checkpoints, writing
from kerasrl.spaces import FlatObservations, structure_of

FORMAT_VERSION = 1
CHECKPOINT_FORMAT = "kerasrl-checkpoint"
POLICY_FORMAT = "kerasrl-policy"


class CheckpointError(ValueError):
    """A checkpoint or policy folder is missing, damaged, of an unknown version, or unsafe."""


# -- files: atomic folders, checksums, manifests ----------------------------------------------
def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_path(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_folder(path, what: str = "folder"):
    """Yield a temporary folder beside `path`; on success it replaces `path` in one rename.

    Files are fsynced, then the folder, then the parent, so that after a crash `path` is either
    the previous complete folder or the new complete one, never a mix. (Replacing an existing
    folder takes two renames: for a moment only the old one exists, under a hidden backup name;
    `ckpt-<step>` folders are always new names.) A write that fails (no space, no permission, a
    read-only filesystem) removes the temporary folder and raises `WriteError` naming `what` and
    `path`, and for a `ckpt-<step>` folder the newest complete checkpoint beside it.
    """
    path = Path(path)
    checkpoints = run = None
    if CHECKPOINT_NAME.match(path.name):  # a failed checkpoint of a run: resume from its newest sibling
        checkpoints = path.parent
        run = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    with writing(what, path, checkpoints=checkpoints, run=run):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
        try:
            yield tmp
            for file in tmp.iterdir():
                _fsync_path(file)
            _fsync_path(tmp, directory=True)
            backup = None
            if path.exists():
                backup = path.parent / f".{path.name}.old-{os.getpid()}"
                os.replace(path, backup)
            os.replace(tmp, path)
            _fsync_path(path.parent, directory=True)
            if backup is not None:
                shutil.rmtree(backup, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=1, default=_json_default, allow_nan=True))


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON data")


def write_manifest(folder: Path, header: dict[str, Any]) -> None:
    """The manifest of every file now in `folder`, with the format version; written last."""
    files = {file.name: {"bytes": file.stat().st_size, "sha256": sha256_file(file)}
             for file in sorted(folder.iterdir()) if file.name != MANIFEST}
    write_json(folder / MANIFEST, {**header, "format_version": FORMAT_VERSION,
                                   "kerasrl_version": __version__, "files": files})


def read_manifest(folder, formats=(CHECKPOINT_FORMAT, POLICY_FORMAT)) -> dict[str, Any]:
    """The manifest of a checkpoint or policy folder, with its format and version checked."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"No such checkpoint or policy folder: {folder}")
    path = folder / MANIFEST
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: {folder} is not a complete kerasrl checkpoint "
                              f"or policy folder (it may be an interrupted write).")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} is damaged (not valid JSON: {error}).") from None
    if not isinstance(manifest, dict) or manifest.get("format") not in formats:
        raise CheckpointError(f"{path} is not a kerasrl manifest of format "
                              f"{' or '.join(formats)} (format: {manifest.get('format')!r}).")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise CheckpointError(
            f"{folder} has format version {version!r}; this kerasrl "
            f"({_kerasrl_version()}) reads versions up to {FORMAT_VERSION}. It was written by "
            f"kerasrl {manifest.get('kerasrl_version', '?')}: upgrade kerasrl to load it.")
    if not isinstance(manifest.get("files"), dict):
        raise CheckpointError(f"{path} lists no files.")
    return manifest


def _kerasrl_version() -> str:
    return __version__


def verify_files(folder, manifest: dict[str, Any], names) -> None:
    """Check that each named file is listed, present, of its size, and of its sha256."""
    folder = Path(folder)
    for name in names:
        entry = manifest["files"].get(name)
        path = folder / name
        if entry is None:
            raise CheckpointError(f"{folder / MANIFEST} does not list {name}: the folder is "
                                  f"incomplete or was not written by this kind of save.")
        if not path.is_file():
            raise CheckpointError(f"{path} is missing (listed in the manifest).")
        size = path.stat().st_size
        if size != entry.get("bytes"):
            raise CheckpointError(f"{path} has {size} bytes, the manifest says {entry.get('bytes')}: "
                                  f"the file is truncated or was changed. Refusing to read it.")
        if sha256_file(path) != entry.get("sha256"):
            raise CheckpointError(f"{path} does not match its sha256 checksum in the manifest: "
                                  f"the file is damaged or was changed. Refusing to read it.")


def read_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from None


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """All arrays of an .npz file, refusing Python objects (allow_pickle=False)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except ValueError as error:
        if "allow_pickle" in str(error):
            raise CheckpointError(
                f"{path} holds Python objects (pickled data); kerasrl never unpickles. Refusing "
                f"to read it.") from None
        raise CheckpointError(f"{path} could not be read as numpy arrays: {error}") from None
    except (OSError, zipfile.BadZipFile, EOFError) as error:
        raise CheckpointError(f"{path} could not be read as an .npz file: {error}") from None


def load_keras_model(path: Path):
    """A `.keras` file, loaded with safe_mode=True (no Lambda, no unregistered classes)."""
    try:
        return keras.saving.load_model(path, safe_mode=True, compile=False)
    except Exception as error:  # Keras raises TypeError/ValueError/... for refused content
        message = str(error)
        hint = ""
        if "safe_mode" in message or "Lambda" in message or "lambda" in message:
            hint = (" The model holds a Lambda layer (arbitrary Python code), which kerasrl "
                    "never loads. Replace it by a registered layer class.")
        elif "locate" in message or "registered" in message or "Unknown" in message:
            hint = (" The model names a class Keras does not know: import the module that "
                    "defines it (decorated with @keras.saving.register_keras_serializable) "
                    "before loading.")
        raise CheckpointError(f"Keras refused to load {path}: {type(error).__name__}: "
                              f"{message.strip()[:800]}{hint}") from None


# -- environment state ------------------------------------------------------------------------
_SKIPPED_NAMES = frozenset({"env", "envs", "env_fns", "spec", "metadata", "_saved_kwargs",
                            "_cached_spec", "_metadata", "_action_space", "_observation_space",
                            "render_mode"})


class _Uncapturable(Exception):
    pass


def _is_static(value) -> bool:
    """Configuration rebuilt from the env id, not state."""
    from gymnasium.envs.registration import EnvSpec

    return (isinstance(value, (gym.Space, gym.Env, gym.vector.VectorEnv, EnvSpec, enum.Enum, type))
            or callable(value) and not isinstance(value, np.random.Generator))


def _encode(value, key: str, arrays: dict[str, np.ndarray]):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise _Uncapturable(key)
        arrays[key] = value.copy()
        return {"$array": key}
    if isinstance(value, np.generic):
        arrays[key] = np.asarray(value)
        return {"$scalar": key}
    if isinstance(value, np.random.Generator):
        return {"$generator": value.bit_generator.state}
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v, f"{key}/{i}", arrays) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{key}/{i}", arrays) for i, v in enumerate(value)]
    if isinstance(value, deque):
        return {"$deque": [_encode(v, f"{key}/{i}", arrays) for i, v in enumerate(value)],
                "maxlen": value.maxlen}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"$dict": {k: _encode(v, f"{key}/{k}", arrays) for k, v in value.items()}}
    raise _Uncapturable(key)


def _decode(value, arrays: dict[str, np.ndarray], current=None):
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    if "$array" in value:
        array = arrays[value["$array"]]
        if (isinstance(current, np.ndarray) and current.shape == array.shape
                and current.dtype == array.dtype and current.flags.writeable):
            current[...] = array  # in place: views of it (an env's flat aliases) stay views
            return current
        return array.copy()
    if "$scalar" in value:
        return arrays[value["$scalar"]][()]
    if "$generator" in value:
        state = value["$generator"]
        if isinstance(current, np.random.Generator) and \
                type(current.bit_generator).__name__ == state["bit_generator"]:
            current.bit_generator.state = state
            return current
        bit_generator = getattr(np.random, state["bit_generator"], None)
        if not (isinstance(bit_generator, type) and issubclass(bit_generator, np.random.BitGenerator)):
            raise CheckpointError(f"Unknown numpy bit generator {state['bit_generator']!r}.")
        generator = np.random.Generator(bit_generator())
        generator.bit_generator.state = state
        return generator
    if "$tuple" in value:
        return tuple(_decode(v, arrays) for v in value["$tuple"])
    if "$deque" in value:
        return deque((_decode(v, arrays) for v in value["$deque"]), maxlen=value["maxlen"])
    if "$dict" in value:
        return {k: _decode(v, arrays) for k, v in value["$dict"].items()}
    raise CheckpointError(f"Unknown encoded value {sorted(value)!r} in the saved env state.")


def _capture_object(obj, key: str, arrays) -> dict[str, Any]:
    state = {}
    for name, value in vars(obj).items():
        if name in _SKIPPED_NAMES or _is_static(value):
            continue
        state[name] = _encode(value, f"{key}/{name}", arrays)
    return state


def _layers(env: gym.Env) -> list:
    """An env and every env it wraps, outermost first."""
    layers = [env]
    while isinstance(layers[-1], gym.Wrapper):
        layers.append(layers[-1].env)
    return layers


def capture_env_state(vec_env) -> tuple[dict[str, Any] | None, dict[str, np.ndarray], str | None]:
    """(JSON state, arrays, None) of a vector env, or (None, {}, reason) if it cannot be captured."""
    if callable(getattr(vec_env, "state_dict", None)):
        arrays = {f"env/{k}": np.array(v) for k, v in vec_env.state_dict().items()}
        return {"kind": "state_dict"}, arrays, None
    arrays: dict[str, np.ndarray] = {}
    try:
        state: dict[str, Any] = {"kind": "attributes", "type": type(vec_env).__name__,
                                 "vector": _capture_object(vec_env, "env/vector", arrays)}
        sub_envs = getattr(vec_env, "envs", None)
        if isinstance(vec_env, gym.vector.AsyncVectorEnv):
            raise _Uncapturable("the envs run in worker processes (vectorization='subprocess')")
        if sub_envs is not None:
            state["envs"] = [[_capture_object(layer, f"env/{i}/{j}", arrays)
                              for j, layer in enumerate(_layers(sub))]
                             for i, sub in enumerate(sub_envs)]
    except _Uncapturable as error:
        return None, {}, f"its attribute {error.args[0]!r} is not plain data"
    return state, arrays, None


def restore_env_state(vec_env, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Put back what `capture_env_state` took (into envs made from the same id and config)."""
    if state["kind"] == "state_dict":
        vec_env.load_state_dict({k[len("env/"):]: v for k, v in arrays.items() if k.startswith("env/")})
        return
    if type(vec_env).__name__ != state["type"]:
        raise CheckpointError(f"The saved env state is of a {state['type']}, the env now is a "
                              f"{type(vec_env).__name__}.")
    _restore_object(vec_env, state["vector"], arrays)
    if "envs" in state:
        sub_envs = vec_env.envs
        if len(sub_envs) != len(state["envs"]):
            raise CheckpointError(f"The checkpoint holds {len(state['envs'])} envs, the agent has "
                                  f"{len(sub_envs)}: n_envs differs.")
        for sub, layer_states in zip(sub_envs, state["envs"]):
            layers = _layers(sub)
            if len(layers) != len(layer_states):
                raise CheckpointError("The saved env has a different stack of wrappers.")
            for layer, layer_state in zip(layers, layer_states):
                _restore_object(layer, layer_state, arrays)


def _restore_object(obj, state: dict[str, Any], arrays) -> None:
    attributes = vars(obj)
    for name, value in state.items():
        setattr(obj, name, _decode(value, arrays, attributes.get(name)))


# -- agents ------------------------------------------------------------------------------------
def save_checkpoint(agent, path) -> Path:
    """Write `agent`'s full training state to the folder `path` (atomically). Returns the path.

    Only the agent's public interface is used: `state_dict()` (its loop state, learner, buffers,
    RNG and history), `sync_model()` and `policy`, `config`, `env`."""
    path = Path(path)
    arrays, meta = agent.state_dict()
    env_state, env_arrays, reason = capture_env_state(agent.env)
    agent.sync_model()
    policy = agent.policy
    with atomic_folder(path, "checkpoint") as tmp:
        formats = _save_models(policy.models(), tmp, weights_only=False)
        write_json(tmp / "config.json", {
            "algorithm": agent.algorithm,
            "config": agent.config.to_dict(),
            "env": agent.env_name,
            "env_is_id": isinstance(agent.env_spec, str),
        })
        write_json(tmp / "policy.json", policy_header(policy, formats))
        np.savez(tmp / "training_state.npz", **arrays, **env_arrays)
        write_json(tmp / "state.json", {
            "agent": meta,
            "env": env_state,
            "env_not_captured": reason,
            "total_steps": agent.loop.total_steps,  # also in "agent"; here for older readers
        })
        write_manifest(tmp, {"format": CHECKPOINT_FORMAT, "algorithm": agent.algorithm,
                             "backend": backend.NAME, "env": agent.env_name,
                             "num_timesteps": agent.num_timesteps})
    return path


CHECKPOINT_FILES = ("config.json", "policy.json", "training_state.npz", "state.json")


def load_checkpoint(path, agent_class=None, env=None, model_factory=None, device="auto"):
    """The agent saved in the checkpoint folder `path`, ready to `fit` on from where it stopped.

    `agent_class` (e.g. kerasrl.DQN) must match the saved algorithm; None takes it from the
    checkpoint. `env` replaces the saved env id (required when the agent was made from an env
    object or a function rather than an id). `model_factory(observation_space, action_space)`
    builds the models that were saved as weights only (classes Keras could not serialize).
    `device`: where the loaded agent learns and acts (as `Agent(device=...)`; a checkpoint holds
    numpy arrays, so one written on a GPU loads on a CPU-only machine and back).
    """
    placement = devices.placement(device)
    path = Path(path)
    manifest = read_manifest(path, formats=(CHECKPOINT_FORMAT,))
    verify_files(path, manifest, CHECKPOINT_FILES)
    config = read_json(path / "config.json")
    algorithm = config.get("algorithm")
    if algorithm not in registry.AGENTS:
        raise CheckpointError(f"{path / 'config.json'} names algorithm {algorithm!r}, which this "
                              f"kerasrl does not have (known: {', '.join(sorted(registry.AGENTS))}).")
    saved_class = registry.agent_class(algorithm)
    if agent_class is not None and not issubclass(saved_class, agent_class):
        raise CheckpointError(f"{path} holds a {saved_class.__name__} ({algorithm}) checkpoint, "
                              f"not a {agent_class.__name__} one: load it with "
                              f"kerasrl.{saved_class.__name__}.load.")
    if env is None:
        if not config.get("env_is_id"):
            raise CheckpointError(
                f"{path} was saved from an agent made with an env object or function "
                f"({config.get('env')!r}), which is not stored: pass env= to load it.")
        env = config["env"]
    header = read_json(path / "policy.json")
    state = read_json(path / "state.json")
    arrays = read_npz(path / "training_state.npz")
    with placement.scope():  # the models' variables are made on the agent's device
        models = _load_models(path, header, manifest, space_from_json(header["observation_space"]),
                              space_from_json(header["action_space"]), model_factory,
                              f"{saved_class.__name__}.load")
    model = models.pop("model")
    with warnings.catch_warnings():  # the models came from model_factory: the caller knows
        warnings.filterwarnings("ignore", message=".*will be saved as weights only")
        agent = saved_class(env, model=model, **models, device=device,
                            config=saved_class.config_class.from_dict(
                                saved_class.config_class.upgrade(config["config"], warn=False)))
    agent_arrays = {k: v for k, v in arrays.items() if not k.startswith("env/")}
    env_arrays = {k: v for k, v in arrays.items() if k.startswith("env/")}
    # Checkpoints written before the loop state held total_steps keep it beside the agent's state.
    agent.load_state_dict(agent_arrays, {"total_steps": state.get("total_steps"), **state["agent"]})
    _restore_envs(agent, state, env_arrays, path)
    return agent


def _restore_envs(agent, state, env_arrays, path) -> None:
    reason = state.get("env_not_captured")
    if state.get("env") is not None:
        try:
            restore_env_state(agent.env, state["env"], env_arrays)
            return
        except (CheckpointError, AttributeError, TypeError, ValueError, KeyError) as error:
            reason = f"restoring it failed ({error})"
    if agent.loop.observations is None:
        return
    warnings.warn(
        f"The environment state in {path} could not be restored ({reason}): the envs start new "
        f"episodes, so this resume is NOT exact (weights, optimizer, replay buffer, RNG and "
        f"counters are).", stacklevel=3)
    agent.reset_envs(seed=int(agent.config.seed) + int(agent.num_timesteps))


# -- policies ---------------------------------------------------------------------------------
def space_to_json(space: gym.Space) -> dict[str, Any]:
    """A Gymnasium space as JSON (Box, Discrete, MultiDiscrete, MultiBinary; Dict and Tuple of
    those, nested too, and the flat form kerasrl carries them in)."""
    if isinstance(space, FlatObservations):
        return {"type": "FlatObservations", "structure": space_to_json(space.structure)}
    if isinstance(space, gym.spaces.Dict):  # a list of pairs: the key order is the leaves' order
        return {"type": "Dict", "spaces": [[str(k), space_to_json(v)]
                                           for k, v in space.spaces.items()]}
    if isinstance(space, gym.spaces.Tuple):
        return {"type": "Tuple", "spaces": [space_to_json(v) for v in space.spaces]}
    if isinstance(space, gym.spaces.Box):
        return {"type": "Box", "shape": list(space.shape), "dtype": space.dtype.name,
                "low": space.low.tolist(), "high": space.high.tolist()}
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist()}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    raise CheckpointError(f"Cannot save a policy for a {type(space).__name__} space; kerasrl "
                          f"saves Box, Discrete, MultiDiscrete and MultiBinary spaces, and Dict "
                          f"and Tuple spaces of those.")


def space_from_json(value: dict[str, Any]) -> gym.Space:
    kind = value.get("type")
    if kind == "FlatObservations":
        return FlatObservations(space_from_json(value["structure"]))
    if kind == "Dict":
        return gym.spaces.Dict([(key, space_from_json(v)) for key, v in value["spaces"]])
    if kind == "Tuple":
        return gym.spaces.Tuple([space_from_json(v) for v in value["spaces"]])
    if kind == "Box":
        dtype = np.dtype(value["dtype"])
        if dtype.kind not in "fiub":
            raise CheckpointError(f"Box dtype {dtype} is not numeric.")
        shape = tuple(value["shape"])
        low = np.asarray(value["low"], dtype=np.float64).reshape(shape)
        high = np.asarray(value["high"], dtype=np.float64).reshape(shape)
        return gym.spaces.Box(low.astype(dtype), high.astype(dtype), shape, dtype)
    if kind == "Discrete":
        return gym.spaces.Discrete(int(value["n"]), start=int(value.get("start", 0)))
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(value["nvec"])
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(value["n"])
    raise CheckpointError(f"Unknown space type {kind!r} in policy.json.")


def serialization_problem(model) -> str | None:
    """Why a saved copy of `model` could not be loaded back safely, or None if it can.

    kerasrl loads `.keras` files with safe_mode=True: no Lambda layers, and every class that is not
    Keras's own must be registered with Keras and have a JSON-ready get_config().
    """
    from kerasrl.backend.layers import walk_layers

    for layer in walk_layers(model, include_self=True):
        cls = type(layer)
        if isinstance(layer, keras.layers.Lambda):
            return (f"layer {layer.name!r} is a Lambda layer, whose Python code kerasrl never "
                    f"loads (safe_mode=True); write it as a layer class decorated with "
                    f"@keras.saving.register_keras_serializable()")
        if cls.__module__.split(".")[0] == "keras":
            continue
        name = keras.saving.get_registered_name(cls)
        if keras.saving.get_registered_object(name) is not cls:
            return (f"{cls.__module__}.{cls.__qualname__} (layer or model {layer.name!r}) is not "
                    f"registered with Keras; decorate the class with "
                    f"@keras.saving.register_keras_serializable(package=\"your_package\") (and "
                    f"import its module before loading)")
        try:
            with backend.unused_frameworks_hidden():  # Keras's serialization would import TF
                config = layer.get_config()
                json.dumps(config, default=_keras_json_default)
        except (NotImplementedError, TypeError) as error:
            return (f"{cls.__qualname__} (layer or model {layer.name!r}) has no usable "
                    f"get_config() ({type(error).__name__}: {error}); define get_config() "
                    f"returning its constructor arguments as JSON data")
    return None


def weights_only_note(model, problem: str) -> str:
    """What a user reads when `model` is saved as weights only: why, and how to load it."""
    cls = type(model)
    return (f"{cls.__module__}.{cls.__qualname__} will be saved as weights only ({problem}). "
            f"Loading needs the model: kerasrl.load_policy(path, model_factory=f) or "
            f"Agent.load(path, model_factory=f), with f(observation_space, action_space) -> a new "
            f"{cls.__qualname__}.")


def _save_models(models: dict, folder: Path, weights_only: bool) -> dict[str, str]:
    """Write each model as `<name>.keras`, or as `<name>.weights.h5` when asked or when Keras could
    not load it back; returns {name: "keras" | "weights"}."""
    formats = {}
    with backend.unused_frameworks_hidden():  # Keras's serialization would import TensorFlow
        for name, model in models.items():
            problem = None if weights_only else serialization_problem(model)
            if weights_only or problem is not None:
                model.save_weights(folder / f"{name}.weights.h5")
                formats[name] = "weights"
            else:
                model.save(folder / f"{name}.keras")
                formats[name] = "keras"
    return formats


def model_files(header: dict[str, Any]) -> dict[str, str]:
    """{model name: file name} of a policy.json header (format 1 folders written either way)."""
    names = list(header.get("models", ["model"]))
    formats = header.get("model_formats")
    if not isinstance(formats, dict):  # written before per-model formats: all one way
        formats = {name: "weights" if header.get("weights_only") else "keras" for name in names}
    return {name: f"{name}.weights.h5" if formats.get(name) == "weights" else f"{name}.keras"
            for name in names}


def _load_models(path: Path, header: dict[str, Any], manifest, observation_space, action_space,
                 model_factory, what: str) -> dict:
    """The models of a policy or checkpoint folder: `.keras` files loaded safely, weights files
    into the models that `model_factory` builds."""
    files = model_files(header)
    verify_files(path, manifest, files.values())
    models = {name: load_keras_model(path / file)
              for name, file in files.items() if file.endswith(".keras")}
    weight_names = [name for name, file in files.items() if not file.endswith(".keras")]
    if weight_names:
        classes = header.get("model_classes", {})
        if model_factory is None:
            described = ", ".join(f"{name} ({classes[name]})" if name in classes else name
                                  for name in weight_names)
            raise CheckpointError(
                f"{path} holds the weights only of {described}: Keras could not save the whole "
                f"model. Pass model_factory=, a function (observation_space, action_space) -> a "
                f"new keras.Model of the same architecture (a dict of models by name for "
                f"{', '.join(files)}), to {what}. To save whole models next time, register the "
                f"class with @keras.saving.register_keras_serializable().")
        built = model_factory(structure_of(observation_space), action_space)
        built = built if isinstance(built, dict) else {"model": built}
        built = {name: adapt_model(model, observation_space) for name, model in built.items()}
        for name in weight_names:
            if name not in built:
                raise CheckpointError(f"model_factory returned no model named {name!r} (it "
                                      f"returned {', '.join(built) or 'none'}).")
            model = built[name]
            model(dummy_observation(observation_space, batch_size=1), training=False)
            try:
                model.load_weights(path / files[name])
            except ValueError as error:
                raise CheckpointError(
                    f"The weights in {path / files[name]} do not fit the model that "
                    f"model_factory built ({type(model).__name__}): {error}") from None
            models[name] = model
    return models


def _keras_json_default(value):
    return keras.saving.serialize_keras_object(value)


def policy_header(policy, formats: dict[str, str]) -> dict[str, Any]:
    """policy.json: the policy's type, spaces, models (each saved whole or as weights, and its
    class) and config."""
    models = policy.models()
    return {"type": policy.policy_type, "observation_space": space_to_json(policy.observation_space),
            "action_space": space_to_json(policy.action_space),
            "models": sorted(models), "model_formats": formats,
            "weights_only": all(f == "weights" for f in formats.values()),
            "model_classes": {name: f"{type(m).__module__}.{type(m).__qualname__}"
                              for name, m in models.items()},
            "config": policy.get_config(), "backend": backend.NAME}


def save_policy(policy, path, *, weights_only: bool = False) -> Path:
    """Write a policy folder: manifest.json, policy.json, and a .keras (or .weights.h5) per model."""
    path = Path(path)
    if not policy.policy_type:
        raise CheckpointError(f"{type(policy).__name__} has no policy_type: it cannot be saved.")
    with atomic_folder(path, "policy") as tmp:
        formats = _save_models(policy.models(), tmp, weights_only)
        write_json(tmp / "policy.json", policy_header(policy, formats))
        write_manifest(tmp, {"format": POLICY_FORMAT, "backend": backend.NAME})
    if not weights_only:
        for name, model in policy.models().items():
            problem = serialization_problem(model) if formats[name] == "weights" else None
            if problem is not None:
                warnings.warn(weights_only_note(model, problem), stacklevel=3)
    return path


def load_policy(path, *, model_factory=None):
    """The inference-only policy in a policy folder or a checkpoint (no env, agent or optimizer).

    A checkpoint directory or run folder gives its newest checkpoint's policy. A policy saved with
    weights_only=True needs `model_factory(observation_space, action_space) -> keras.Model` (or a
    dict of models, by name, for policies with several).
    """
    backend.configure_threads()
    path = Path(path)
    if not (path / MANIFEST).is_file() and path.is_dir():
        path = find_checkpoint(path)
    manifest = read_manifest(path)
    verify_files(path, manifest, ["policy.json"])
    header = read_json(path / "policy.json")
    if header.get("type") not in registry.POLICIES:
        raise CheckpointError(f"{path / 'policy.json'} names policy type {header.get('type')!r}, "
                              f"which this kerasrl does not know (known: "
                              f"{', '.join(sorted(registry.POLICIES))}).")
    cls = registry.policy_class(header["type"])
    observation_space = space_from_json(header["observation_space"])
    action_space = space_from_json(header["action_space"])
    models = _load_models(path, header, manifest, observation_space, action_space, model_factory,
                          "kerasrl.load_policy")
    return cls.from_saved(models, observation_space, action_space, header.get("config", {}))


# -- run folders ------------------------------------------------------------------------------


def checkpoint_path(directory, step: int) -> Path:
    return Path(directory) / f"{CHECKPOINT_PREFIX}{step:09d}"


def prune_checkpoints(directory, keep_last: int | None) -> None:
    """Keep the newest `keep_last` checkpoints; remove leftovers of interrupted writes."""
    directory = Path(directory)
    if keep_last is not None and keep_last >= 1:
        for _, old in list_checkpoints(directory)[:-keep_last]:
            # Hidden first (one rename), then deleted: a crash mid-delete leaves no folder that
            # looks like a checkpoint but lacks files.
            with writing("checkpoint folder", directory, checkpoints=directory,
                         run=directory.parent if directory.name == "checkpoints" else None):
                os.replace(old, directory / f".{old.name}.del-{os.getpid()}")
    for child in directory.glob(f".{CHECKPOINT_PREFIX}*"):
        if ".tmp-" in child.name or ".del-" in child.name:
            shutil.rmtree(child, ignore_errors=True)


def find_checkpoint(path) -> Path:
    """A checkpoint folder itself, or the newest one of a checkpoint directory or run folder."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        return path
    for directory in (path / "checkpoints", path):
        found = list_checkpoints(directory)
        if found:
            return found[-1][1]
    raise CheckpointError(f"No complete checkpoint in {path} (looked for {MANIFEST}, and for "
                          f"{CHECKPOINT_PREFIX}<step> folders in {path / 'checkpoints'} and {path}).")
