"""`QPolicy`: the greedy (or epsilon-greedy, Boltzmann) action of a value network."""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np

from kerasrl.heads import ValueHead, head_from_spec, head_spec
from kerasrl.masks import batch_masks, masked_argmax
from kerasrl.policies.base import (
    Policy,
    exportable_argmax,
    exportable_mask,
    forward_fn,
    mask_input,
    observation_inputs,
    with_mask,
)
from kerasrl.policies.sampling import boltzmann, check_temperature, epsilon_greedy


class QPolicy(Policy):
    """Greedy (or epsilon-greedy) actions from a value network.

    Args:
        model: a built Keras model mapping (B, *obs_shape) float32 to (B, *output_shape) of its
            value head: (B, n_actions) Q-values for DQN.
        observation_space, action_space: of one environment (the action space is Discrete).
        value_head: a `kerasrl.heads.ValueHead` (or what `head_spec` records of one, as a saved
            policy's config holds it): how outputs become action values. None: DQN's.
    """

    policy_type = "q"

    def __init__(self, model: keras.Model, observation_space: gym.Space, action_space: gym.Space,
                 action_masks: bool = False, value_head: ValueHead | dict | None = None):
        self.model = model
        self.observation_space = observation_space
        self.action_space = action_space
        self.action_masks = bool(action_masks)
        self.value_head = (value_head if isinstance(value_head, ValueHead)
                           else head_from_spec(value_head))
        self._forward = forward_fn(model, None if head_spec(self.value_head) is None
                                   else self.value_head.action_values)

    def get_config(self) -> dict:
        config = {"action_masks": True} if self.action_masks else {}
        spec = head_spec(self.value_head)
        return config if spec is None else {**config, "value_head": spec}

    def q_values(self, observations) -> np.ndarray:
        """Action values (the value head's), (B, n_actions) for a batch, (n_actions,) for one
        observation."""
        obs, single = self._batch(observations)
        q = self._batch_q_values(obs)
        return q[0] if single else q

    def _batch_q_values(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(self._call(self._forward, self.model, obs))

    def predict(self, observations, deterministic: bool = True, epsilon: float = 0.05,
                rng: np.random.Generator | None = None, action_mask=None,
                temperature: float | None = None) -> np.ndarray:
        """Actions for a batch of observations (or one observation).

        Deterministic: argmax of Q. Otherwise epsilon-greedy with `epsilon`, drawn with `rng`, or
        with `temperature` drawn from softmax(Q / temperature) (Boltzmann; `epsilon` unused).
        `action_mask` (B, n_actions), or (n_actions,) for one observation, 1 = allowed: the
        argmax and the random actions are then over the allowed actions only. Epsilon-greedy
        runs the network only if some observation acts greedily (as the agents' own loops).
        """
        obs, single = self._batch(observations)
        n_actions = int(self.action_space.n)
        masks = None if action_mask is None else batch_masks(
            action_mask, len(obs), single, n_actions, "QPolicy.predict(action_mask=...)")
        if deterministic:
            actions = masked_argmax(self._batch_q_values(obs), masks)
        else:
            rng = rng if rng is not None else np.random.default_rng()
            if temperature is not None:
                actions = boltzmann(self._batch_q_values(obs),
                                    check_temperature(temperature, "QPolicy.predict"), rng, masks)
            else:
                actions = epsilon_greedy(lambda: masked_argmax(self._batch_q_values(obs), masks),
                                         n_actions, epsilon, rng, masks, size=len(obs))
        return actions[0] if single else actions

    __call__ = predict

    def raw_outputs(self, observations) -> np.ndarray:
        """The Q-values (what include_values exports beside the actions)."""
        return self.q_values(observations)

    def inference_model(self, include_values: bool = False, action_mask: bool = False
                        ) -> keras.Model:
        """Observations -> greedy actions (argmax of the action values) [, action values], in
        inference mode.

        `action_mask=True`: a second input "action_mask" (B, n_actions) float32, 1 = allowed; the
        argmax is over the allowed actions (the Q-values output stays unmasked).
        """
        inputs, flat = observation_inputs(self.observation_space)
        q = self.value_head.action_values(self.model(flat, training=False))
        mask = mask_input(q.shape[-1]) if action_mask else None
        actions = exportable_argmax(q if mask is None else exportable_mask(q, mask))
        model_inputs = with_mask(inputs, mask)
        return keras.Model(model_inputs, [actions, q] if include_values else actions,
                           name="q_policy")
