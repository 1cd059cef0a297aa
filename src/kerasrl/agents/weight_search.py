"""Searching a Keras model's weights without gradients: what CEM and ARS share.

A search keeps a distribution or a point in the space of the model's trainable weights, flattened
to one vector of D numbers; each iteration it draws candidate weight vectors, scores each by the
mean return of its whole episodes, and moves. The loop, per iteration:
    draw the candidates (the subclass: `draw_candidates`)
    run each for `episodes_per_candidate` whole episodes: each of the n_envs envs runs one
        candidate, all acting in one forward pass (each env with its own weights); an env whose
        episode ends starts the next candidate's episode
    hand the scores, (N,) mean returns, to the subclass (`refit`)
An env whose episode ends when every candidate of the iteration is taken runs the search's
current weights (`search_center`; its episode is not scored) until the iteration's last candidate
finishes; then every env starts a new episode, so that each candidate's episode starts at a reset.
"""

from __future__ import annotations

import math

import gymnasium as gym
import keras
import numpy as np
from keras import ops

from kerasrl import backend, devices
from kerasrl.agents.base import Agent, variable_values
from kerasrl.envs import episode_extras
from kerasrl.masks import masked_logits
from kerasrl.models import build_model, stateless_apply
from kerasrl.networks import actor_network, default_network
from kerasrl.policies import (ActorCriticPolicy, DeterministicActorPolicy, RunningMeanStd,
                              categorical_mode, forward_fn, normalize_observations,
                              sample_categorical, scale_to_bounds)
from kerasrl.spaces import action_sizes

# CommonConfig's fields that a gradient-free, undiscounted search has no use for.
GRADIENT_ONLY = ("lr_schedule", "max_grad_norm", "adam_epsilon", "adam_epsilon_style", "gamma")


class WeightSearch(Agent):
    """The loop of a search over a model's weights (CEM, ARS) for Discrete, MultiDiscrete and
    bounded Box action spaces. Discrete: the model's outputs are logits; the policy takes their
    argmax (or samples their softmax with `predict(deterministic=False)`). Box: the outputs, in
    [-1, 1], are scaled to the bounds (the default network ends in tanh), as DDPG's actor.

    A subclass sets `n_candidates` and `episodes_per_candidate` and writes `start_search`,
    `draw_candidates`, `refit`, `search_center`, `policy_weights` and its training state
    (`_extra_state`, `_load_extra_state`)."""

    uses_gradients = False
    knobs = ""  # what the subclass's error names instead of a gradient setting
    gradient_only = GRADIENT_ONLY

    def __init__(self, env, *, model=None, config=None, **hyperparameters):
        refused = sorted(set(hyperparameters) & set(self.gradient_only))
        if refused:
            raise ValueError(
                f"{type(self).__name__} searches the weights without gradients and scores whole "
                f"episodes by their undiscounted return, so {', '.join(refused)} has no meaning "
                f"here. Its knobs are {self.knobs}.")
        super().__init__(env, model=model, config=config, **hyperparameters)

    # -- what a search writes ----------------------------------------------------------------
    n_candidates: int
    episodes_per_candidate: int

    def start_search(self, initial: np.ndarray) -> None:
        """Set the search's state from the model's initial weight vector (D,) float64."""
        raise NotImplementedError

    def draw_candidates(self) -> np.ndarray:
        """This iteration's candidates, (n_candidates, D) float64."""
        raise NotImplementedError

    def refit(self, candidates: np.ndarray, scores: np.ndarray, logger) -> None:
        """Move the search, all candidates scored: scores (N,) their mean returns."""
        raise NotImplementedError

    def search_center(self) -> np.ndarray:
        """The weights an env runs between candidates (D,)."""
        raise NotImplementedError

    def _episode_return(self, episode_return: float, length: int) -> float:
        """A candidate's episode's score: its return (ARS adds a per-step offset)."""
        return episode_return

    def policy_weights(self) -> np.ndarray:
        """The policy's weight vector (D,)."""
        raise NotImplementedError

    # -- construction -------------------------------------------------------------------------
    def _check_spaces(self) -> None:
        space = self.action_space
        # (n,) Discrete, nvec MultiDiscrete
        name = type(self).__name__
        self.action_sizes = action_sizes(space, name, self.env_name)
        self.discrete = self.action_sizes is not None
        if self.discrete:
            self.n_outputs = int(sum(self.action_sizes))
            self._mask_sizes = self.action_sizes  # an env's action masks are obeyed
            return
        if getattr(self.config, "sample_actions", False):
            raise ValueError("sample_actions samples the softmax of Discrete actions; "
                             f"{self.env_name} has {space}. Leave it False.")
        if not (isinstance(space, gym.spaces.Box) and np.all(np.isfinite(space.low))
                and np.all(np.isfinite(space.high))):
            raise ValueError(
                f"{name} handles Discrete, MultiDiscrete and bounded Box action spaces; "
                f"{self.env_name} has {space}. Give a Box finite bounds (rescale the actions in a "
                f"gymnasium.ActionWrapper).")
        self.n_outputs = int(np.prod(space.shape))

    def _build(self, model) -> None:
        cfg, obs_space = self.config, self.observation_space
        self._check_spaces()
        # Logits (a linear layer by default), or a tanh actor's actions in [-1, 1].
        network = default_network if self.discrete else actor_network
        what = ("logits (batch, n_actions)" if self.discrete
                else "actions in [-1, 1] (batch, action_dim)")

        def default():
            return network(obs_space, self.n_outputs, cfg.hidden_sizes)

        self._model = build_model(model, obs_space, self.n_outputs, action_space=self.action_space,
                                  default=default, role=f"policy model (it outputs {what})",
                                  seed=self.weights_seed, stream="policy")
        variables = self._model.trainable_variables
        self._shapes = [tuple(v.shape) for v in variables]
        self._offsets = np.cumsum([0] + [math.prod(s) for s in self._shapes])
        self.n_weights = int(self._offsets[-1])  # D
        self.start_search(np.concatenate([w.reshape(-1) for w in variable_values(variables)])
                          .astype(np.float64))
        self.n_iterations = 0
        # This iteration: its candidates (N, D), their episodes' returns (N, E) (NaN until run),
        # the next episode to hand out (candidate = job // E) and each env's job (-1: none).
        self._candidates: np.ndarray | None = None
        self._returns: np.ndarray | None = None
        self._next_job = 0
        self._env_jobs = np.full(cfg.n_envs, -1, dtype=np.int64)
        self._acting_device = self.placement.acting_device([self._model])
        self._non_trainable = [v.value for v in self._model.non_trainable_variables]
        self._forward = forward_fn(self._model)
        self._forward_many = backend.compile(self._outputs_per_env)
        self._search_params = None  # the weights each env acts with, as fed: made on change
        self._policy_params = None  # the policy's weights, as fed: made on change
        self._eval_outputs = None
        self._policy = None
        # ARS's V2 (normalize_observations): running statistics of every observation acted on
        # while searching, which the policy keeps; None without.
        self.clip_obs = float(getattr(cfg, "clip_obs", 10.0))
        self.obs_rms = (RunningMeanStd(obs_space.shape)
                        if getattr(cfg, "normalize_observations", False) else None)

    def _outputs_per_env(self, params, non_trainable, observations):
        """(n_envs, n_outputs): env i's observation through the model with weights params[.][i].
        Unrolled over the envs (a handful): one compiled call acts for all of them."""
        outputs = []
        for i in range(self.config.n_envs):
            out, _ = stateless_apply(self._model, [p[i] for p in params], non_trainable,
                                     observations[i:i + 1], False)
            outputs.append(out)
        return ops.concatenate(outputs, axis=0)

    def unflatten(self, flat: np.ndarray) -> list[np.ndarray]:
        """Weight vectors (..., D) to the model's trainable weights, float32 (..., *shape) each."""
        flat = np.asarray(flat, dtype=np.float32)
        return [flat[..., a:b].reshape(*flat.shape[:-1], *shape)
                for a, b, shape in zip(self._offsets[:-1], self._offsets[1:], self._shapes)]

    # -- acting --------------------------------------------------------------------------------
    def _acting_scope(self):
        return devices.scope(self._acting_device or self.placement.learning)

    def _actions(self, outputs: np.ndarray, sample: bool, rng, action_masks=None) -> np.ndarray:
        """Env actions from model outputs (B, n_outputs): argmax or a softmax draw of the logits
        (among the allowed actions), or the outputs scaled from [-1, 1] to the Box bounds."""
        if self.discrete:
            logits = masked_logits(outputs, action_masks)
            if sample:
                return sample_categorical(logits, rng, self.action_sizes)[0]
            return categorical_mode(logits, self.action_sizes)
        space = self.action_space
        scaled = scale_to_bounds(np.asarray(outputs, np.float32), space.low.reshape(-1),
                                 space.high.reshape(-1))
        return scaled.reshape(len(outputs), *space.shape).astype(np.float32)

    def _search_actions(self, observations: np.ndarray) -> np.ndarray:
        """Each env's action from its candidate's weights (the search center's for an env without
        one)."""
        if self._search_params is None:
            jobs = self._env_jobs
            candidate = np.maximum(jobs, 0) // self.episodes_per_candidate
            # (n_envs, D): each env's candidate, the search's center where it has none
            rows = np.where((jobs >= 0)[:, None], self._candidates[candidate], self.search_center())
            with self._acting_scope():
                self._search_params = backend.to_tensors(self.unflatten(rows))
        observations = normalize_observations(self.obs_rms, observations, self.clip_obs,
                                              update=True)
        with backend.inference(), self._acting_scope():
            out = self._forward_many(self._search_params, self._non_trainable,
                                     backend.feed(observations))
        return self._actions(np.asarray(backend.to_numpy(out)),
                             getattr(self.config, "sample_actions", False), self.rng,
                             self.loop.action_masks)

    def _act_greedy(self, observations, action_masks=None):
        if self._policy_params is None:
            with self._acting_scope():
                self._policy_params = backend.to_tensors(self.unflatten(self.policy_weights()))
        observations = normalize_observations(self.obs_rms, observations, self.clip_obs)
        with backend.inference(), self._acting_scope():
            out = self._forward(self._policy_params, self._non_trainable,
                                backend.feed(observations))
        self._eval_outputs = np.asarray(backend.to_numpy(out))  # for _explore
        return self._actions(self._eval_outputs, False, None, action_masks)

    def _explore(self, greedy_actions, rng, action_masks=None):
        if not self.discrete:
            return greedy_actions
        return self._actions(self._eval_outputs, True, rng, action_masks)

    # -- the loop ------------------------------------------------------------------------------
    def _learn(self, total_steps, stop_at, logger, callback):
        while self.num_timesteps < stop_at:
            if self._candidates is None:
                self._draw_candidates()
            self._hand_out_episodes()
            actions = self._search_actions(self.loop.observations)
            done = self._step(actions, logger)
            if not np.isnan(self._returns).any():
                self._refit(logger)
            if callback is not None and done.any():
                if callback(self, logger.history) is False:
                    break

    def _draw_candidates(self) -> None:
        self._candidates = np.asarray(self.draw_candidates(), np.float64)  # (N, D)
        self._returns = np.full((self.n_candidates, self.episodes_per_candidate), np.nan)  # (N, E)
        self._next_job = 0

    def _hand_out_episodes(self) -> None:
        """Envs at the start of an episode and without a candidate take the next ones."""
        n_jobs = self.n_candidates * self.episodes_per_candidate
        for i in np.flatnonzero((self._env_jobs < 0) & (self.loop.episode_lengths == 0)):
            if self._next_job >= n_jobs:
                break
            self._env_jobs[i] = self._next_job
            self._next_job += 1
            self._search_params = None

    def _step(self, actions: np.ndarray, logger) -> np.ndarray:
        """Step every env once; book the candidates' finished episodes (only those reach the
        logger). Returns which envs' episodes ended, (n_envs,) bool."""
        next_obs, rewards, terminated, truncated, info = self.env.step(actions)
        done = np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
        loop = self.loop
        loop.num_timesteps += self.config.n_envs
        loop.episode_returns += np.asarray(rewards, dtype=np.float32)
        loop.episode_lengths += 1
        episodes = self.episodes_per_candidate
        for i in np.flatnonzero(done):
            job = self._env_jobs[i]
            if job >= 0:
                self._returns[job // episodes, job % episodes] = self._episode_return(
                    float(loop.episode_returns[i]), int(loop.episode_lengths[i]))
                logger.episode(loop.num_timesteps, loop.episode_returns[i],
                               loop.episode_lengths[i], **episode_extras(info, i))
                self._env_jobs[i] = -1
                self._search_params = None
        loop.episode_returns[done] = 0.0
        loop.episode_lengths[done] = 0
        loop.action_masks, _ = self._masks_after_step(info, done)
        loop.observations = next_obs
        logger.advance(self.num_timesteps, self.config.n_envs)
        return done

    def _refit(self, logger) -> None:
        """The iteration's candidates are all scored: the subclass moves the search."""
        self.refit(self._candidates, self._returns.mean(axis=1), logger)
        self.n_iterations += 1
        self._candidates = self._returns = None
        self._policy_params = self._search_params = None
        if (self.loop.episode_lengths > 0).any():  # envs midway through unscored episodes
            self.reset_envs()

    # -- training state: the iteration in progress (the subclass adds its search's) ----------
    def _iteration_state(self):
        arrays = {"search/env_jobs": self._env_jobs.copy()}
        if self._candidates is not None:
            arrays["search/candidates"] = self._candidates.copy()
            arrays["search/returns"] = self._returns.copy()
        if self.obs_rms is not None:
            arrays.update({f"obs_rms/{k}": v for k, v in self.obs_rms.state_dict().items()})
        return arrays, {"iterations": self.n_iterations, "next_job": self._next_job}

    def _load_iteration_state(self, arrays, meta, prefix="search", meta_prefix=""):
        """`prefix` and `meta_prefix`: the names a subclass's older checkpoints used (CEM's)."""
        self._env_jobs = np.array(arrays[f"{prefix}/env_jobs"], dtype=np.int64)
        self._candidates = (np.array(arrays[f"{prefix}/candidates"], dtype=np.float64)
                            if f"{prefix}/candidates" in arrays else None)
        self._returns = (np.array(arrays[f"{prefix}/returns"], dtype=np.float64)
                         if f"{prefix}/returns" in arrays else None)
        self.n_iterations = int(meta[f"{meta_prefix}iterations"])
        self._next_job = int(meta[f"{meta_prefix}next_job"])
        if self.obs_rms is not None:
            self.obs_rms.load_state_dict({k: arrays[f"obs_rms/{k}"] for k in ("mean", "var", "count")})
        self._policy_params = self._search_params = None

    def _check_vector(self, name: str, value) -> np.ndarray:
        value = np.array(value, dtype=np.float64)
        if value.shape != (self.n_weights,):
            raise ValueError(f"Saved array {name} has shape {value.shape}, the model has "
                             f"{self.n_weights} weights: the model differs from the saved one.")
        return value

    # -- weights out --------------------------------------------------------------------------
    def sync_model(self) -> None:
        """Write the policy's weights (`policy_weights()`) into the Keras model (see
        `Agent.sync_model`)."""
        for variable, value in zip(self._model.trainable_variables,
                                   self.unflatten(self.policy_weights())):
            variable.assign(value)

    @property
    def model(self) -> keras.Model:
        """The Keras model (the policy's weights as of the last `sync_model()`)."""
        return self._model

    @property
    def policy(self):
        """The policy (inference only) on the Keras model: an `ActorCriticPolicy` of logits for
        Discrete actions, a `DeterministicActorPolicy` for Box ones."""
        if self._policy is None:
            policy_class = ActorCriticPolicy if self.discrete else DeterministicActorPolicy
            self._policy = policy_class(self._model, self.observation_space, self.action_space,
                                        obs_rms=self.obs_rms, clip_obs=self.clip_obs)
        self._policy.obs_rms = self.obs_rms  # the statistics as they are now
        if self.discrete:
            self._policy.action_masks = self.loop.action_masks is not None
        return self._policy
