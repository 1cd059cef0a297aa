"""The policies of DDPG, TD3, NAF (`DeterministicActorPolicy`) and SAC (`SquashedGaussianPolicy`)."""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np

from kerasrl.policies.base import Policy, forward_fn, observation_inputs
from kerasrl.policies.normalization import RunningMeanStd, normalize_observations
from kerasrl.policies.sampling import scale_to_bounds
from kerasrl.spaces import env_action_shape, env_shaped_actions


class _ContinuousPolicy(Policy):
    """Shared by the deterministic and the tanh-Gaussian actor: batching, calling, saving, and the
    observation statistics (`obs_rms`, `clip_obs`: as ActorCriticPolicy's) when the agent
    normalized observations."""

    def __init__(self, model: keras.Model, observation_space: gym.Space, action_space: gym.Space,
                 *, obs_rms: RunningMeanStd | None = None, clip_obs: float = 10.0):
        if not isinstance(action_space, gym.spaces.Box):
            raise ValueError(f"{type(self).__name__} acts in a Box action space, not {action_space}.")
        self.model = model
        self.observation_space = observation_space
        self.action_space = action_space
        self.action_dim = int(np.prod(action_space.shape))
        self.obs_rms = obs_rms
        self.clip_obs = float(clip_obs)
        self._forward = forward_fn(model)


    def raw_outputs(self, observations) -> np.ndarray:
        """The actor's outputs (what include_values exports beside the actions)."""
        obs, single = self._batch(observations)
        obs = normalize_observations(self.obs_rms, obs, self.clip_obs)
        out = np.asarray(self._call(self._forward, self.model, obs))
        return out[0] if single else out

    def get_config(self) -> dict:
        if self.obs_rms is None:  # policy.json as before normalization existed
            return {}
        return {"obs_rms": self.obs_rms.to_config(), "clip_obs": self.clip_obs}

    def load_config(self, config: dict) -> None:
        """The observation statistics of `get_config()` output (remote actors get them)."""
        self.obs_rms = RunningMeanStd.from_config(config.get("obs_rms"),
                                                  self.observation_space.shape)

    @classmethod
    def from_saved(cls, models, observation_space, action_space, config):
        config = dict(config)
        obs_rms = RunningMeanStd.from_config(config.pop("obs_rms", None), observation_space.shape)
        return cls(models["model"], observation_space, action_space, obs_rms=obs_rms, **config)

    def _scale(self, unit_actions, ops=np):
        return scale_to_bounds(unit_actions, self.action_space.low, self.action_space.high, ops)

    def _inference_model(self, to_unit, include_values: bool, name: str) -> keras.Model:
        inputs, flat = observation_inputs(self.observation_space)
        if self.obs_rms is not None:
            flat = self.obs_rms.normalize_graph(flat, self.clip_obs)
        out = self.model(flat, training=False)
        actions = env_shaped_actions(self._scale(to_unit(out), keras.ops), self.action_space,
                                     keras.ops)
        return keras.Model(inputs, [actions, out] if include_values else actions, name=name)


class DeterministicActorPolicy(_ContinuousPolicy):
    """DDPG's and TD3's policy: the actor's output (B, D) in [-1, 1] scaled to the Box bounds, and
    clipped to them (an actor without a tanh output still acts within the bounds).

    Args:
        model: a built Keras actor, (B, *obs_shape) float32 -> (B, action_dim).
        observation_space, action_space: of one environment (the action space is a bounded Box).
        noise_std: std of the Gaussian noise (unit-box units) of `predict(deterministic=False)`.
        obs_rms, clip_obs: observation statistics and clip, as ActorCriticPolicy's (None: the actor
            sees raw observations).
    """

    policy_type = "deterministic_actor"

    def __init__(self, model, observation_space, action_space, noise_std: float = 0.1, *,
                 obs_rms: RunningMeanStd | None = None, clip_obs: float = 10.0):
        super().__init__(model, observation_space, action_space, obs_rms=obs_rms,
                         clip_obs=clip_obs)
        self.noise_std = float(noise_std)

    def get_config(self) -> dict:
        return {"noise_std": self.noise_std, **super().get_config()}

    def predict(self, observations, deterministic: bool = True,
                rng: np.random.Generator | None = None) -> np.ndarray:
        """Actions (B, *action_shape) float32 within the bounds; with deterministic=False,
        Gaussian noise of `noise_std` is added before clipping (numpy draws from `rng`)."""
        out = np.asarray(self.raw_outputs(observations), np.float32)
        if not deterministic:
            rng = rng if rng is not None else np.random.default_rng()
            out = np.clip(out + self.noise_std * rng.standard_normal(out.shape), -1.0, 1.0)
        actions = self._scale(out.astype(np.float32))
        shape = (*out.shape[:-1], *env_action_shape(self.action_space))  # () for one scalar action
        return actions.reshape(shape).astype(np.float32)

    __call__ = predict

    def inference_model(self, include_values: bool = False) -> keras.Model:
        """Observations -> actor -> scaled and clipped to the Box bounds [, the actor's output]."""
        return self._inference_model(lambda out: out, include_values, "deterministic_actor_policy")


class SquashedGaussianPolicy(_ContinuousPolicy):
    """SAC's policy: the actor outputs means and log stds (B, 2 * D); an action is
    `tanh(mean + std * noise)` scaled to the Box bounds, deterministically `tanh(mean)` scaled.

    Args:
        model: a built Keras actor, (B, *obs_shape) float32 -> (B, 2 * action_dim).
        observation_space, action_space: of one environment (the action space is a bounded Box).
        obs_rms, clip_obs: as DeterministicActorPolicy's.
    """

    policy_type = "squashed_gaussian"

    def predict(self, observations, deterministic: bool = True,
                rng: np.random.Generator | None = None) -> np.ndarray:
        """Actions (B, *action_shape) float32 within the bounds (numpy draws from `rng`)."""
        out = np.asarray(self.raw_outputs(observations), np.float32)
        mean, log_std = out[..., :self.action_dim], out[..., self.action_dim:]
        if deterministic:
            unit = np.tanh(mean)
        else:
            rng = rng if rng is not None else np.random.default_rng()
            std = np.exp(np.clip(log_std, -20.0, 2.0))
            unit = np.tanh(mean + std * rng.standard_normal(mean.shape).astype(np.float32))
        actions = self._scale(unit.astype(np.float32))
        shape = (*out.shape[:-1], *env_action_shape(self.action_space))  # () for one scalar action
        return actions.reshape(shape).astype(np.float32)

    __call__ = predict

    def inference_model(self, include_values: bool = False) -> keras.Model:
        """Observations -> actor -> tanh(mean) scaled to the Box bounds [, the actor's output]."""
        d = self.action_dim
        return self._inference_model(lambda out: keras.ops.tanh(out[:, :d]), include_values,
                                     "squashed_gaussian_policy")


# -- recurrent actor-critic policies (RecurrentPPO) -----------------------------------------------
