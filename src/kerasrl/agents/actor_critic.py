"""The actor-critic agents' networks (PPO, and A2C and recurrent PPO through it).

`actor_critic_mlp` is SB3's default actor and critic (an MLP, or the Nature CNN on Atari-sized
frames). `ActorCriticNetworks` is the part of `kerasrl.agents.ppo.PPO` that owns the networks: it
reads the action space (categorical logits or Gaussian means), builds or checks the actor and
critic (or one shared actor-critic model), makes the learner over them, computes their outputs
from the learner's weights, and writes those weights out to the Keras models and the policy.
"""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import keras
import numpy as np
from keras import ops

from kerasrl.agents.learner import Learner
from kerasrl.initializers import seed_initial_weights, seeded_build
from kerasrl.model_checks import warn_bounded_output
from kerasrl.models import (
    adapt_model,
    built_in,
    build_model,
    call_builder,
    check_drivable,
    check_unclaimed,
    claim,
    dummy_observation,
    stateless_apply,
)
from kerasrl.networks import (
    NATURE_MIN_SIDE,
    encode_leaves,
    image_input_scale,
    is_image_space,
    nature_features,
)
from kerasrl.policies import ActorCriticPolicy
from kerasrl.spaces import FlatObservations, action_sizes


def actor_critic_mlp(observation_space: gym.Space, n_outputs: int, hidden_sizes=(64, 64),
                     activation="tanh", ortho_init=True, head="policy", shared=False):
    """SB3's default MLP: hidden layers with orthogonal init (gain sqrt 2), a linear head; on
    Atari-sized frames (`is_image_space`, sides of 36 or more) SB3's CnnPolicy: the Nature CNN
    instead of the layers. Small boards (MinAtar's 10x10 planes) keep the MLP on `hidden_sizes`,
    as PureJaxRL and rejax train them: in the compiled loop on one CPU core a round of 8,192
    MinAtar-Breakout steps took 0.2 s with the 64x64 MLP; with the small-board CNN, 12 rounds had
    not finished after 12 minutes.

    `head="policy"`: (B, n_outputs) logits or means, head init gain 0.01; `head="value"`: (B, 1),
    gain 1. `shared=True`: one torso and both heads, outputs `[policy, value]`.
    """
    def init(gain):
        return keras.initializers.Orthogonal(gain) if ortho_init else "glorot_uniform"

    inputs = keras.Input(shape=tuple(observation_space.shape), name="observation")
    x = keras.layers.Flatten()(inputs) if len(observation_space.shape) > 1 else inputs
    if isinstance(observation_space, FlatObservations):  # a Dict or Tuple observation
        x = encode_leaves(inputs, observation_space)
    elif is_image_space(observation_space) and min(observation_space.shape[:2]) >= NATURE_MIN_SIDE:
        # SB3's CnnPolicy: the Nature CNN (uint8 scaled inside), orthogonal gain sqrt 2, and the
        # heads on its 512 features (no hidden layers after it).
        x = nature_features(image_input_scale(observation_space)(inputs), init(math.sqrt(2)))
        hidden_sizes = ()
    for i, size in enumerate(hidden_sizes):
        x = keras.layers.Dense(size, activation=activation, kernel_initializer=init(math.sqrt(2)),
                               name=f"hidden_{i}")(x)
    policy = keras.layers.Dense(n_outputs, kernel_initializer=init(0.01), name="policy")(x)
    value = keras.layers.Dense(1, kernel_initializer=init(1.0), name="value")(x)
    if shared:
        return keras.Model(inputs, [policy, value], name="actor_critic")
    if head == "policy":
        return keras.Model(inputs, policy, name="actor")
    return keras.Model(inputs, value, name="critic")


class ActorCriticNetworks:
    """PPO's networks, a part of `PPO` kept in its own module: the actor (policy logits or
    Gaussian means), the critic (or one shared model), the learner over them, and the weights out.
    It reads the agent's config, spaces and seeds, and `PPO._optimizer` for the learner."""

    # -- construction -------------------------------------------------------------------------
    def _check_spaces(self) -> None:
        cfg, space = self.config, self.action_space
        # (n,) Discrete, nvec MultiDiscrete
        self.action_sizes = action_sizes(space, type(self).__name__, self.env_name)
        if self.action_sizes is not None:
            self.discrete = True
            if cfg.log_std_init is not None:
                raise ValueError(
                    f"log_std_init sets the spread of a Gaussian policy for continuous (Box) "
                    f"actions, but {self.env_name} has {space}: a categorical policy has no log "
                    f"std. Remove log_std_init (use ent_coef to encourage exploration).")
            self.n_outputs = int(sum(self.action_sizes))  # the components' logits side by side
            self._mask_sizes = self.action_sizes  # an env's action masks are obeyed
            return
        if not (isinstance(space, gym.spaces.Box) and len(space.shape) == 1):
            raise ValueError(
                f"{type(self).__name__} handles Discrete, MultiDiscrete, MultiBinary and Box "
                f"action spaces; {self.env_name} has {space}. Give the agent one of those with a "
                f"gymnasium.ActionWrapper that maps it to the env's actions.")
        self.discrete = False
        self.n_outputs = int(space.shape[0])
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            warnings.warn(
                f"The action space of {self.env_name} ({space}) has infinite bounds: Gaussian "
                f"actions are sent unclipped on those dimensions. Give the Box finite bounds (or "
                f"rescale the actions in a wrapper) if the env expects a range.", stacklevel=4)

    def _build_networks(self, model) -> None:
        cfg, obs_space = self.config, self.observation_space
        self.shared = False
        if model is None and self._value_model_spec is None and cfg.shared_network:
            model = built_in(seeded_build(lambda: actor_critic_mlp(
                obs_space, self.n_outputs, cfg.hidden_sizes, cfg.activation, cfg.ortho_init,
                shared=True), self.weights_seed))
        if model is not None and not isinstance(model, keras.Model) and callable(model):
            builder = model  # its draws skipped where the seed draws every weight again
            built = seeded_build(lambda: call_builder(builder, obs_space, self.action_space,
                                                      "the model builder"), self.weights_seed)
            if not isinstance(built, keras.Model):
                raise TypeError(f"The model builder {getattr(model, '__name__', model)!r} returned "
                                f"{type(built).__name__}, not a keras.Model.")
            model = built
        if isinstance(model, keras.Model) and isinstance(obs_space, FlatObservations):
            # A Dict / Tuple observation: the model gets the leaves by name.
            check_unclaimed(model, "model")
            model = adapt_model(model, obs_space)
        if isinstance(model, keras.Model) and self._two_outputs(model):
            if self._value_model_spec is not None:
                raise ValueError(
                    "model= has two outputs (a shared actor-critic: policy and value), so "
                    "value_model= would be a second critic. Pass one or the other.")
            self.actor = self._check_shared(model)
            self.shared, self.critic = True, None
            return
        what = "logits (batch, n_actions)" if self.discrete else "Gaussian means (batch, action_dim)"
        self.actor = build_model(
            model, obs_space, self.n_outputs, action_space=self.action_space,
            default=lambda: actor_critic_mlp(obs_space, self.n_outputs, cfg.hidden_sizes,
                                             cfg.activation, cfg.ortho_init, head="policy"),
            role=f"policy model (it outputs {what})", seed=self.weights_seed, stream="policy")
        self.critic = build_model(
            self._value_model_spec, obs_space, 1, action_space=self.action_space,
            default=lambda: actor_critic_mlp(obs_space, self.n_outputs, cfg.hidden_sizes,
                                             cfg.activation, cfg.ortho_init, head="value"),
            role="value model", seed=self.weights_seed, stream="value")

    def _two_outputs(self, model) -> bool:
        try:
            out = model(dummy_observation(self.observation_space, 2), training=False)
        except Exception:  # build_model reports the error with its context
            return False
        return isinstance(out, (list, tuple))

    def _check_shared(self, model: keras.Model) -> keras.Model:
        check_unclaimed(model, "model")
        out = model(dummy_observation(self.observation_space, 2), training=False)
        shapes = [tuple(o.shape) for o in out]
        if len(out) != 2 or shapes[0] != (2, self.n_outputs) or shapes[1] not in ((2, 1), (2,)):
            raise ValueError(
                f"A shared actor-critic model must output [policy (batch, {self.n_outputs}), "
                f"value (batch, 1)] for this environment; it outputs {shapes} for a batch of 2.")
        if not model.trainable_variables:
            raise ValueError(f"The actor-critic model ({type(model).__name__}) has no trainable "
                             f"weights.")
        check_drivable(model, self.observation_space, "actor-critic model")
        what = "logits (batch, n_actions)" if self.discrete else "Gaussian means (batch, action_dim)"
        warn_bounded_output(model, f"policy output of the shared actor-critic model (it outputs {what})", output=0)
        warn_bounded_output(model, "value output of the shared actor-critic model", output=1)
        if self.weights_seed is not None:
            seed_initial_weights(model, self.weights_seed, "actor-critic")
        return claim(model, "model")

    def _new_learner(self) -> Learner:
        """The learner, from the models' current weights: "actor" (the shared model, if any),
        "critic", and for Box actions the Gaussian's "log_std"; one optimizer (`_optimizer`) over
        all of them."""
        cfg = self.config
        models = {"actor": self.actor} if self.shared else {"actor": self.actor,
                                                            "critic": self.critic}
        log_std_init = 0.0 if cfg.log_std_init is None else cfg.log_std_init
        parameters = {} if self.discrete else {
            "log_std": [np.full(self.n_outputs, log_std_init, dtype=np.float32)]}
        return Learner(models, optimizers={self.optimizer_group: (
            self._optimizer(), self._optimized_names(models, parameters))}, parameters=parameters)

    def _optimized_names(self, models: dict, parameters: dict) -> tuple[str, ...]:
        """What the one optimizer updates: every model and plain parameter (TRPO: the critic)."""
        return (*models, *parameters)

    # -- the networks, functionally ------------------------------------------------------------
    def _outputs(self, params, non_trainable, observations, training):
        """`(policy outputs (B, n_outputs), values (B,), new non-trainable weights {name: [...]})`
        for `params` / `non_trainable` keyed by model name, as in the learner's state."""
        if self.shared:
            (policy, values), actor_states = stateless_apply(
                self.actor, params["actor"], non_trainable["actor"], observations, training)
            return policy, ops.reshape(values, (-1,)), {"actor": actor_states}
        policy, actor_states = stateless_apply(
            self.actor, params["actor"], non_trainable["actor"], observations, training)
        values, critic_states = stateless_apply(
            self.critic, params["critic"], non_trainable["critic"], observations, training)
        return policy, ops.reshape(values, (-1,)), {"actor": actor_states, "critic": critic_states}

    # -- weights out --------------------------------------------------------------------------
    def sync_model(self) -> None:
        """Write the learner's weights into the Keras actor and critic, and the log std and
        observation statistics into the policy (see `Agent.sync_model`)."""
        self.learner.push_weights()
        if self._policy is not None:
            self._policy.log_std = self.log_std
            self._policy.obs_rms = self.obs_rms

    @property
    def model(self) -> keras.Model:
        """The Keras actor (or shared actor-critic; weights as of the last `sync_model()`)."""
        return self.actor

    @property
    def value_model(self) -> keras.Model | None:
        """The Keras critic (None with a shared model; weights as of the last `sync_model()`)."""
        return self.critic

    @property
    def log_std(self) -> np.ndarray | None:
        """The Gaussian's log standard deviations (action_dim,), or None for Discrete actions."""
        return None if self.discrete else self._log_std.copy()

    @property
    def policy(self) -> ActorCriticPolicy:
        """The policy (inference only): models, log std, observation statistics, as of the last
        `sync_model()` (see `Agent.policy`)."""
        if self._policy is None:
            self._policy = ActorCriticPolicy(
                self.actor, self.observation_space, self.action_space, value_model=self.critic,
                shared=self.shared, log_std=self.log_std, obs_rms=self.obs_rms,
                clip_obs=self.config.clip_obs)
        self._policy.action_masks = self.loop.action_masks is not None
        return self._policy
