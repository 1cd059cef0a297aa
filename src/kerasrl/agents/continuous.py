"""What the off-policy continuous-control agents (DDPG, TD3, SAC, TQC, CrossQ, NAF) share: the
loop around a Learner.

Actions live in two units. The networks, the losses and the exploration noise work in the unit
box [-1, 1]^D; the environment and the replay buffer hold the env's own actions (float32 arrays
within the Box bounds). The policy's output-to-action step (kerasrl.policies.scale_to_bounds)
goes from the first to the second, and sampling goes back (`unit_from_bounds`), both in numpy.

Observations too may live in two units: with `normalize_observations` the networks see them
normalized by running statistics (kerasrl.policies.RunningMeanStd, updated with every observation
acted on, warm-up included), the replay buffer holds them raw and sampled batches are normalized
with the statistics of the time they are sampled (as Stable-Baselines3's VecNormalize); the policy
holds the same statistics, so that it acts as the agent does, saved or exported.

The loop, per vector step:
    act: uniform random before `learning_starts`, else from the actor with exploration noise
    step the n_envs environments, store the transitions (true final observation on auto-reset)
    every `train_freq` steps after `learning_starts`: `gradient_steps` gradient steps on sampled
        batches (the noise the losses need drawn in numpy, so every backend sees the same
        numbers), all in one compiled call (see kerasrl.agents.learner)
Each agent file gives its networks' output size, its gradient step and, where they differ from
the actor plus action noise (DDPG's, TD3's and NAF's), its exploration and its batches' noise.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import keras
import numpy as np

from kerasrl import backend
from kerasrl.agents.base import Agent, multiples_passed
from kerasrl.agents.learner import Learner
from kerasrl.agents.state_arrays import load_replay_learning_arrays, replay_learning_arrays
from kerasrl.buffers import replay_buffer_for
from kerasrl.buffers.replay import action_layout
from kerasrl.exploration import ActionNoise, NoisyActor
from kerasrl.layers import renormalization_for
from kerasrl.models import adapt_critic, build_critic, build_model, dummy_observation
from kerasrl.networks import actor_network, critic_network
from kerasrl.optim import Adam
from kerasrl.policies import (RunningMeanStd, forward_fn, normalize_observations, scale_to_bounds,
                              unit_from_bounds)


class ContinuousAgent(Agent):
    """Base of DDPG, TD3, SAC and NAF. See `kerasrl.TD3` for the arguments."""

    actor_activation: str | None = "tanh"  # the default actor's output layer
    policy_class: type = None
    loss_names: tuple[str, ...] = ()
    delays_actor = False  # the actor moves every policy_delay-th step (TD3, CrossQ: see update)

    def __init__(self, env, *, model=None, critic=None, config=None, **hyperparameters):
        self._critic_spec = critic
        self._policy = None
        super().__init__(env, model=model, config=config, **hyperparameters)

    # -- construction -------------------------------------------------------------------------
    def _check_action_space(self) -> None:
        """Refuse what these agents cannot act in, naming the fix; set action_dim."""
        name, space = type(self).__name__, self.action_space
        if isinstance(space, gym.spaces.Discrete):
            raise ValueError(
                f"{name} needs a continuous (Box) action space, but {self.env_name} has {space}. "
                f"For discrete actions use kerasrl.DQN or kerasrl.PPO.")
        if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1):
            raise ValueError(
                f"{name} acts in Box action spaces (continuous actions); {self.env_name} has "
                f"{space}. For discrete actions of several components use kerasrl.PPO or "
                f"kerasrl.A2C.")
        low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(high > low)):
            raise ValueError(
                f"{name} squashes its actions into the Box bounds, but the action space of "
                f"{self.env_name} ({space}) is unbounded (low {low.tolist()}, high "
                f"{high.tolist()}). Declare the range its actions take: a Box with finite low "
                f"and high as the env's action_space, or around it gymnasium.wrappers."
                f"TransformAction(env, lambda a: a, gymnasium.spaces.Box(LOW, HIGH, "
                f"{space.shape})). (gymnasium.wrappers.ClipAction declares an unbounded space: "
                f"put it inside that wrapper, not around it.)")
        self.action_dim = int(space.shape[0])

    def _actor_outputs(self) -> int:
        return self.action_dim

    def _critic_outputs(self) -> int:
        """Each critic's outputs per (s, a): its Q-value (TQC: its quantiles)."""
        return 1

    def _build(self, model) -> None:
        cfg = self.config
        self._check_action_space()
        self.actor = build_model(
            model, self.observation_space, self._actor_outputs(), action_space=self.action_space,
            default=lambda: actor_network(self.observation_space, self._actor_outputs(),
                                          cfg.hidden_sizes, self.actor_activation,
                                          normalization=renormalization_for(cfg)),
            role="actor", seed=self.weights_seed)
        self.critics = self._build_critics()
        self.learner = self._make_learner()
        self._act = forward_fn(self.actor)
        self.buffer = replay_buffer_for(self.env, self.observation_space, cfg.buffer_size,
                                        cfg.n_envs, cfg.gamma, hindsight=self._hindsight_replay(),
                                        action_layout=action_layout(self.action_space))
        self._round = self.learner.compile_round(self._step, self.loss_names)
        self._one_step_rounds = {}  # actor due or not -> its round (delays_actor; see update)
        self.n_updates = 0
        self._vector_steps = 0
        self.obs_rms = (RunningMeanStd(self.observation_space.shape)
                        if cfg.normalize_observations else None)
        # The actor's exploration noise (DDPG, TD3, NAF); SAC samples its policy instead.
        self.noise = (ActionNoise(cfg.action_noise, cfg.action_noise_std,
                                  (cfg.n_envs, self.action_dim), cfg.ou_theta, cfg.ou_dt)
                      if hasattr(cfg, "action_noise") else None)

    def _build_critics(self) -> list[keras.Model]:
        """The networks learned beside the actor: `n_critics` Q critics (NAF: V and L)."""
        return [self._build_critic(i) for i in range(self._n_critics())]

    def _n_critics(self) -> int:
        return int(getattr(self.config, "n_critics", 1))

    def _build_critic(self, i: int) -> keras.Model:
        """Critic i: the user's (a model for the first, fresh clones of it for the others; a
        builder called once per critic; a list of one model per critic), or the default MLP."""
        spec = self._critic_spec
        if isinstance(spec, (list, tuple)):
            if len(spec) != self._n_critics():
                raise ValueError(f"critic= lists {len(spec)} models; {type(self).__name__} has "
                                 f"n_critics={self._n_critics()}: give one per critic, or one "
                                 f"model or builder for all.")
            spec = spec[i]
        elif isinstance(spec, keras.Model) and i > 0:
            try:
                spec = keras.models.clone_model(spec)  # same architecture, new weights
            except Exception as error:  # the user's model: say what to pass instead
                raise ValueError(
                    f"{type(self).__name__} needs {self._n_critics()} critics and could not clone "
                    f"the critic model ({type(spec).__name__}: {error}). Pass critic= a function "
                    f"(observation_space, action_space) -> keras.Model instead.") from error
        return build_critic(
            spec, self.observation_space, self.action_space, role=f"critic {i}",
            default=lambda: critic_network(
                self.observation_space, self.action_dim,
                getattr(self.config, "critic_hidden_sizes", self.config.hidden_sizes),
                name=f"critic_{i}", n_outputs=self._critic_outputs(),
                normalization=renormalization_for(self.config)),
            seed=self.weights_seed, stream=f"critic_{i}", warn_output=i == 0,
            outputs=self._critic_outputs())

    def models_beside_policy(self) -> dict[str, keras.Model]:
        """The critics, when they are the user's (critic_0, critic_1, ...)."""
        if self._critic_spec is None:
            return {}
        return {f"critic_{i}": critic for i, critic in enumerate(self.critics)}

    @classmethod
    def rebuilt_model(cls, name: str, model, observation_space, action_space):
        """A critic (critic_0, ...): adapted to Dict observations as a critic (it takes
        [observations, actions]) and built on a batch of one of both."""
        if not name.startswith("critic_"):
            return super().rebuilt_model(name, model, observation_space, action_space)
        action_dim = int(np.prod(action_space.shape))
        model = adapt_critic(model, observation_space, action_dim)
        model([dummy_observation(observation_space, batch_size=1),
               np.zeros((1, action_dim), np.float32)], training=False)
        return model

    @classmethod
    def models_as_keywords(cls, models: dict[str, keras.Model]) -> dict:
        """critic_0, critic_1, ... as `critic=[...]`, one model per critic."""
        models = dict(models)
        names = sorted((name for name in models if name.startswith("critic_")),
                       key=lambda name: int(name.rsplit("_", 1)[1]))
        if names:
            models["critic"] = [models.pop(name) for name in names]
        return models

    def _adam(self, **overrides) -> Adam:
        return Adam.from_config(self.config, **overrides)

    def _make_learner(self) -> Learner:
        critics = tuple(f"critic_{i}" for i in range(len(self.critics)))
        models = {"actor": self.actor, **dict(zip(critics, self.critics))}
        return Learner(models, targets=("actor", *critics),
                       optimizers={"actor": (self._adam(), ("actor",)),
                                   "critic": (self._adam(), critics)})

    @property
    def critic_names(self) -> tuple[str, ...]:
        return tuple(f"critic_{i}" for i in range(len(self.critics)))

    # -- to implement -------------------------------------------------------------------------
    def _step(self, state, batch, learning_rate):
        """One gradient step, pure: (state, batch) -> (state, {loss name: scalar})."""
        raise NotImplementedError

    def _explore_unit(self, observations: np.ndarray) -> np.ndarray:
        """Exploratory unit-box actions (n_envs, D) for the current observations: the actor's
        plus the action noise, clipped to the box."""
        outputs = self.actor_outputs(observations)
        if self.outputs_are_unit_actions:
            self._check_actor_range(outputs)
        return np.asarray(self.explore_from_outputs(outputs, self.noise(self.rng)), np.float32)

    outputs_are_unit_actions = True  # the actor's outputs are actions in [-1, 1] (SAC's are not)

    def _check_actor_range(self, outputs: np.ndarray) -> None:
        """An actor whose outputs leave [-1, 1] (no tanh at its end, or keras.io's DDPG actor,
        which multiplies its tanh by the upper bound) acts clipped while the critic and the
        actor's loss see the unclipped outputs: reported once, with the fix."""
        if "actor-range" in self.diagnostics.reported:  # once is enough: no scan per step after it
            return
        reach = float(np.abs(outputs).max()) if outputs.size else 0.0
        if reach > 1.0 + 1e-3 and np.isfinite(reach):
            low, high = self.action_space.low, self.action_space.high
            self.diagnostics.report("actor-range", (
                f"The actor's outputs reach {reach:.3g}, outside [-1, 1]: {type(self).__name__} acts with "
                f"them clipped to [-1, 1], scaled to the env's bounds [{np.min(low):g}, {np.max(high):g}], "
                f"while its critic and the actor's loss see them unclipped. End the actor in tanh, "
                f"with no scaling after it: kerasrl scales [-1, 1] to the bounds (keras.io's DDPG "
                f"example multiplies its tanh by the upper bound; drop that)."))

    def batch_noise_scales(self) -> dict[str, float]:
        """The Gaussian noise a gradient step reads: batch key -> its std, one (B, D) array per
        step each (TD3's target smoothing, SAC's reparameterization). The Python loop draws it in
        numpy (`sample_batches`), the compiled loop from its own streams."""
        return {}

    def _batch_noise(self, n_batches: int, batch_size: int) -> dict[str, np.ndarray]:
        """The noise arrays the gradient step reads, (G, B, D) each, drawn from self.rng."""
        shape = (n_batches, batch_size, self.action_dim)
        return {key: (std * self.rng.standard_normal(shape)).astype(np.float32)
                for key, std in self.batch_noise_scales().items()}

    # -- the algorithm's pure functions, which the compiled loop runs too ------------------------
    def train_step(self, state, batch, learning_rate):
        """One gradient step, pure `keras.ops`: (learner state, batch) -> (state, {loss name:
        scalar}). `batch`: one row (B, ...) of what `sample_batches` makes (actions in the unit
        box, with the noise of `batch_noise_scales`)."""
        return self._step(state, batch, learning_rate)

    def explore_from_outputs(self, outputs, noise, ops=np):
        """Exploring unit-box actions (B, D) from the actor's outputs (B, outputs) and the
        exploration noise (B, D), in numpy (the Python loop) or keras.ops (`ops=keras.ops`, the
        compiled loop): the actor's action plus the noise, clipped to the box."""
        return ops.clip(self.greedy_from_outputs(outputs, ops) + noise, -1.0, 1.0)

    def greedy_from_outputs(self, outputs, ops=np):
        """The deterministic unit-box actions (B, D) of the actor's outputs (B, outputs)."""
        return ops.clip(outputs, -1.0, 1.0)

    @property
    def exploration_std(self) -> float:
        """The std of the Gaussian exploration noise `explore` scales its standard normal draws
        by (0 with action_noise='none')."""
        return 0.0 if self.config.action_noise == "none" else float(self.config.action_noise_std)

    def explore(self, state, observations, noise):
        """Pure `keras.ops`: exploring unit-box actions (B, D) of the learner `state` for
        observations (B, *obs_shape) as the networks see them, with the exploration `noise` (B, D)
        as `explore_from_outputs` takes it (Gaussian: `exploration_std` times standard normals;
        Ornstein-Uhlenbeck: the process's state; SAC: standard normals)."""
        outputs = self.learner.apply("actor", state["params"], state, observations)
        return self.explore_from_outputs(outputs, noise, ops=keras.ops)

    def greedy(self, state, observations):
        """Pure `keras.ops`: the deterministic unit-box actions (B, D) of the learner `state`."""
        outputs = self.learner.apply("actor", state["params"], state, observations)
        return self.greedy_from_outputs(outputs, ops=keras.ops)

    # -- acting -------------------------------------------------------------------------------
    def normalize(self, observations: np.ndarray, update: bool = False) -> np.ndarray:
        """Observations (B, *obs_shape) as the networks see them, float32: normalized by the
        running statistics with `normalize_observations` (folded in first when `update`)."""
        return normalize_observations(self.obs_rms, observations, self.config.clip_obs, update)

    def actor_outputs(self, observations: np.ndarray) -> np.ndarray:
        """The actor's outputs (B, outputs) for raw observations, from the learner's weights."""
        with backend.inference(), self.learner.acting_scope():
            params, non_trainable = self.learner.acting_weights()
            out = self._act(params["actor"], non_trainable["actor"],
                            backend.feed(self.normalize(observations)))
        return np.asarray(backend.to_numpy(out), np.float32)

    def _deterministic_unit(self, observations: np.ndarray) -> np.ndarray:
        return self.greedy_from_outputs(self.actor_outputs(observations))

    def _to_env(self, unit_actions: np.ndarray) -> np.ndarray:
        return scale_to_bounds(np.asarray(unit_actions, np.float32), self.action_space.low,
                               self.action_space.high).astype(np.float32)

    def _act_greedy(self, observations):
        return self._to_env(self._deterministic_unit(observations))

    def _explore(self, greedy_actions, rng):
        """evaluate(deterministic=False) gets the deterministic actions too: exploration noise
        belongs to training (`agent.policy.predict(obs, deterministic=False)` samples)."""
        return greedy_actions

    # -- the loop -----------------------------------------------------------------------------
    def _learn(self, total_steps, stop_at, logger, callback):
        cfg = self.config
        obs = self.loop.observations
        while self.num_timesteps < stop_at:
            if self.obs_rms is not None:
                self.obs_rms.update(obs)
            if self.num_timesteps < cfg.learning_starts:
                unit = self.rng.uniform(-1.0, 1.0, (cfg.n_envs, self.action_dim)).astype(np.float32)
            else:
                unit = self._explore_unit(obs.astype(np.float32, copy=False))
            actions = self._to_env(unit)
            next_obs, rewards, terminated, truncated, final_obs, _ = self._step_envs(actions, logger)
            self.buffer.add(obs, actions, rewards, final_obs, terminated, truncated)
            self._episodes_ended(terminated | truncated)
            obs = self.loop.observations = next_obs
            self._vector_steps += 1
            if self._vector_steps % cfg.train_freq == 0 and self.num_timesteps > cfg.learning_starts:
                losses = self._train_round(total_steps)
                logger.update(self.num_timesteps, **losses)
            if callback is not None and (terminated.any() or truncated.any()):
                if callback(self, logger.history) is False:
                    break

    # -- remote actors (kerasrl.distributed) ----------------------------------------------------
    def explorer(self, n_envs, epsilon=None):
        """DDPG and TD3 explore with the actor plus their action noise (SAC overrides: it samples)."""
        cfg = self.config
        return NoisyActor(ActionNoise(cfg.action_noise, cfg.action_noise_std,
                                      (n_envs, self.action_dim), cfg.ou_theta, cfg.ou_dt))

    def random_warmup(self) -> bool:
        return self.num_timesteps < self.config.learning_starts

    def receive_transitions(self, chunk, steps_before, total_steps, logger) -> None:
        if self.obs_rms is not None:  # the observations the actors acted on, as a local run
            self.obs_rms.update(chunk["observations"])
        self._store_transitions(chunk)
        cfg, n_rows = self.config, len(chunk["actions"])
        rounds = multiples_passed(self._vector_steps, n_rows, cfg.train_freq)
        self._vector_steps += n_rows
        if self.num_timesteps > cfg.learning_starts:
            for _ in range(rounds):
                logger.update(self.num_timesteps, **self._train_round(total_steps))

    def loop_counters(self) -> dict[str, int]:
        """Vector steps taken: what a loop that continues this agent's training (the compiled
        engine) starts from (the gradient steps are the learner state's "step")."""
        return {"vector_steps": self._vector_steps}

    def load_loop_counters(self, vector_steps: int) -> None:
        """Continue from `loop_counters()` as another loop left them."""
        self._vector_steps = int(vector_steps)

    def _episodes_ended(self, done: np.ndarray) -> None:
        """Reset per-episode exploration state (Ornstein-Uhlenbeck noise) of the envs in `done`."""
        if self.noise is not None:
            self.noise.reset(done)

    def sample_batches(self) -> dict[str, np.ndarray]:
        """A round's batches from the replay buffer, (gradient_steps, batch_size, ...), actions in
        the unit box, observations as the networks see them (normalized with the statistics of
        now), with the noise the gradient step reads."""
        cfg = self.config
        batches = self.buffer.sample(cfg.batch_size, self.rng, n_batches=cfg.gradient_steps)
        batches.pop("weights")
        if self.obs_rms is not None:
            for key in ("observations", "next_observations"):
                batches[key] = self.normalize(batches[key])
        batches["actions"] = unit_from_bounds(batches["actions"], self.action_space.low,
                                              self.action_space.high)
        batches.update(self._batch_noise(cfg.gradient_steps, cfg.batch_size))
        return batches

    def update(self, batches: dict[str, np.ndarray], learning_rate: float) -> dict[str, float]:
        """Run one gradient step per leading row of numpy `batches` (G, B, ...) (as
        `sample_batches` makes them) in one compiled call. Returns the mean losses. With
        `delays_actor`, a round of one step runs the variant of `_step(actor_due=)` that moves the
        actor or the one that does not: no actor gradient computed to be discarded."""
        compiled = self._round
        if self.delays_actor and len(batches["actions"]) == 1:
            due = (self.n_updates + 1) % self.config.policy_delay == 0
            if due not in self._one_step_rounds:
                self._one_step_rounds[due] = self.learner.compile_round(
                    functools.partial(self._step, actor_due=due), self.loss_names)
            compiled = self._one_step_rounds[due]
        losses = self.learner.run_round(compiled, batches, learning_rate)
        self.n_updates += len(batches["actions"])
        return losses

    def _train_round(self, total_steps: int) -> dict[str, float]:
        losses = self.update(self.sample_batches(), self._learning_rate(total_steps))
        self.check_loss(losses[self.loss_names[0]], self.n_updates)
        return losses

    # -- weights out --------------------------------------------------------------------------
    def sync_model(self) -> None:
        """Write the learner's current weights into the Keras actor and critics (`self.actor`,
        `self.critics`), and the observation statistics into the policy: the one call through
        which weights reach the models."""
        self.learner.push_weights()
        if self._policy is not None:
            self._policy.obs_rms = self.obs_rms

    push_weights = sync_model  # the name DDPG, TD3 and SAC first had

    @property
    def model(self) -> keras.Model:
        """The Keras actor. Its weights are the learner's as of the last `sync_model()`."""
        return self.actor

    @property
    def policy(self):
        """The inference-only policy on the actor (see `Agent.policy`)."""
        if self._policy is None:
            self._policy = self._make_policy()
        return self._policy

    def _make_policy(self):
        stats = {"obs_rms": self.obs_rms, "clip_obs": self.config.clip_obs}
        if self.noise is not None:  # predict(deterministic=False) adds this much noise
            stats["noise_std"] = self.config.action_noise_std
        return self.policy_class(self.actor, self.observation_space, self.action_space, **stats)

    # -- training state -----------------------------------------------------------------------
    def _extra_state(self):
        arrays = replay_learning_arrays(self.learner, self.buffer)
        arrays.update({f"exploration/{k}": np.array(v) for k, v in self._exploration_state().items()})
        if self.obs_rms is not None:
            arrays.update({f"obs_rms/{k}": v for k, v in self.obs_rms.state_dict().items()})
        return arrays, {"n_updates": self.n_updates, "vector_steps": self._vector_steps}

    def _load_extra_state(self, arrays, meta):
        load_replay_learning_arrays(self.learner, self.buffer, arrays)
        self._load_exploration_state({k[len("exploration/"):]: v for k, v in arrays.items()
                                      if k.startswith("exploration/")})
        if self.obs_rms is not None:
            self.obs_rms.load_state_dict({k: arrays[f"obs_rms/{k}"] for k in ("mean", "var", "count")})
        self.n_updates = int(meta["n_updates"])
        self._vector_steps = int(meta["vector_steps"])

    def _exploration_state(self) -> dict[str, np.ndarray]:
        return {} if self.noise is None else {"ou_state": self.noise.state}

    def _load_exploration_state(self, arrays: dict[str, np.ndarray]) -> None:
        if self.noise is not None:
            self.noise.state[...] = arrays["ou_state"]
