"""What every agent shares: environments, seeding, the engines' interface, stepping the envs, the
training state for checkpoints.

An agent learns; its `policy` acts. Subclasses set `config_class` and implement `_build` (models,
optimizer, buffers, compiled steps) and `_learn` (the algorithm's loop, read top to bottom).
`fit` lives in kerasrl.agents.fitting (`Fitting`, which `Agent` inherits), `evaluate` in
kerasrl.agents.evaluation (`Evaluating`, likewise), the loop's state in
kerasrl.agents.loop_state, the state's array helpers in kerasrl.agents.state_arrays; their names
stay importable from here.
"""

from __future__ import annotations

import math
import random
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from kerasrl import backend, devices, porting
from kerasrl.agents.evaluation import Evaluating
from kerasrl.agents.fitting import Fitting, make_engine, with_current_weights  # noqa: F401  (kept importable from here)
from kerasrl.agents.loop_state import LoopState
from kerasrl.agents.state_arrays import (  # noqa: F401  (kept importable from here)
    flatten_arrays,
    unflatten_arrays,
    variable_values,
)
from kerasrl.buffers import GoalLayout
from kerasrl.checkpoint import load_checkpoint, save_checkpoint
from kerasrl.config import CommonConfig
from kerasrl.diagnostics import Monitor
from kerasrl.envs import describe, env_factory, episode_extras, final_observations, make_vec_env
from kerasrl.envs.checker import goal_reward
from kerasrl.files import find_checkpoint
from kerasrl.logger import History, RunLogger
from kerasrl.masks import final_masks, masks_from_info
from kerasrl.policy_io import rebuilt_model, serialization_problem, weights_only_note
from kerasrl.schedules import linear_schedule
from kerasrl.spaces import action_sizes


def multiples_passed(count: int, added: int, every: int) -> int:
    """How many multiples of `every` a counter passes going from `count` to `count + added`: the
    training rounds (one every `train_freq` vector steps) or target syncs that a chunk of steps
    collected elsewhere (the Ray engine) makes due, as the same steps would one by one."""
    return (count + added) // every - count // every


class Agent(Fitting, Evaluating):
    """Base of every agent. See `kerasrl.DQN` for the public API."""

    config_class: type[CommonConfig] = CommonConfig
    algorithm: str = "agent"
    # Discrete agents set the sizes of their categorical actions: the env's action masks are then
    # read and obeyed.
    _mask_sizes: tuple[int, ...] | None = None  # (n_actions,), or a MultiDiscrete's components

    def __new__(cls, *args, **kwargs):
        # Stable-Baselines3's order, DQN("MlpPolicy", env), would otherwise fail on Python's "takes
        # 2 positional arguments but 3 were given" before any of kerasrl's code runs.
        if len(args) > 1 or (args and isinstance(args[0], str) and args[0] in porting.SB3_POLICIES):
            raise TypeError(
                f"{cls.__name__} takes the env as its one positional argument: "
                f"kerasrl.{cls.__name__}('CartPole-v1', learning_rate=...), with SB3's "
                f"hyperparameter names as keywords. There is no policy name "
                f"({'/'.join(porting.SB3_POLICIES)}): the default network follows the observation space "
                f"(an MLP, a CNN for images, one encoder per Dict key), and model= takes your own "
                f"Keras model.")
        return super().__new__(cls)

    def __getattr__(self, name):
        # Reached only where normal lookup failed: Stable-Baselines3's or keras-rl's name for what
        # is called otherwise here gets the name to use.
        elsewhere = porting.hint(porting.METHODS, name)
        if elsewhere is not None:
            raise AttributeError(f"{type(self).__name__} has no {elsewhere}.")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __init__(self, env, *, model=None, config: CommonConfig | None = None, device: str = "auto",
                 **hyperparameters):
        devices.check(device)  # checked first, so a wrong name fails at once
        self.config = config = self.config_class.resolve(config, hyperparameters, type(self).__name__)
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
        """Transitions in one gradient step, which `device="auto"` weighs (kerasrl.devices)."""
        return devices.rows_per_gradient_step(self.config)

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
        if getattr(self.config, "hindsight_goals", 0):
            raise NotImplementedError(
                "hindsight replay (hindsight_goals > 0) needs each env's steps stored in order, "
                "episode by episode, and remote actors' steps interleave.")
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

    def _hindsight_replay(self) -> dict | None:
        """The keywords of a hindsight replay buffer where the config asks for one
        (`hindsight_goals` > 0), else None: where the goals sit in the observations, and the env's
        compute_reward, checked against the rewards of a few steps of a copy of the env."""
        cfg = self.config
        if not getattr(cfg, "hindsight_goals", 0):
            return None
        layout = GoalLayout.of(self.observation_space, self.env_name)
        rewards = goal_reward(self._make_env(), self.env_name, cfg.seed)
        return {"layout": layout, "rewards": rewards, "n_goals": int(cfg.hindsight_goals),
                "strategy": cfg.hindsight_strategy}

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

    def _require_discrete_actions(self) -> None:
        """Refuse a non-discrete action space, naming the agent to use instead; set n_actions."""
        if not isinstance(self.action_space, gym.spaces.Discrete):
            raise ValueError(
                f"{type(self).__name__} needs a discrete action space, but {self.env_name} has "
                f"{self.action_space}. For continuous (Box) actions use kerasrl.SAC, kerasrl.TD3, "
                f"kerasrl.DDPG or kerasrl.PPO (kerasrl.NAF is Q-learning's continuous form)."
            )
        self._mask_sizes = action_sizes(self.action_space, type(self).__name__, self.env_name)
        self.n_actions = int(self.action_space.n)

    def _warn_weights_only(self) -> None:
        """Say now, not at the first checkpoint, when a model can be saved as weights only (once
        per class: twin critics of one class are one warning)."""
        in_policy = self.policy.models()
        models = {**in_policy, **self.models_beside_policy()}
        warned = set()
        for name, model in models.items():
            problem = serialization_problem(model)
            if problem is not None and type(model) not in warned:
                warned.add(type(model))
                warnings.warn(weights_only_note(model, problem, sorted(models), name in in_policy,
                                                sorted(in_policy)), stacklevel=3)

    # -- public API ---------------------------------------------------------------------------
    @property
    def num_timesteps(self) -> int:
        """Env steps taken so far, over all envs (`self.loop.num_timesteps`)."""
        return self.loop.num_timesteps

    @num_timesteps.setter
    def num_timesteps(self, value: int) -> None:
        self.loop.num_timesteps = value

    # `fit` (and `start_fit`, `compiled_engine`): inherited from kerasrl.agents.fitting.Fitting

    def models_beside_policy(self) -> dict[str, Any]:
        """A user's models that the agent learns beside its policy's (critics of yours), by name: a
        checkpoint saves them, as it saves the policy's, so that a load builds them again (their
        weights come back with the training state). kerasrl's default networks are not listed:
        the config builds them again. None here."""
        return {}

    @classmethod
    def rebuilt_model(cls, name: str, model, observation_space, action_space):
        """A model a user's factory made again for the checkpoint's model `name`, made ready for
        its weights as the agent held it (kerasrl.policy_io.rebuilt_model: a policy's model)."""
        return rebuilt_model(name, model, observation_space, action_space)

    @classmethod
    def whole_model(cls, name: str, model, observation_space, action_space, config):
        """The network an agent of `config` makes of the user's `model` when it is a torso (the
        value agents' dueling or noisy streams), or None where the agent takes models whole: what
        a checkpoint loads a factory's torso into."""
        return None

    @classmethod
    def models_as_keywords(cls, models: dict[str, Any]) -> dict[str, Any]:
        """The constructor keywords that hand a loaded agent the models its checkpoint saved
        besides "model" (the policy's others, e.g. PPO's value_model, and
        `models_beside_policy`'s): by their names here."""
        return dict(models)

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
            "history": {"episodes": self.history.episodes, "updates": self.history.updates,
                        "evaluations": self.history.evaluations},
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
                               updates=list(meta["history"]["updates"]),
                               evaluations=list(meta["history"].get("evaluations", [])))  # since 2026-11-28
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
