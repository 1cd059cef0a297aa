"""Policies: inference only, numpy in and numpy out.

A Policy holds a Keras model and what it needs to turn observations into actions; it never needs
the agent, the environment or the optimizer. It is what is saved, loaded and exported.
"""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np

from kerasrl import backend


def forward_fn(model: keras.Model):
    """A compiled `f(params, non_trainable, obs) -> outputs` in inference mode.

    Acting and TD targets use this; one compiled function per model serves the agent (with its
    learner state) and the policy (with the model's own variables).
    """

    def forward(params, non_trainable, observations):
        outputs, _ = model.stateless_call(params, non_trainable, observations, training=False)
        return outputs

    return backend.compile(forward)


class QPolicy:
    """Greedy (or epsilon-greedy) actions from a Q-network.

    Args:
        model: a built Keras model mapping (B, *obs_shape) float32 to (B, n_actions).
        observation_space, action_space: of one environment (the action space is Discrete).
    """

    def __init__(self, model: keras.Model, observation_space: gym.Space, action_space: gym.Space):
        self.model = model
        self.observation_space = observation_space
        self.action_space = action_space
        self._forward = forward_fn(model)

    def _batch(self, observations) -> tuple[np.ndarray, bool]:
        obs = np.asarray(observations, dtype=np.float32)
        single = obs.shape == tuple(self.observation_space.shape)
        if single:
            obs = obs[None]
        elif obs.shape[1:] != tuple(self.observation_space.shape):
            raise ValueError(
                f"Expected observations of shape {tuple(self.observation_space.shape)} or a batch "
                f"(B, {', '.join(map(str, self.observation_space.shape))}), got {obs.shape}."
            )
        return obs, single

    def q_values(self, observations) -> np.ndarray:
        """Q-values, (B, n_actions) for a batch, (n_actions,) for one observation."""
        obs, single = self._batch(observations)
        with backend.inference():
            q = self._forward(
                [v.value for v in self.model.trainable_variables],
                [v.value for v in self.model.non_trainable_variables],
                backend.feed(obs),
            )
        q = np.asarray(backend.to_numpy(q))
        return q[0] if single else q

    def predict(self, observations, deterministic: bool = True, epsilon: float = 0.05,
                rng: np.random.Generator | None = None) -> np.ndarray:
        """Actions for a batch of observations (or one observation).

        Deterministic: argmax of Q. Otherwise epsilon-greedy with `epsilon`, drawn with `rng`.
        """
        q = self.q_values(observations)
        actions = np.argmax(q, axis=-1)
        if not deterministic:
            rng = rng if rng is not None else np.random.default_rng()
            actions = epsilon_greedy(actions, q.shape[-1], epsilon, rng)
        return actions

    __call__ = predict


def epsilon_greedy(greedy_actions: np.ndarray, n_actions: int, epsilon: float,
                   rng: np.random.Generator) -> np.ndarray:
    """Replace each action by a uniform one with probability epsilon (numpy-side, so that every
    backend draws the same numbers from the same seed)."""
    greedy_actions = np.asarray(greedy_actions)
    explore = rng.random(greedy_actions.shape) < epsilon
    random_actions = rng.integers(0, n_actions, size=greedy_actions.shape)
    return np.where(explore, random_actions, greedy_actions)
