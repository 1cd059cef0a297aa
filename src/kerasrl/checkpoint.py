"""Agent checkpoints: an agent's whole training state in a backend-neutral folder, and the agent
made back from it, ready to `fit` on.

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

The jobs around it live apart: the folder written atomically and verified (kerasrl.files), the
models and policy.json (kerasrl.policy_io), the spaces as JSON (kerasrl.space_json), and the envs'
state (kerasrl.envs.state). Only agents' public methods are used: `state_dict()` /
`load_state_dict()` (the loop state, see `kerasrl.agents.base.LoopState`, learner, buffers, RNG,
history), `sync_model()`, `policy`, `reset_envs()`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from kerasrl import backend, devices, registry
from kerasrl.envs.state import capture_env_state, restore_env_state
from kerasrl.envs.vector import env_with_kwargs, id_and_kwargs
from kerasrl.files import (CHECKPOINT_FORMAT, CheckpointError, atomic_folder, read_json,
                           read_manifest, read_npz, verify_files, write_json, write_manifest)
from kerasrl.models import restored
from kerasrl.policy_io import load_models, models_beside_header, policy_header, save_models
from kerasrl.space_json import space_from_json

__all__ = ["CHECKPOINT_FILES", "CheckpointError", "load_checkpoint", "save_checkpoint"]


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
        formats = save_models(policy.models(), tmp, weights_only=False)
        header = policy_header(policy, formats)
        beside = agent.models_beside_policy()  # a user's critics: their architecture
        if beside:
            header.update(models_beside_header(header, beside,
                                               save_models(beside, tmp, weights_only=False)))
        write_json(tmp / "config.json", {
            "algorithm": agent.algorithm,
            "config": agent.config.to_dict(),
            **_env_record(agent.env_spec, agent.env_name),
        })
        write_json(tmp / "policy.json", header)
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


def _env_record(spec, name: str) -> dict:
    """How config.json names the agent's env: an id (`env_is_id`), with the keywords it was made
    with where it was made by `env_with_kwargs` (`kerasrl train --env-kwarg`), so that a load
    makes it again; else its name alone (an env object or a function is not stored)."""
    env_id, kwargs = id_and_kwargs(spec)
    if env_id is None:
        return {"env": name, "env_is_id": False}
    return {"env": env_id, "env_is_id": True, **({"env_kwargs": kwargs} if kwargs else {})}


def recorded_env(config: dict) -> tuple[str | None, dict]:
    """The env id and keywords a checkpoint's config.json names (`_env_record`); (None, {}) for
    an agent made from an env object or a function."""
    if not config.get("env_is_id") or not isinstance(config.get("env"), str):
        return None, {}
    return config["env"], dict(config.get("env_kwargs") or {})


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
        env_id, kwargs = recorded_env(config)
        if env_id is None:
            raise CheckpointError(
                f"{path} was saved from an agent made with an env object or function "
                f"({config.get('env')!r}), which is not stored: pass env= to load it.")
        env = env_with_kwargs(env_id, kwargs)
    header = read_json(path / "policy.json")
    state = read_json(path / "state.json")
    arrays = read_npz(path / "training_state.npz")
    # The policy's models and those learned beside them (a user's critics), in one list to load.
    every_model = {**header, "models": [*header.get("models", ["model"]),
                                        *header.get("models_beside_policy", [])]}
    observation_space = space_from_json(header["observation_space"])
    action_space = space_from_json(header["action_space"])
    agent_config = saved_class.config_class.from_dict(
        saved_class.config_class.upgrade(config["config"], warn=False))

    def whole(name, model):  # a factory's torso: the agent's streams around it
        return saved_class.whole_model(name, model, observation_space, action_space, agent_config)

    with placement.scope():  # the models' variables are made on the agent's device
        models = load_models(path, every_model, manifest, observation_space, action_space,
                             model_factory, f"{saved_class.__name__}.load",
                             saved_class.rebuilt_model, whole)
    model = restored(models.pop("model"))  # whole: no torso for dueling or noisy streams
    with warnings.catch_warnings():  # the models came from model_factory: the caller knows
        warnings.filterwarnings("ignore", message=".*will be saved as weights only")
        agent = saved_class(env, model=model, **saved_class.models_as_keywords(models), device=device,
                            config=agent_config)
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
