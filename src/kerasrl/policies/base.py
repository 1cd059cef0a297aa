"""The policy base: what every saved policy is (`Policy`), the forward functions it runs, and the
Keras graph pieces exports build from (inputs, masks, an argmax that exports)."""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np

from kerasrl import backend
from kerasrl.export import export_policy
from kerasrl.models import stateless_apply
from kerasrl.policy_io import save_policy
from kerasrl.spaces import FlatObservations, flatten


def forward_fn(model: keras.Model, transform=None):
    """A compiled `f(params, non_trainable, obs) -> outputs` in inference mode, or
    `transform(outputs)` (a value head's `action_values`) when given.

    Acting and TD targets use this; one compiled function per model serves the agent (with its
    learner state) and the policy (with the model's own variables).
    """

    def forward(params, non_trainable, observations):
        outputs, _ = stateless_apply(model, params, non_trainable, observations, False)
        return outputs if transform is None else transform(outputs)

    return backend.compile(forward)


def greedy_fn(model: keras.Model, action_values=None):
    """A compiled `f(params, non_trainable, obs) -> argmax of the action values` (int32), in
    inference mode: acting in one call, without moving the values out. `action_values(outputs)`
    is the value head's (None: the outputs are the Q-values)."""

    def greedy(params, non_trainable, observations):
        outputs, _ = stateless_apply(model, params, non_trainable, observations, False)
        q = outputs if action_values is None else action_values(outputs)
        return keras.ops.cast(keras.ops.argmax(q, axis=-1), "int32")

    return backend.compile(greedy)


class Policy:
    """Base of every policy: numpy observations in, numpy actions out; saved and exported alone.

    A subclass sets `policy_type` (the name written in policy.json, listed in
    `kerasrl.registry.POLICIES`), holds its Keras models in
    `models()`, puts any other saved values (JSON-ready) in `get_config()`, rebuilds itself in
    `from_saved`, and gives `inference_model()`: one Keras model from raw observations (float32)
    to actions, with the preprocessing inside, which is what exports are made from.
    """

    policy_type: str = ""
    model: keras.Model
    # True when trained on an env with action masks: exports then take the mask as an input.
    action_masks: bool = False

    def predict(self, observations, deterministic: bool = True) -> np.ndarray:
        """Actions for a batch of observations (or one observation)."""
        raise NotImplementedError

    def __call__(self, observations, deterministic: bool = True) -> np.ndarray:
        return self.predict(observations, deterministic=deterministic)

    def models(self) -> dict[str, keras.Model]:
        """The Keras models to save, by file stem (`model` -> model.keras)."""
        return {"model": self.model}

    def get_config(self) -> dict:
        """JSON-ready values besides the models and spaces that rebuild this policy."""
        return {}

    def load_config(self, config: dict) -> None:
        """Take the values of `get_config()` output that change while training (a remote actor
        is sent them with new weights); nothing for a policy whose models hold everything."""

    @classmethod
    def from_saved(cls, models: dict, observation_space: gym.Space, action_space: gym.Space,
                   config: dict) -> "Policy":
        """The policy from loaded models, spaces and `get_config()` output."""
        return cls(models["model"], observation_space, action_space, **config)

    def inference_model(self, include_values: bool = False) -> keras.Model:
        """A Keras model: observations (B, *obs_shape) float32 -> actions (B,) [, values]."""
        raise NotImplementedError

    def save(self, path, *, weights_only: bool = False):
        """Write this policy alone to the folder `path` (see kerasrl.load_policy)."""
        return save_policy(self, path, weights_only=weights_only)

    def export(self, path, format: str = "onnx", *, include_values: bool = False,  # noqa: A002
               n_check: int = 256, action_mask: bool | None = None):
        """Export to ONNX (a file) or a TF SavedModel (a folder), checked against this policy.

        `action_mask=True` (Discrete policies): the artifact takes a second input "action_mask"
        (B, n_actions) float32, 1 = allowed, and never picks a masked action. None (default):
        True when the policy was trained on an env with action masks."""
        return export_policy(self, path, format=format, include_values=include_values,
                             n_check=n_check, action_mask=action_mask)

    def _batch(self, observations) -> tuple[np.ndarray, bool]:
        """(observations as a float32 batch, whether one observation was given)."""
        if isinstance(self.observation_space, FlatObservations):  # a dict / tuple observation
            observations = flatten(self.observation_space, observations)
        obs = np.asarray(observations, dtype=np.float32)
        single = obs.shape == tuple(self.observation_space.shape)
        if single:
            obs = obs[None]
        elif obs.shape[1:] != tuple(self.observation_space.shape):
            raise ValueError(
                f"Expected observations of shape {tuple(self.observation_space.shape)} or a batch "
                f"(B, {', '.join(map(str, self.observation_space.shape))}), got {obs.shape}."
            )
        finite = np.isfinite(obs)
        if not finite.all():  # else an action chosen from NaN values (argmax: always action 0)
            row, *where = np.argwhere(~finite)[0]
            raise ValueError(
                f"Observation {row} holds {obs[(row, *where)].item()} at {tuple(int(i) for i in where)}: "
                f"a policy acts on finite observations. Find where the env divides by zero or "
                f"overflows (kerasrl.check_env(env) helps), or clip the observations in a wrapper.")
        return obs, single

    @staticmethod
    def _call(forward, model, obs):
        """`forward` of `model`'s current weights on `obs`, as numpy."""
        with backend.inference():
            out = forward([v.value for v in model.trainable_variables],
                          [v.value for v in model.non_trainable_variables], backend.feed(obs))
        return backend.to_numpy(out)



def observation_inputs(observation_space: gym.Space):
    """The exported models' observation inputs and the flat float32 tensor the policy's model
    reads: one input "observation" (B, *obs_shape); for a Dict or Tuple space one input per leaf,
    named as the leaf (B, *leaf shape), flattened and concatenated in the leaves' order.
    Returns (the input or the list of leaf inputs, the flat tensor)."""
    if not isinstance(observation_space, FlatObservations):
        inputs = keras.Input(shape=tuple(observation_space.shape), dtype="float32",
                             name="observation")
        return inputs, inputs
    inputs = [keras.Input(shape=leaf.shape, dtype="float32", name=leaf.name)
              for leaf in observation_space.leaves]
    parts = [keras.layers.Reshape((leaf.size,), name=f"{leaf.name}_flat")(x)
             for leaf, x in zip(observation_space.leaves, inputs)]
    if len(parts) == 1:  # one leaf (a Discrete observation): one input, as the model is called
        return inputs[0], parts[0]
    return inputs, keras.layers.Concatenate(name="flat_observation")(parts)


def with_mask(inputs, mask) -> list:
    """The model inputs: the observation input(s), then the mask input if any."""
    if mask is None:
        return inputs
    return (inputs if isinstance(inputs, list) else [inputs]) + [mask]


def exportable_argmax(x):
    """The first index of the maximum over the last axis, as int32 (what np.argmax gives).

    Written with max, equal and min because `keras.ops.argmax` uses bit casts that neither
    tf2onnx nor jax2onnx can express in ONNX.
    """
    n = x.shape[-1]
    is_max = keras.ops.equal(x, keras.ops.max(x, axis=-1, keepdims=True))
    # The indices 0..n-1 made from x itself: a captured constant becomes an unfed input in tf2onnx.
    positions = keras.ops.cumsum(keras.ops.ones_like(x, dtype="int32"), axis=-1) - 1
    index = keras.ops.where(is_max, positions, n)
    return keras.ops.min(index, axis=-1)


def mask_input(n_actions: int):
    """The exported models' second input: (B, n_actions) float32, 1 = allowed, 0 = masked."""
    return keras.Input(shape=(n_actions,), dtype="float32", name="action_mask")


def exportable_mask(x, mask):
    """`x` with masked entries at the float32 minimum, in ops that ONNX expresses."""
    floor = keras.ops.full_like(x, float(np.finfo(np.float32).min))
    return keras.ops.where(keras.ops.greater(mask, 0.5), x, floor)


def episode_actor(policy: Policy, rng: np.random.Generator | None = None):
    """`act(observation, action_mask=None) -> action` for one episode of one env:
    `policy.predict`, or for a recurrent policy `predict` with its state carried from call to
    call (make a new actor for each episode: it starts from the initial state). Deterministic, or
    with `rng` the policy's stochastic actions drawn from it (sampled, or a value policy's
    epsilon-greedy ones). `action_mask` (n_actions,): the env's allowed actions, where it has
    them."""
    chosen = {} if rng is None else {"deterministic": False, "rng": rng}

    def masked(action_mask) -> dict:
        return {} if action_mask is None else {"action_mask": action_mask}

    if not getattr(policy, "recurrent", False):
        return lambda observation, action_mask=None: policy.predict(observation, **chosen,
                                                                    **masked(action_mask))
    state = [None]

    def act(observation, action_mask=None):
        action, state[0] = policy.predict(observation, state=state[0], **chosen, **masked(action_mask))
        return action

    return act
