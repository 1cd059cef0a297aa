"""What every agent shares: environments, seeding, the fit loop's bookkeeping, evaluation.

An agent learns; its `policy` acts. Subclasses set `config_class` and implement `_build` (models,
optimizer, buffers, compiled steps) and `_learn` (the algorithm's loop, read top to bottom).
"""

from __future__ import annotations

import logging
import math
import random
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import keras
import numpy as np

from kerasrl import backend, devices, registry
from kerasrl.checkpoint import load_checkpoint, save_checkpoint
from kerasrl.files import checkpoint_path, find_checkpoint, prune_checkpoints
from kerasrl.policy_io import serialization_problem, weights_only_note
from kerasrl.config import CommonConfig
from kerasrl.diagnostics import Monitor
from kerasrl.envs import describe, env_factory, final_observations, make_vec_env
from kerasrl.logger import History, RunLogger
from kerasrl.masks import final_masks, masks_from_info
from kerasrl.runfiles import WriteError, hold_run_folders
from kerasrl.schedules import linear_schedule


@dataclass
class LoopState:
    """The training loop's state between env steps, saved and restored as one value (PureJaxRL's
    `runner_state`): with the weights, optimizer, buffers and RNG it is all a resume needs."""

    observations: np.ndarray | None
    """(n_envs, *obs_shape): each env's current observation; None until the first reset."""
    episode_returns: np.ndarray
    """(n_envs,) float64: the return so far of each env's running episode."""
    episode_lengths: np.ndarray
    """(n_envs,) int64: the steps so far of each env's running episode."""
    num_timesteps: int = 0
    """Env steps taken, over all envs: the schedules' position."""
    total_steps: int | None = None
    """The run's length that the schedules span (the last `fit`'s total_steps); None before one."""
    action_masks: np.ndarray | None = None
    """(n_envs, n_actions) bool: the allowed actions at `observations`, for an env with action
    masks (Discrete agents); None otherwise."""
    compiled_streams: dict[str, np.ndarray] | None = None
    """The compiled loop's random streams (int32 xorshift states, kerasrl.compiled.engine) once a
    fit has run on it; None before."""

    @classmethod
    def start(cls, n_envs: int) -> LoopState:
        """The state before any step: no observations yet, every counter at 0."""
        return cls(None, np.zeros(n_envs), np.zeros(n_envs, dtype=np.int64))

    def restart(self, observations: np.ndarray) -> None:
        """Every env starts a new episode at `observations`; the step count goes on."""
        self.observations = observations
        self.episode_returns[...] = 0
        self.episode_lengths[...] = 0

    def state_dict(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """(arrays, JSON-ready values), under the names checkpoints have always used."""
        arrays = {"loop/episode_returns": self.episode_returns.copy(),
                  "loop/episode_lengths": self.episode_lengths.copy()}
        if self.observations is not None:
            arrays["loop/observations"] = np.array(self.observations)
        if self.action_masks is not None:
            arrays["loop/action_masks"] = np.array(self.action_masks)
        for key, value in (self.compiled_streams or {}).items():
            arrays[f"loop/compiled/{key}"] = np.array(value)
        return arrays, {"num_timesteps": self.num_timesteps, "total_steps": self.total_steps}

    def load_state_dict(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Restore what `state_dict` returned, in place."""
        self.episode_returns[...] = arrays["loop/episode_returns"]
        self.episode_lengths[...] = arrays["loop/episode_lengths"]
        self.observations = (np.array(arrays["loop/observations"])
                             if "loop/observations" in arrays else None)
        self.action_masks = (np.array(arrays["loop/action_masks"])
                             if "loop/action_masks" in arrays else None)
        streams = {key[len("loop/compiled/"):]: np.array(value) for key, value in arrays.items()
                   if key.startswith("loop/compiled/")}
        self.compiled_streams = streams or None
        self.num_timesteps = int(meta["num_timesteps"])
        total = meta.get("total_steps")
        self.total_steps = None if total is None else int(total)


def variable_values(variables) -> list[np.ndarray]:
    """Copies of Keras variables' values as numpy (never views of the backend's buffers)."""
    return [np.array(keras.ops.convert_to_numpy(v.value)) for v in variables]


class Agent:
    """Base of every agent. See `kerasrl.DQN` for the public API."""

    config_class: type[CommonConfig] = CommonConfig
    algorithm: str = "agent"
    # Discrete agents set the sizes of their categorical actions: the env's action masks are then
    # read and obeyed.
    _mask_sizes: tuple[int, ...] | None = None  # (n_actions,), or a MultiDiscrete's components

    def __init__(self, env, *, model=None, config: CommonConfig | None = None, device: str = "auto",
                 **hyperparameters):
        devices.check(device)  # checked first, so a wrong name fails at once
        if config is None:
            config = self.config_class.from_dict(hyperparameters)
        elif hyperparameters:
            config = self.config_class.from_dict(
                {**config.to_dict(), **self.config_class.upgrade(hyperparameters)})
        self.config = config
        # Where it learns and acts (docs/gpu.md); "auto" weighs the size of a gradient step.
        self.placement = devices.placement(device, self.rows_per_gradient_step)
        backend.configure_threads()
        devices.configure_precision()  # full float32 matrix products unless KERASRL_FULL_PRECISION=0
        backend.announce()  # which backend runs and why, once per process
        # Keras seeds each layer's random-op generator (dropout) from Python's `random`; the initial
        # weights themselves are drawn from the seed with numpy (build_model), the same everywhere.
        random.seed(config.seed)
        self.weights_seed = config.seed if config.initial_weights == "seed" else None
        self.env_spec = env
        self.env_name = describe(env)
        self._make_env = env_factory(env)
        self.env = make_vec_env(env, config.n_envs, vectorization=config.vectorization,
                                factory=self._make_env)
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        self.diagnostics = Monitor(config)  # each failure class reported once, with its fix
        # Every random draw outside the networks (exploration, replay sampling, env seeds) comes
        # from this numpy generator, so that all backends make the same draws.
        self.rng = np.random.default_rng(config.seed)
        self.loop = LoopState.start(config.n_envs)
        self.history = History()
        with self.placement.scope():  # the models and the learner's state are made there
            self._build(model)
            self._warn_weights_only()
            if config.check_env:  # after _build: the agent's own refusals are the more specific
                self.diagnostics.check_environment(self.env, env, self._make_env, config.seed)
            if self.uses_gradients:  # weights that no gradient reaches
                self.diagnostics.check_agent(self)

    @property
    def rows_per_gradient_step(self) -> int | None:
        """Transitions in one gradient step (its config's batch_size; None: no gradient steps),
        which `device="auto"` weighs (kerasrl.devices)."""
        return getattr(self.config, "batch_size", None)

    @property
    def device(self) -> str:
        """The device this agent was made for: "auto" or a device name (docs/gpu.md)."""
        return self.placement.device

    # -- to implement -------------------------------------------------------------------------
    def _build(self, model) -> None:
        raise NotImplementedError

    def _learn(self, total_steps: int, stop_at: int, logger: RunLogger, callback) -> None:
        raise NotImplementedError

    # -- what engines call (public: kerasrl.compiled.engine runs the Python loop between its calls)
    def learn_python_loop(self, total_steps: int, stop_at: int, logger: RunLogger, callback) -> None:
        """Run the agent's own Python loop from its current step to `stop_at` of `total_steps`."""
        self._learn(total_steps, stop_at, logger, callback)

    def _act_greedy(self, observations: np.ndarray) -> np.ndarray:
        """Deterministic actions for a batch of float32 observations, from the learner's weights.

        Agents with `_mask_sizes` also take `action_masks=` (B, n_actions) bool (only passed when
        the env has masks)."""
        raise NotImplementedError

    # -- what engines use: one interface for every algorithm ---------------------------------
    on_policy: bool = False
    """True: learns from rollouts of its current policy (PPO); False: from a replay buffer."""

    uses_gradients: bool = True
    """False for an agent that searches its weights without gradients (CEM): no gradient check."""

    def explorer(self, n_envs: int, epsilon: float | None = None):
        """How a remote actor with `n_envs` envs explores as this agent does (a
        `kerasrl.exploration.Explorer`). `epsilon`: the engine's exploration rate for that actor
        (Ape-X), for agents that explore epsilon-greedily."""
        raise NotImplementedError(f"{type(self).__name__} does not train with remote actors.")

    def actor_spec(self) -> dict:
        """What a remote actor needs to rebuild this agent's policy, as a saved policy holds it:
        the policy type, its models' JSON configs and its config; and whether it is on-policy."""
        policy = self.policy
        return {"policy_type": policy.policy_type, "on_policy": self.on_policy,
                "models": self._models_json(policy),
                "policy_config": policy.get_config()}

    @staticmethod
    def _models_json(policy) -> dict[str, str]:
        with backend.unused_frameworks_hidden():  # Keras's serialization would import TensorFlow
            return {stem: model.to_json() for stem, model in policy.models().items()}

    def actor_weights(self) -> dict:
        """The policy's current weights for remote actors, as numpy: each model's `get_weights()`
        by file stem, and the policy's config (PPO's log std and observation statistics). Makes
        `sync_model()` first: weights leave the learner through that call only."""
        self.sync_model()
        policy = self.policy
        return {"weights": {stem: [np.asarray(w) for w in model.get_weights()]
                            for stem, model in policy.models().items()},
                "policy_config": policy.get_config()}

    def random_warmup(self) -> bool:
        """Whether experience is collected with uniform random actions now (before learning
        starts, for agents that do that)."""
        return False

    def receive_transitions(self, chunk: dict, steps_before: int, total_steps: int,
                            logger: RunLogger) -> None:
        """Off-policy: store transitions collected elsewhere (arrays (T, n_envs, ...):
        observations, actions, rewards, next_observations, terminated, truncated; the step count
        already advanced from `steps_before`) and run the training they make due."""
        raise NotImplementedError(f"{type(self).__name__} does not learn from a replay buffer.")

    def receive_rollouts(self, rollouts: list[dict], total_steps: int, logger: RunLogger) -> None:
        """On-policy: learn from rollouts collected elsewhere with the current weights, one per
        actor (see `kerasrl.distributed.RolloutWorker.collect`)."""
        raise NotImplementedError(f"{type(self).__name__} does not learn from rollouts.")

    def _store_transitions(self, chunk: dict, truncated: np.ndarray | None = None) -> None:
        """Add a chunk's rows (T, n_envs, ...) to the replay buffer in time order."""
        truncated = chunk["truncated"] if truncated is None else truncated
        for t in range(len(chunk["actions"])):
            self.buffer.add(chunk["observations"][t], chunk["actions"][t], chunk["rewards"][t],
                            chunk["next_observations"][t], chunk["terminated"][t], truncated[t])

    def sync_model(self) -> None:
        """Write the learner's current weights into the Keras model(s) and the policy: the one
        call through which weights leave the learner. The library makes it at fixed points: when
        `fit` returns, before each callback `fit` runs, before a checkpoint is written (and after
        one is loaded) and before weights go to remote actors; `evaluate` acts from the learner's
        weights directly. The `model` and `policy` getters only read; after driving the learner by
        hand (`agent.learner`), call this before reading the models.
        """
        raise NotImplementedError

    def _warn_weights_only(self) -> None:
        """Say now, not at the first checkpoint, when a model can be saved as weights only."""
        for model in self.policy.models().values():
            problem = serialization_problem(model)
            if problem is not None:
                warnings.warn(weights_only_note(model, problem), stacklevel=3)

    # -- public API ---------------------------------------------------------------------------
    @property
    def num_timesteps(self) -> int:
        """Env steps taken so far, over all envs (`self.loop.num_timesteps`)."""
        return self.loop.num_timesteps

    @num_timesteps.setter
    def num_timesteps(self, value: int) -> None:
        self.loop.num_timesteps = value

    def fit(self, total_steps: int, *, stop_at: int | None = None, progress: bool = True,
            log_dir=None, log_interval: int | None = None,
            callback: Callable[[Agent, History], bool | None] | None = None,
            checkpoint_every: int | None = None, keep_last: int | None = None,
            checkpoint_dir=None, engine="auto", workers: int = 2,
            address: str | None = None) -> History:
        """Train until `total_steps` env steps have been taken in all (over all `n_envs`).

        `total_steps` is the length of the whole run: schedules (epsilon, learning rate) span it,
        and a loaded agent continues up to it. `stop_at` pauses earlier (e.g. to save), with the
        schedules unchanged. `callback(agent, history)` runs after each step in which an episode
        ended; returning False stops training. Returns the History of all episodes and updates.
        The Keras models hold the learner's weights whenever a callback runs and when fit returns
        (it calls `sync_model()` then; see that method).

        `checkpoint_every=N` saves a checkpoint `ckpt-<step>` each time the step count passes a
        multiple of N (and at the end), in `checkpoint_dir` (default `log_dir/checkpoints`),
        keeping the newest `keep_last` (all if None). See docs/checkpoints.md.

        `log_dir` and `checkpoint_dir` are held by this process while it trains: a second training
        into them (another process) is refused with `kerasrl.RunLockedError`, naming the holder.
        A checkpoint or log that cannot be written (no space left, no permission) stops training
        with `kerasrl.WriteError` (an OSError), naming the file, the cause and the last complete
        checkpoint to resume from.

        `engine`: "auto" (the default) runs the whole loop compiled (`engine="compiled"`, see
        docs/ops_envs.md) when the env is a keras.ops env (`kerasrl/OpsCartPole-v1`, ...) and the
        algorithm and config have a compiled loop, else this process's Python loop (`"local"`),
        saying why once (an INFO line of the "kerasrl" logger). `engine="ray"` collects experience
        with `workers` Ray rollout actors (on the Ray cluster at `address`, else a local Ray) while
        this process learns; `engine` may also be a `kerasrl.distributed.RayEngine` with every
        option. See docs/scaling.md.
        """
        if checkpoint_every is not None:
            if checkpoint_every < 1:
                raise ValueError(f"checkpoint_every must be a positive number of env steps, "
                                 f"got {checkpoint_every}.")
            if checkpoint_dir is None:
                if log_dir is None:
                    raise ValueError("checkpoint_every needs checkpoint_dir= (or log_dir=, "
                                     "whose checkpoints/ folder is used).")
                checkpoint_dir = Path(log_dir) / "checkpoints"
        if total_steps < 1:
            raise ValueError(f"total_steps must be a positive number of env steps, got {total_steps}.")
        stop_at = total_steps if stop_at is None else min(stop_at, total_steps)
        if self.num_timesteps >= stop_at:
            warnings.warn(
                f"This agent has already taken {self.num_timesteps} env steps, so fit("
                f"total_steps={total_steps}) has nothing to do: total_steps counts the whole run. "
                f"Pass a larger total_steps to train on.",
                stacklevel=2,
            )
            return self.history
        run_folders = hold_run_folders(log_dir, checkpoint_dir)  # refused at once if another trains there
        runner = logger = None
        failed = True
        try:
            learn = self._learn  # the engine is chosen before the bar appears: its INFO line goes first
            if engine in ("auto", "compiled"):
                runner = self.compiled_engine(required=engine == "compiled")
            elif engine != "local":
                runner = make_engine(engine, workers=workers, address=address)
            if runner is not None:
                learn = lambda *args: runner.learn(self, *args)  # noqa: E731
            learn = devices.on_device(self.placement, learn)
            logger = RunLogger(stop_at - self.num_timesteps, out_dir=log_dir, progress=progress,
                               log_interval=log_interval, start_step=self.num_timesteps,
                               history=self.history)
            self.start_fit(total_steps, logger)
            callback = with_current_weights(callback)
            if checkpoint_every is None:
                learn(total_steps, stop_at, logger, callback)
            else:
                # Train in chunks that end on multiples of checkpoint_every: the loop keeps all
                # its state on the agent, so chunks give the same run as one call.
                stopped = []

                def watch(agent, history):
                    result = callback(agent, history) if callback is not None else None
                    if result is False:
                        stopped.append(True)
                    return result

                while self.num_timesteps < stop_at and not stopped:
                    boundary = (self.num_timesteps // checkpoint_every + 1) * checkpoint_every
                    learn(total_steps, min(stop_at, boundary), logger, watch)
                    save_checkpoint(self, checkpoint_path(checkpoint_dir, self.num_timesteps))
                    prune_checkpoints(checkpoint_dir, keep_last)
            failed = False
        except WriteError as error:  # say where to resume from
            if checkpoint_dir is None and log_dir is not None:
                checkpoint_dir = Path(log_dir) / "checkpoints"
            error.locate(checkpoint_dir, run=log_dir)
            raise
        finally:
            if logger is not None:
                self.sync_model()  # the weights leave the learner: fit's end is one of the points
                logger.close(self.num_timesteps, quiet=failed)  # after an error, that one is told
            if runner is not None and runner is not engine:  # an engine passed in is the caller's
                runner.close()
            run_folders.close()
        return self.history

    def start_fit(self, total_steps: int, logger: RunLogger) -> None:
        """What every fit does before its first step: diagnostics on, envs reset if never reset,
        the schedules' span set."""
        self.diagnostics.start(self, total_steps, logger)
        if self.loop.observations is None:
            self.reset_envs(seed=self.config.seed)
        self.loop.total_steps = total_steps

    def compiled_engine(self, required: bool):
        """The compiled-loop engine of this agent (made once, so its compiled calls are reused by
        later fits), or None where it cannot run (`required`: raise then, saying why)."""
        engine_class = registry.engine_class("compiled")
        reason = engine_class.why_not(self) or (None if required else engine_class.slower_here(self))
        if reason is None:
            if getattr(self, "_compiled_runner", None) is None:
                self._compiled_runner = engine_class(self)
            return self._compiled_runner
        if required:
            engine_class(self)  # raises, saying why
        if not getattr(self, "_said_python_loop", False):
            self._said_python_loop = True
            logging.getLogger("kerasrl").info("%s.fit runs the Python loop: %s.", type(self).__name__, reason)
        return None

    def save(self, path) -> Path:
        """Write the full training state to the folder `path` (atomically); see `load`."""
        return save_checkpoint(self, path)

    @classmethod
    def load(cls, path, env=None, *, model_factory=None, device: str = "auto") -> Agent:
        """The agent saved in `path` (a checkpoint folder, or a run folder: its newest checkpoint).

        `env` defaults to the saved env id; `fit(total_steps)` then continues where it stopped.
        `model_factory(observation_space, action_space) -> keras.Model` builds the model again
        when the checkpoint holds its weights only (a class not registered with Keras).
        `device`: where it learns and acts, as for a new agent (whatever device wrote it).
        Nothing is unpickled: see docs/checkpoints.md.
        """
        devices.check(device)  # a wrong name fails before the checkpoint is read
        return load_checkpoint(find_checkpoint(path), None if cls is Agent else cls, env=env,
                               model_factory=model_factory, device=device)

    def predict(self, observations, deterministic: bool = True, action_mask=None) -> np.ndarray:
        """Actions for a batch of observations (or one), as numpy; for a Dict or Tuple observation
        space a dict / tuple of arrays (see kerasrl.spaces). `action_mask` (Discrete agents):
        1 = allowed, one row per observation."""
        if action_mask is None:
            return self.policy.predict(observations, deterministic=deterministic)
        return self.policy.predict(observations, deterministic=deterministic,
                                   action_mask=action_mask)

    def reset_envs(self, seed: int | None = None) -> None:
        """Start a new episode in every env (`env.reset(seed=seed)`) and read their first action
        masks; the step count goes on."""
        observations, info = self.env.reset(seed=seed)
        self.loop.restart(observations)
        self.loop.action_masks = self.read_action_masks(info, len(observations), "the envs' reset")

    def read_action_masks(self, info: dict, n_envs: int, where: str) -> np.ndarray | None:
        """The action masks (n_envs, n_actions) bool in a vector env's `info`, checked; None when
        the env reports none or this agent does not use masks (continuous actions)."""
        if self._mask_sizes is None:
            return None
        return masks_from_info(info, n_envs, sum(self._mask_sizes), where, self._mask_sizes)

    def _masks_after_step(self, info: dict, done: np.ndarray):
        """(masks of the observations the envs go on from, masks of the observations each step
        led to) after `_step_envs`; both None for an env without masks."""
        where = f"env step {self.num_timesteps}"
        masks = self.read_action_masks(info, len(done), where)
        if masks is None and self.loop.action_masks is not None:
            masks = np.ones_like(self.loop.action_masks)  # the env stopped reporting: all allowed
        return masks, final_masks(masks, done, info, sum(self._mask_sizes or ()), where)

    @property
    def policy(self):
        """The inference-only policy on the agent's Keras models (weights as of the last
        `sync_model()`: current after `fit`, in callbacks and after `load`)."""
        raise NotImplementedError

    def evaluate(self, episodes: int = 20, *, env=None, deterministic: bool = True,
                 seed: int | None = None, n_envs: int | None = None) -> dict[str, float]:
        """Run `episodes` whole episodes with the current policy on fresh environments.

        Returns mean_return, std_return, min_return, max_return, mean_length, episodes, and the
        mean of any numeric per-episode figure the env reports at the end (e.g. mean_fruits_eaten).
        """
        if episodes < 1:
            raise ValueError(f"episodes must be at least 1, got {episodes}.")
        n = min(episodes, n_envs or 10)
        spec = self.env_spec if env is None else env
        factory = self._make_env if env is None else None
        envs = make_vec_env(spec, n, factory=factory)
        # Spread the episodes over the envs so that short episodes do not crowd out long ones.
        targets = np.array([(episodes + i) // n for i in range(n)])
        counts = np.zeros(n, dtype=np.int64)
        returns, lengths = np.zeros(n), np.zeros(n, dtype=np.int64)
        results, extras = [], {}
        obs, info = envs.reset(seed=self.config.seed + 10_000 if seed is None else seed)
        masks = self.read_action_masks(info, n, "evaluate's reset")
        eval_rng = np.random.default_rng(seed)
        try:
            starts = np.ones(n, dtype=bool)  # where an episode starts at the next action
            while (counts < targets).any():
                masked = {} if masks is None else {"action_masks": masks}
                self._episodes_start(starts)
                actions = self._act_greedy(np.asarray(obs, dtype=np.float32), **masked)
                if not deterministic:
                    actions = self._explore(actions, eval_rng, **masked)
                obs, rewards, terminated, truncated, info = envs.step(actions)
                masks = self.read_action_masks(info, n, "evaluate's env step")
                returns += rewards
                lengths += 1
                done = np.logical_or(terminated, truncated)
                starts = done
                for i in np.flatnonzero(done):
                    if counts[i] < targets[i]:
                        results.append((returns[i], lengths[i]))
                        for key, value in episode_extras(info, i).items():
                            extras.setdefault(key, []).append(value)
                        counts[i] += 1
                    returns[i], lengths[i] = 0.0, 0
        finally:
            envs.close()
        episode_returns = np.array([r for r, _ in results])
        summary = {
            "mean_return": float(episode_returns.mean()),
            "std_return": float(episode_returns.std()),
            "min_return": float(episode_returns.min()),
            "max_return": float(episode_returns.max()),
            "mean_length": float(np.mean([length for _, length in results])),
            "episodes": len(results),
        }
        summary.update({f"mean_{k}": float(np.mean(v)) for k, v in extras.items()})
        return summary

    def _episodes_start(self, starts: np.ndarray) -> None:
        """Evaluation tells which envs (starts (n,) bool) begin an episode at the next
        `_act_greedy`: a recurrent agent zeroes their state; nothing for the others."""

    def _explore(self, greedy_actions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Stochastic actions for evaluation with deterministic=False (masked agents also take
        `action_masks=`, as `_act_greedy`)."""
        return greedy_actions

    # -- shared mechanics for the subclasses --------------------------------------------------
    def _step_envs(self, actions: np.ndarray, logger: RunLogger):
        """Step every env once, book finished episodes, and return the transition's arrays.

        Returns (next_obs, rewards, terminated, truncated, final_obs, info): `next_obs` continues
        each env (the reset observation after an episode ends), `final_obs` is what the step led to
        (the true last observation of a finished episode): store that one.
        """
        next_obs, rewards, terminated, truncated, info = self.env.step(actions)
        rewards = np.asarray(rewards, dtype=np.float32)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        done = terminated | truncated
        final_obs = final_observations(next_obs, done, info)
        loop = self.loop
        loop.num_timesteps += self.config.n_envs
        loop.episode_returns += rewards
        loop.episode_lengths += 1
        if done.any():
            for i in np.flatnonzero(done):
                logger.episode(loop.num_timesteps, loop.episode_returns[i],
                               loop.episode_lengths[i], **episode_extras(info, i))
            loop.episode_returns[done] = 0.0
            loop.episode_lengths[done] = 0
        logger.advance(self.num_timesteps, self.config.n_envs)
        return next_obs, rewards, terminated, truncated, final_obs, info

    def _learning_rate(self, total_steps: int) -> float:
        """The learning rate now: constant, or linear from `learning_rate` to 0 over the run."""
        lr = self.config.learning_rate
        if self.config.lr_schedule == "linear":
            lr *= linear_schedule(1.0, 0.0, self.num_timesteps / total_steps)
        return lr

    def check_loss(self, loss: float, update: int) -> None:
        """Stop training at the first non-finite loss, naming the update."""
        if not math.isfinite(loss):
            raise FloatingPointError(
                f"{type(self).__name__} loss became {loss} at update {update} (env step "
                f"{self.num_timesteps}). Lower learning_rate, set max_grad_norm, or check the "
                f"rewards and observations for NaN or huge values. Weights were not updated "
                f"further; checkpoints already written are intact."
            )

    # -- training state, for checkpoints ------------------------------------------------------
    def state_dict(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The full training state as (arrays, meta): numpy arrays, and JSON-ready values.

        The loop state (`self.loop`) is saved whole; subclasses extend both with `_extra_state`
        (learner weights, optimizer, buffers, counters). Environments are not included: their
        state belongs to the env (see kerasrl.checkpoint).
        """
        arrays, meta = self.loop.state_dict()
        meta.update({
            "rng": self.rng.bit_generator.state,
            "history": {"episodes": self.history.episodes, "updates": self.history.updates},
        })
        extra_arrays, extra_meta = self._extra_state()
        arrays.update(extra_arrays)
        meta.update(extra_meta)
        return arrays, meta

    def load_state_dict(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Restore what `state_dict` returned (into an agent built with the same config)."""
        self.loop.load_state_dict(arrays, meta)
        self.rng.bit_generator.state = meta["rng"]
        self.history = History(episodes=list(meta["history"]["episodes"]),
                               updates=list(meta["history"]["updates"]))
        self._load_extra_state(arrays, meta)

    def _extra_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return {}, {}

    def _load_extra_state(self, arrays, meta) -> None:
        pass

    def close(self) -> None:
        """Close the environments."""
        self.env.close()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(env={self.env_name!r}, backend={backend.NAME!r}, "
                f"num_timesteps={self.num_timesteps})")


def with_current_weights(callback):
    """The user's `callback(agent, history)`, run with the learner's weights in the agent's Keras
    models (`sync_model` first: before each callback is one of the points where weights move)."""
    if callback is None:
        return None

    def synced(agent, history):
        agent.sync_model()
        return callback(agent, history)

    return synced


def make_engine(engine, *, workers: int = 2, address: str | None = None):
    """The engine object for `fit(engine=...)`: a registered engine by name (its module, and Ray,
    imported now), or `engine` itself."""
    if isinstance(engine, str):
        if engine not in registry.ENGINES:
            raise ValueError(f"engine must be one of {('auto', 'local', *registry.ENGINES)} (or a "
                             f"RayEngine), got {engine!r}.")
        return registry.engine_class(engine)(workers=workers, address=address)
    if not hasattr(engine, "learn"):
        raise TypeError(f"engine must be 'auto', 'local', 'compiled', 'ray' or a RayEngine, got {type(engine).__name__}.")
    return engine


def flatten_arrays(prefix: str, tree) -> dict[str, np.ndarray]:
    """A nest of dicts and lists of arrays as flat `prefix/key/0` names (for .npz files)."""
    flat = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            flat.update(flatten_arrays(f"{prefix}/{key}", value))
    elif isinstance(tree, (list, tuple)):
        for i, value in enumerate(tree):
            flat.update(flatten_arrays(f"{prefix}/{i}", value))
    else:
        flat[prefix] = np.array(tree)
    return flat


def unflatten_arrays(prefix: str, flat: dict[str, np.ndarray], like):
    """The inverse of `flatten_arrays`, shaped like `like`; shapes and dtypes are checked."""
    if isinstance(like, dict):
        return {key: unflatten_arrays(f"{prefix}/{key}", flat, value) for key, value in like.items()}
    if isinstance(like, (list, tuple)):
        return [unflatten_arrays(f"{prefix}/{i}", flat, value) for i, value in enumerate(like)]
    if prefix not in flat:
        raise KeyError(f"The saved state has no array {prefix!r}.")
    value, expected = flat[prefix], np.asarray(like)
    if value.shape != expected.shape:
        raise ValueError(f"Saved array {prefix!r} has shape {value.shape}, the agent expects "
                         f"{expected.shape}: the model or config differs from the saved one.")
    return value.astype(expected.dtype, copy=False)


def episode_extras(info: dict, i: int) -> dict[str, Any]:
    """Numeric per-episode figures that env `i` reported as its episode ended (e.g. fruits_eaten).

    In SAME_STEP auto-reset mode they sit in `info["final_info"]`.
    """
    final = info.get("final_info")
    if not isinstance(final, dict):
        return {}
    extras = {}
    for key, values in final.items():
        if key.startswith("_") or key == "episode":
            continue
        mask = final.get(f"_{key}")
        if mask is not None and not mask[i]:
            continue
        value = values[i] if isinstance(values, np.ndarray) and values.ndim >= 1 else None
        if value is not None and np.issubdtype(np.asarray(value).dtype, np.number) and np.ndim(value) == 0:
            extras[key] = float(value)
    return extras
