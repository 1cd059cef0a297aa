"""Policies on disk: the folder `Policy.save` writes and `kerasrl.load_policy` reads, and the models
in it (checkpoints hold the same files, so `load_policy` reads a checkpoint too).

A policy folder is:

    manifest.json        format "kerasrl-policy", versions, and the size and sha256 of every file
    policy.json          the policy's type, observation and action spaces (kerasrl.space_json), its
                         config, and for each model its file format and class
    <name>.keras         each model whole (Keras serialization, loaded with safe_mode=True), or
    <name>.weights.h5    its weights only, when Keras could not load the whole model back (a
                         Lambda layer, an unregistered class); loading it then needs model_factory=

Only a policy's public interface is used: `models()`, `policy_type`, `get_config()`, the spaces,
and the class's `from_saved`.
"""

from __future__ import annotations

import importlib
import json
import warnings
from pathlib import Path
from typing import Any

import keras

from kerasrl import backend, registry
from kerasrl.files import (POLICY_FORMAT, CheckpointError, atomic_folder, find_checkpoint,
                           read_json, read_manifest, verify_files, write_json, write_manifest)
from kerasrl.initializers import backend_draws_skipped
from kerasrl.models import adapt_model, call_builder, dummy_observation
from kerasrl.runfiles import MANIFEST
from kerasrl.space_json import space_from_json, space_to_json

def load_keras_model(path: Path):
    """A `.keras` file, loaded with safe_mode=True (no Lambda, no unregistered classes)."""
    for module in registry.KERAS_LAYER_MODULES:  # kerasrl's own layers, registered with Keras
        importlib.import_module(module)
    try:
        with backend_draws_skipped():  # every weight comes from the file (Keras checks the count)
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


def weights_only_note(model, problem: str, names: list[str] | None = None,
                      in_policy: bool = True, policy_names: list[str] | None = None) -> str:
    """What a user reads when `model` is saved as weights only: why, and how to load it. `names`:
    every model a checkpoint holds, `policy_names` every model a saved policy holds, where there
    are several (then f returns them by name); `in_policy` False for a model only checkpoints hold
    (a critic)."""
    name = _model_class(model)
    loaders = ("kerasrl.load_policy(path, model_factory=f) or Agent.load(path, model_factory=f)"
               if in_policy else "Agent.load(path, model_factory=f) (a saved policy does not "
                                 "hold it)")
    note = (f"{name} will be saved as weights only ({problem}). "
            f"Loading needs the model: {loaders}, with f(observation_space, action_space) -> a "
            f"new {name.rsplit('.', 1)[-1]}.")
    if names and len(names) > 1 and names == policy_names:
        return note + (f" A saved policy and a checkpoint hold {len(names)} models: f returns "
                       f"them by name, {_by_name(names)}.")
    if policy_names and len(policy_names) > 1:
        note += (f" A saved policy holds {len(policy_names)} models: for load_policy, f returns "
                 f"them by name, {_by_name(policy_names)}.")
    if names and len(names) > 1:
        note += (f" A checkpoint holds {len(names)} models: for Agent.load, f returns them by "
                 f"name, {_by_name(names)}.")
    return note


def _by_name(names: list[str]) -> str:
    return "{" + ", ".join(f'"{n}": ...' for n in names) + "}"


def save_models(models: dict, folder: Path, weights_only: bool) -> dict[str, str]:
    """Write each model as `<name>.keras`, or as `<name>.weights.h5` when asked or when Keras could
    not load it back; returns {name: "keras" | "weights"}."""
    formats = {}
    with backend.unused_frameworks_hidden(), warnings.catch_warnings():
        # Keras's serialization would import TensorFlow; and on JAX its weight writer passes
        # Keras variables to np.array, which numpy 2 warns about (no `copy` keyword) each time.
        warnings.filterwarnings("ignore", message="__array__ implementation doesn't accept a copy",
                                category=DeprecationWarning)
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


def rebuilt_model(name: str, model: keras.Model, observation_space, action_space) -> keras.Model:
    """A model `model_factory` made again for the saved model `name`, as its agent held it: for
    Dict observations reading them leaf by leaf (`adapt_model`), and built by a call on a batch of
    one, so that its weights can be loaded. A policy's models take observations; an agent's own
    rule for the models it keeps beside them (`Agent.rebuilt_model`: critics)."""
    model = adapt_model(model, observation_space)
    model(dummy_observation(observation_space, batch_size=1), training=False)
    return model


def load_models(path: Path, header: dict[str, Any], manifest, observation_space, action_space,
                 model_factory, what: str, rebuild=rebuilt_model, whole=None) -> dict:
    """The models of a policy or checkpoint folder: `.keras` files loaded safely, weights files
    into the models that `model_factory` builds (made ready by `rebuild(name, model,
    observation_space, action_space)`). `whole(name, model)`: where the weights do not fit the
    factory's model, the whole network the agent made of it (its torso: dueling or noisy
    streams around the user's model), or None."""
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
        built = call_builder(model_factory, observation_space, action_space, "model_factory")
        built = built if isinstance(built, dict) else {"model": built}
        for name in weight_names:
            if name not in built:
                raise CheckpointError(
                    f"model_factory returned no model named {name!r} (it returned "
                    f"{', '.join(built) or 'none'}): {path} holds the weights only of "
                    f"{', '.join(weight_names)}. Return a dict of new models by name, "
                    f"{_by_name(weight_names)}.")
            model = rebuild(name, built[name], observation_space, action_space)
            try:
                model.load_weights(path / files[name])
            except ValueError as error:
                wrapped = None if whole is None else whole(name, model)
                if wrapped is None:
                    raise CheckpointError(
                        f"The weights in {path / files[name]} do not fit the model that "
                        f"model_factory built ({type(model).__name__}): {error}") from None
                model = rebuild(name, wrapped, observation_space, action_space)
                try:  # the factory built the torso: the agent's streams around it
                    model.load_weights(path / files[name])
                except ValueError:
                    raise CheckpointError(
                        f"The weights in {path / files[name]} fit neither the model that "
                        f"model_factory built ({type(built[name]).__name__}) nor the agent's "
                        f"network around it as a torso: {error}") from None
            models[name] = model
    return models


def _keras_json_default(value):
    return keras.saving.serialize_keras_object(value)


def _model_class(model) -> str:
    """The class a user would rebuild `model` from: the first class in it that is not Keras's own
    (a subclassed network that kerasrl wrapped, for Dict inputs or a dueling head, in a Keras
    functional model), else the model's own class."""
    from kerasrl.backend.layers import walk_layers

    for layer in walk_layers(model, include_self=True):
        cls = type(layer)
        if cls.__module__.split(".")[0] not in ("keras", "kerasrl"):
            return f"{cls.__module__}.{cls.__qualname__}"
    return f"{type(model).__module__}.{type(model).__qualname__}"


def policy_header(policy, formats: dict[str, str]) -> dict[str, Any]:
    """policy.json: the policy's type, spaces, models (each saved whole or as weights, and its
    class) and config."""
    models = policy.models()
    return {"type": policy.policy_type, "observation_space": space_to_json(policy.observation_space),
            "action_space": space_to_json(policy.action_space),
            "models": sorted(models), "model_formats": formats,
            "weights_only": all(f == "weights" for f in formats.values()),
            "model_classes": {name: _model_class(m) for name, m in models.items()},
            "config": policy.get_config(), "backend": backend.NAME,
            **({"made_by": policy.made_by} if getattr(policy, "made_by", None) else {})}


def models_beside_header(header: dict[str, Any], models: dict, formats: dict[str, str]
                         ) -> dict[str, Any]:
    """A checkpoint's policy.json entries for the models an agent learns beside its policy's
    (`Agent.models_beside_policy`): their names apart ("models" stays the policy's, which
    `load_policy` reads), their formats and classes beside the policy's models'."""
    return {"models_beside_policy": sorted(models),
            "model_formats": {**header["model_formats"], **formats},
            "model_classes": {**header["model_classes"],
                              **{name: _model_class(m) for name, m in models.items()}}}


def save_policy(policy, path, *, weights_only: bool = False) -> Path:
    """Write a policy folder: manifest.json, policy.json, and a .keras (or .weights.h5) per model."""
    path = Path(path)
    if not policy.policy_type:
        raise CheckpointError(f"{type(policy).__name__} has no policy_type: it cannot be saved.")
    with atomic_folder(path, "policy") as tmp:
        formats = save_models(policy.models(), tmp, weights_only)
        write_json(tmp / "policy.json", policy_header(policy, formats))
        write_manifest(tmp, {"format": POLICY_FORMAT, "backend": backend.NAME})
    if not weights_only:
        for name, model in policy.models().items():
            problem = serialization_problem(model) if formats[name] == "weights" else None
            if problem is not None:
                warnings.warn(weights_only_note(model, problem, policy_names=sorted(policy.models())),
                              stacklevel=3)
    return path


def _whole_model(header: dict[str, Any], observation_space, action_space):
    """`load_models`'s `whole` for a policy an agent saved (its "made_by": algorithm and config):
    the network the agent made of a torso (dueling, noisy or IQN's layers around it), so that a
    model_factory of the user's torso loads it as it loads the agent's checkpoint; else None."""
    made_by = header.get("made_by")
    if not made_by:
        return None
    agent_class = registry.agent_class(made_by["algorithm"])
    config = agent_class.config_class.from_dict(
        agent_class.config_class.upgrade(made_by["config"], warn=False))
    return lambda name, model: agent_class.whole_model(name, model, observation_space,
                                                       action_space, config)


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
    models = load_models(path, header, manifest, observation_space, action_space, model_factory,
                          "kerasrl.load_policy", whole=_whole_model(header, observation_space,
                                                                     action_space))
    return cls.from_saved(models, observation_space, action_space, header.get("config", {}))
