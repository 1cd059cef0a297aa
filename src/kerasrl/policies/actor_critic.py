"""`ActorCriticPolicy` (PPO, A2C, CEM on discrete or Box actions) and its recurrent form."""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np

from kerasrl.losses import categorical_segments
from kerasrl.masks import batch_masks, masked_logits
from kerasrl.models import recurrent_state_sizes
from kerasrl.policies.base import (
    Policy,
    exportable_argmax,
    exportable_mask,
    forward_fn,
    mask_input,
    observation_inputs,
    with_mask,
)
from kerasrl.policies.normalization import RunningMeanStd, normalize_observations
from kerasrl.policies.sampling import (
    categorical_mode,
    sample_categorical,
    sample_gaussian,
)
from kerasrl.spaces import categorical_sizes, env_shaped_actions


class ActorCriticPolicy(Policy):
    """Actions from an actor-critic network: categorical for Discrete (one per component for
    MultiDiscrete), diagonal Gaussian for Box.

    Args:
        model: a built Keras model mapping (B, *obs_shape) float32 to logits (B, n_actions) or
            means (B, action_dim); or, when `shared`, to `[that, values (B, 1)]`.
        observation_space, action_space: of one environment.
        value_model: the separate critic (B, *obs_shape) -> (B, 1), or None (shared, or not needed
            for acting).
        shared: `model` has two outputs, the policy's and the value.
        log_std: (action_dim,) numpy log standard deviations (Box action spaces only).
        obs_rms: a `RunningMeanStd` whose statistics normalize observations, or None.
        clip_obs: normalized observations are clipped to +-clip_obs.

    Deterministic actions are the argmax (Discrete) or the mean (Box); Box actions are clipped to
    the space's bounds.
    """

    policy_type = "actor_critic"

    def __init__(self, model: keras.Model, observation_space: gym.Space, action_space: gym.Space,
                 *, value_model: keras.Model | None = None, shared: bool = False,
                 log_std: np.ndarray | None = None, obs_rms: RunningMeanStd | None = None,
                 clip_obs: float = 10.0):
        self.model = model
        self.value_model = value_model
        self.shared = shared
        self.observation_space = observation_space
        self.action_space = action_space
        # The categorical distributions' sizes: (n,) Discrete, nvec MultiDiscrete; None for Box.
        self.action_sizes = categorical_sizes(action_space)
        self.discrete = self.action_sizes is not None
        if not self.discrete and log_std is None:
            raise ValueError("A Gaussian policy (Box action space) needs log_std.")
        self.log_std = None if log_std is None else np.asarray(log_std, dtype=np.float32)
        self.obs_rms = obs_rms
        self.clip_obs = clip_obs
        self._forward = forward_fn(model)
        self._value_forward = forward_fn(value_model) if value_model is not None else None


    def normalize(self, observations: np.ndarray) -> np.ndarray:
        """Observations as the network sees them (normalized when the policy has statistics)."""
        return normalize_observations(self.obs_rms, observations, self.clip_obs)

    def distribution(self, observations) -> np.ndarray:
        """Logits (B, n_actions) or Gaussian means (B, action_dim) for a batch of observations."""
        obs, single = self._batch(observations)
        out = self._call(self._forward, self.model, self.normalize(obs))
        out = np.asarray(out[0] if self.shared else out)
        return out[0] if single else out

    def values(self, observations) -> np.ndarray:
        """State values V(s), (B,) for a batch, a scalar for one observation."""
        obs, single = self._batch(observations)
        if self.shared:
            out = np.asarray(self._call(self._forward, self.model, self.normalize(obs))[1])
        elif self._value_forward is not None:
            out = np.asarray(self._call(self._value_forward, self.value_model, self.normalize(obs)))
        else:
            raise ValueError("This policy has no value network.")
        return out[0, 0] if single else out[:, 0]

    def predict(self, observations, deterministic: bool = True,
                rng: np.random.Generator | None = None, action_mask=None) -> np.ndarray:
        """Actions for a batch of observations (or one observation), numpy.

        Deterministic: argmax of the logits, or the Gaussian mean. Otherwise sampled with `rng`.
        `action_mask` (B, n_actions), or (n_actions,) for one observation, 1 = allowed (Discrete
        only): masked actions get probability exactly 0.
        """
        obs, single = self._batch(observations)
        out = self._call(self._forward, self.model, self.normalize(obs))
        params = np.asarray(out[0] if self.shared else out)
        return self._choose(params, single, deterministic, rng, action_mask)

    def _choose(self, params: np.ndarray, single: bool, deterministic: bool, rng, action_mask):
        """Actions from the distribution's parameters (B, n_outputs), as `predict` returns them."""
        if action_mask is not None:
            if not self.discrete:
                raise ValueError("action_mask applies to Discrete action spaces; this policy "
                                 f"acts in {self.action_space}.")
            params = masked_logits(params, batch_masks(
                action_mask, len(params), single, params.shape[-1],
                f"{type(self).__name__}.predict(action_mask=...)", self.action_sizes))
        if self.discrete:
            if deterministic:
                actions = categorical_mode(params, self.action_sizes)
            else:
                actions, _ = sample_categorical(params, rng or np.random.default_rng(),
                                                self.action_sizes)
        else:
            if deterministic:
                actions = params.astype(np.float32)
            else:
                actions, _ = sample_gaussian(params, self.log_std, rng or np.random.default_rng())
            actions = np.clip(actions, self.action_space.low, self.action_space.high)
        actions = env_shaped_actions(actions, self.action_space)
        return actions[0] if single else actions

    __call__ = predict

    # -- saving and exporting -----------------------------------------------------------------
    def models(self) -> dict[str, keras.Model]:
        models = {"model": self.model}
        if self.value_model is not None:
            models["value_model"] = self.value_model
        return models

    def get_config(self) -> dict:
        config = {"shared": self.shared, "clip_obs": float(self.clip_obs),
                  "log_std": None if self.log_std is None else self.log_std.tolist()}
        if self.action_masks:
            config["action_masks"] = True
        if self.obs_rms is not None:
            config["obs_rms"] = self.obs_rms.to_config()
        return config

    @staticmethod
    def _trained_values(config, observation_space):
        """(log_std, obs_rms) from `get_config()` output."""
        obs_rms = RunningMeanStd.from_config(config.get("obs_rms"), observation_space.shape)
        log_std = config.get("log_std")
        return None if log_std is None else np.asarray(log_std, np.float32), obs_rms

    def load_config(self, config: dict) -> None:
        """The log std and observation statistics of `get_config()` output."""
        self.log_std, self.obs_rms = self._trained_values(config, self.observation_space)

    @classmethod
    def from_saved(cls, models, observation_space, action_space, config):
        log_std, obs_rms = cls._trained_values(config, observation_space)
        policy = cls(models["model"], observation_space, action_space,
                     value_model=models.get("value_model"), shared=bool(config.get("shared")),
                     log_std=log_std, obs_rms=obs_rms, clip_obs=float(config.get("clip_obs", 10.0)))
        policy.action_masks = bool(config.get("action_masks", False))
        return policy

    def raw_outputs(self, observations) -> np.ndarray:
        """The logits or Gaussian means (what include_values exports beside the actions)."""
        return self.distribution(observations)

    def _exported_actions(self, out, mask=None):
        """The mode of the distribution in exportable keras.ops: argmax of the (masked) logits,
        or the Gaussian mean clipped to the bounds."""
        if not self.discrete:
            return env_shaped_actions(keras.ops.clip(out, self.action_space.low.astype(np.float32),
                                                     self.action_space.high.astype(np.float32)),
                                      self.action_space, keras.ops)
        logits = out if mask is None else exportable_mask(out, mask)
        if len(self.action_sizes) == 1:
            return exportable_argmax(logits)
        # MultiDiscrete: one argmax per component, (B, components), in the env's shape
        modes = [exportable_argmax(segment) for segment in categorical_segments(logits, self.action_sizes)]
        return env_shaped_actions(keras.ops.stack(modes, axis=-1), self.action_space, keras.ops)

    def inference_model(self, include_values: bool = False, action_mask: bool = False
                        ) -> keras.Model:
        """Observations -> normalization -> network -> mode of the distribution [, its outputs].

        `action_mask=True` (Discrete): a second input "action_mask" (B, n_actions) float32, 1 =
        allowed; the argmax is over the allowed actions (the logits output stays unmasked).
        """
        if action_mask and not self.discrete:
            raise ValueError("action_mask applies to Discrete action spaces only.")
        inputs, x = observation_inputs(self.observation_space)
        if self.obs_rms is not None:
            x = self.obs_rms.normalize_graph(x, self.clip_obs)
        out = self.model(x, training=False)
        out = out[0] if self.shared else out
        mask = mask_input(out.shape[-1]) if action_mask else None
        actions = self._exported_actions(out, mask)
        model_inputs = with_mask(inputs, mask)
        return keras.Model(model_inputs, [actions, out] if include_values else actions,
                           name="actor_critic_policy")


# -- continuous-control policies (DDPG, TD3, SAC) ------------------------------------------------
# Their networks act in the unit box [-1, 1]^D; the output-to-action step scales to the Box bounds
# (numpy in `predict`, keras.ops in the exported graph: the same float32 arithmetic).


class RecurrentActorCriticPolicy(ActorCriticPolicy):
    """A recurrent actor-critic (RecurrentPPO's policy): its model takes one step,
    `[observation, *states] -> [policy, value, *new states]` (kerasrl.models.check_recurrent_model),
    and the caller carries the state from step to step.

        state = policy.initial_state(n_envs)            # zeros, [(n_envs, size), ...]
        actions, state = policy.predict(obs, state=state, episode_start=starts)

    `episode_start` (B,) bool: the rows where a new episode starts, whose state is zeroed first
    (as training does). Exports take the states as inputs "state_0", ... after the observation
    (and action mask) and give the new states as outputs after the actions (and values); zero a
    row's state at an episode start before feeding it.

    Args:
        model: the one-step model; observation_space, action_space: of one environment;
        log_std, obs_rms, clip_obs: as `ActorCriticPolicy`'s.
    """

    policy_type = "recurrent_actor_critic"
    recurrent = True

    def __init__(self, model: keras.Model, observation_space: gym.Space, action_space: gym.Space,
                 *, log_std: np.ndarray | None = None, obs_rms: RunningMeanStd | None = None,
                 clip_obs: float = 10.0):
        super().__init__(model, observation_space, action_space, shared=True, log_std=log_std,
                         obs_rms=obs_rms, clip_obs=clip_obs)
        self.state_sizes = recurrent_state_sizes(model)

    def initial_state(self, batch_size: int = 1) -> list[np.ndarray]:
        """The state at an episode start: zeros [(batch_size, size), ...] float32."""
        return [np.zeros((batch_size, size), np.float32) for size in self.state_sizes]

    def _state(self, state, batch_size: int, single: bool, episode_start) -> list[np.ndarray]:
        if state is None:
            return self.initial_state(batch_size)
        state = [np.asarray(s, np.float32) for s in state]
        state = [s[None] if single and s.ndim == 1 else s for s in state]
        expected = [(batch_size, size) for size in self.state_sizes]
        if [s.shape for s in state] != expected:
            raise ValueError(f"state must be {len(expected)} arrays of shapes {expected} (one row "
                             f"per observation; policy.initial_state(batch) gives the first), got "
                             f"{[s.shape for s in state]}.")
        if episode_start is not None:
            keep = 1.0 - np.asarray(episode_start, np.float32).reshape(batch_size, 1)
            state = [s * keep for s in state]
        return state

    def step(self, observations, state=None, episode_start=None):
        """(policy outputs (B, n_outputs), values (B,), new state [(B, size), ...]) for a batch
        (for one observation: (n_outputs,), a scalar, [(size,), ...])."""
        obs, single = self._batch(observations)
        state = self._state(state, len(obs), single, episode_start)
        out = self._call(self._forward, self.model, [self.normalize(obs), *state])
        params, values = np.asarray(out[0]), np.asarray(out[1]).reshape(len(obs))
        new_state = [np.asarray(s) for s in out[2:]]
        if single:
            return params[0], values[0], [s[0] for s in new_state]
        return params, values, new_state

    def predict(self, observations, state=None, episode_start=None, deterministic: bool = True,
                rng: np.random.Generator | None = None, action_mask=None):
        """`(actions, new state)` for a batch of observations (or one), carrying `state` (None:
        episodes start here); actions as `ActorCriticPolicy.predict` chooses them."""
        obs, single = self._batch(observations)
        params, _, new_state = self.step(obs, state if state is None or not single
                                         else [np.reshape(s, (1, -1)) for s in state],
                                         episode_start)
        actions = self._choose(params, single, deterministic, rng, action_mask)
        return actions, ([s[0] for s in new_state] if single else new_state)

    __call__ = predict

    def distribution(self, observations, state=None, episode_start=None) -> np.ndarray:
        """Logits or Gaussian means at `state` (None: at an episode start)."""
        return self.step(observations, state, episode_start)[0]

    def values(self, observations, state=None, episode_start=None) -> np.ndarray:
        """State values V(s) at `state` (None: at an episode start)."""
        return self.step(observations, state, episode_start)[1]

    def raw_outputs(self, observations, state=None) -> np.ndarray:
        """The logits or Gaussian means (what include_values exports beside the actions)."""
        return self.distribution(observations, state)

    def get_config(self) -> dict:
        config = super().get_config()
        del config["shared"]
        return config

    @classmethod
    def from_saved(cls, models, observation_space, action_space, config):
        log_std, obs_rms = cls._trained_values(config, observation_space)
        policy = cls(models["model"], observation_space, action_space, log_std=log_std,
                     obs_rms=obs_rms, clip_obs=float(config.get("clip_obs", 10.0)))
        policy.action_masks = bool(config.get("action_masks", False))
        return policy

    def inference_model(self, include_values: bool = False, action_mask: bool = False
                        ) -> keras.Model:
        """[observation(s), (action_mask), state_0, ...] -> [actions, (policy outputs), new
        state_0, ...]: normalization, one step of the network, the mode of the distribution."""
        if action_mask and not self.discrete:
            raise ValueError("action_mask applies to Discrete action spaces only.")
        inputs, x = observation_inputs(self.observation_space)
        if self.obs_rms is not None:
            x = self.obs_rms.normalize_graph(x, self.clip_obs)
        states = [keras.Input(shape=(size,), dtype="float32", name=f"state_{i}")
                  for i, size in enumerate(self.state_sizes)]
        out, _, *new_states = self.model([x, *states], training=False)
        mask = mask_input(out.shape[-1]) if action_mask else None
        actions = self._exported_actions(out, mask)
        model_inputs = with_mask(inputs, mask)
        model_inputs = (model_inputs if isinstance(model_inputs, list) else [model_inputs]) + states
        outputs = [actions, out] if include_values else [actions]
        return keras.Model(model_inputs, outputs + list(new_states),
                           name="recurrent_actor_critic_policy")
