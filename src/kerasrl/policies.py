"""Policies: inference only, numpy in and numpy out.

A Policy holds a Keras model and what it needs to turn observations into actions; it never needs
the agent, the environment or the optimizer. It is what is saved, loaded and exported.
"""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np

from kerasrl import backend
from kerasrl.policy_io import save_policy
from kerasrl.export import export_policy
from kerasrl.heads import ValueHead, head_from_spec, head_spec
from kerasrl.losses import categorical_segments
from kerasrl.masks import batch_masks, masked_argmax, masked_logits, uniform_allowed
from kerasrl.models import recurrent_state_sizes, stateless_apply
from kerasrl.spaces import FlatObservations, categorical_sizes, flatten, split_segments


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

    def _batch(self, observations) -> tuple[np.ndarray, bool]:
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
        return obs, single

    def q_values(self, observations) -> np.ndarray:
        """Action values (the value head's), (B, n_actions) for a batch, (n_actions,) for one
        observation."""
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
                rng: np.random.Generator | None = None, action_mask=None,
                temperature: float | None = None) -> np.ndarray:
        """Actions for a batch of observations (or one observation).

        Deterministic: argmax of Q. Otherwise epsilon-greedy with `epsilon`, drawn with `rng`, or
        with `temperature` drawn from softmax(Q / temperature) (Boltzmann; `epsilon` unused).
        `action_mask` (B, n_actions), or (n_actions,) for one observation, 1 = allowed: the
        argmax and the random actions are then over the allowed actions only.
        """
        q = self.q_values(observations)
        single = q.ndim == 1
        q2 = q[None] if single else q
        masks = None if action_mask is None else batch_masks(
            action_mask, len(q2), single, q2.shape[-1], "QPolicy.predict(action_mask=...)")
        actions = masked_argmax(q2, masks)
        if not deterministic:
            rng = rng if rng is not None else np.random.default_rng()
            if temperature is not None:
                actions = boltzmann(q2, check_temperature(temperature, "QPolicy.predict"), rng,
                                    masks)
            else:
                actions = epsilon_greedy(actions, q2.shape[-1], epsilon, rng, masks)
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
    flat = parts[0] if len(parts) == 1 else keras.layers.Concatenate(name="flat_observation")(parts)
    return inputs, flat


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


def epsilon_greedy(greedy_actions: np.ndarray, n_actions: int, epsilon: float,
                   rng: np.random.Generator, masks: np.ndarray | None = None) -> np.ndarray:
    """Replace each action by a uniform one with probability epsilon (numpy-side, so that every
    backend draws the same numbers from the same seed). With `masks` (B, n_actions) bool the
    uniform action is drawn among each row's allowed actions (`greedy_actions` must be allowed)."""
    greedy_actions = np.asarray(greedy_actions)
    explore = rng.random(greedy_actions.shape) < epsilon
    if masks is None:
        random_actions = rng.integers(0, n_actions, size=greedy_actions.shape)
    else:
        random_actions = uniform_allowed(masks, rng)
    return np.where(explore, random_actions, greedy_actions)


def check_temperature(temperature, where: str) -> float:
    """`temperature` as a float, or a ValueError naming `where` it was given."""
    value = float(temperature)
    if not (value > 0 and np.isfinite(value)):
        raise ValueError(
            f"{where}: the Boltzmann temperature must be a positive finite number (actions are "
            f"drawn from softmax(Q / temperature)), got {temperature!r}. Use a small positive "
            f"temperature for nearly greedy actions, or deterministic=True for greedy ones.")
    return value


def boltzmann_probabilities(q: np.ndarray, temperature: float,
                            masks: np.ndarray | None = None) -> np.ndarray:
    """`softmax(q / temperature)` over each row of `q` (B, A), float64; masked actions (where
    `masks` (B, A) is False) get probability exactly 0. The numpy twin of
    `kerasrl.losses.boltzmann_probs` (tests hold the two together)."""
    z = np.asarray(q, dtype=np.float64) / temperature
    if masks is not None:
        z = np.where(masks, z, -np.inf)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def boltzmann(q: np.ndarray, temperature: float, rng: np.random.Generator,
              masks: np.ndarray | None = None) -> np.ndarray:
    """Actions (B,) drawn from `softmax(q / temperature)` (Boltzmann exploration; keras-rl's
    BoltzmannQPolicy), one uniform draw per row from `rng` (numpy-side: the same on every
    backend); with `masks` (B, A) bool only among each row's allowed actions."""
    temperature = check_temperature(temperature, "Boltzmann exploration")
    cumulative = np.cumsum(boltzmann_probabilities(q, temperature, masks), axis=-1)
    cumulative /= cumulative[:, -1:]  # exactly 1 at the end, whatever the rounding
    u = rng.random((len(cumulative), 1))
    # The first action whose cumulative probability exceeds u: never a masked one (probability 0).
    return (cumulative <= u).sum(axis=-1)


def random_actions(n_actions: int, size: int, rng: np.random.Generator,
                   masks: np.ndarray | None = None) -> np.ndarray:
    """`size` uniform actions (warm-up), among each row's allowed ones when `masks` is given."""
    if masks is None:
        return rng.integers(0, n_actions, size=size)
    return uniform_allowed(masks, rng)


# -- actor-critic policies (PPO) -----------------------------------------------------------------


def running_moments(moments, batch, xp=np):
    """Running `(mean, var, count)` with a batch (B, *shape) folded in (Chan et al.'s parallel
    update). The one definition of the running statistics: `RunningMeanStd` calls it on float64
    numpy (the Python loops), the compiled loops with `xp=keras.ops` on float32 tensors
    (kerasrl.compiled.ppo), tests/test_one_definition.py holds the two together."""
    mean, var, count = moments
    batch_mean, batch_var, n = xp.mean(batch, axis=0), xp.var(batch, axis=0), batch.shape[0]
    delta = batch_mean - mean
    total = count + n
    m2 = var * count + batch_var * n + xp.square(delta) * count * n / total
    return mean + delta * n / total, m2 / total, total


def standardize(moments, x, clip: float, epsilon: float = 1e-8, xp=np):
    """`clip((x - mean) / sqrt(var + epsilon), -clip, clip)` of the running `moments` (`xp`
    numpy or keras.ops, as `running_moments`)."""
    mean, var, _ = moments
    return xp.clip((x - mean) / xp.sqrt(var + epsilon), -clip, clip)


class RunningMeanStd:
    """Running mean and variance of observations, in float64 numpy (Chan et al.'s parallel update).

    It belongs to the policy: the network only ever sees `normalize(obs)`, so the statistics are
    saved, loaded and exported with it. PPO and the off-policy continuous agents (DDPG, TD3, SAC,
    NAF) use it through `normalize_observations`.
    """

    def __init__(self, shape, epsilon: float = 1e-4):
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = float(epsilon)  # a tiny prior count, as SB3, so the first update is defined

    def update(self, batch: np.ndarray) -> None:
        """Fold a batch (B, *shape) into the statistics (`running_moments` in float64)."""
        self.mean, self.var, self.count = running_moments(
            (self.mean, self.var, self.count), np.asarray(batch, dtype=np.float64))

    def normalize(self, x: np.ndarray, clip: float, epsilon: float = 1e-8) -> np.ndarray:
        """`clip((x - mean) / sqrt(var + epsilon), -clip, clip)` as float32 (`standardize` in
        float64)."""
        z = standardize((self.mean, self.var, self.count), np.asarray(x, dtype=np.float64), clip,
                        epsilon)
        return z.astype(np.float32)

    def normalize_graph(self, x, clip: float, epsilon: float = 1e-8):
        """`normalize` in keras.ops on a float32 tensor (inside exported graphs)."""
        mean = self.mean.astype(np.float32)
        inv_std = (1.0 / np.sqrt(self.var + epsilon)).astype(np.float32)
        return keras.ops.clip((x - mean) * inv_std, -clip, clip)

    def state_dict(self) -> dict[str, np.ndarray]:
        """The statistics as numpy arrays (for .npz checkpoints)."""
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": np.array(self.count)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore what `state_dict` returned."""
        self.mean = np.array(state["mean"], dtype=np.float64).reshape(self.mean.shape)
        self.var = np.array(state["var"], dtype=np.float64).reshape(self.var.shape)
        self.count = float(state["count"])

    def to_config(self) -> dict:
        """JSON-ready statistics for policy.json (float64 values round-trip exactly)."""
        return {"mean": self.mean.tolist(), "var": self.var.tolist(), "count": self.count}

    @classmethod
    def from_config(cls, config: dict | None, shape) -> RunningMeanStd | None:
        """The statistics of `to_config()` output, or None for None."""
        if config is None:
            return None
        rms = cls(shape)
        rms.load_state_dict({k: np.asarray(v) for k, v in config.items()})
        return rms


def normalize_observations(obs_rms: RunningMeanStd | None, observations: np.ndarray,
                           clip: float, update: bool = False) -> np.ndarray:
    """Observations (B, *obs_shape) as the networks see them, float32: folded into `obs_rms`
    first when `update`, then normalized by it and clipped to +-clip; as they are without
    statistics (None). The one rule of every agent that normalizes observations."""
    if obs_rms is None:
        return np.asarray(observations, dtype=np.float32)
    if update:
        obs_rms.update(observations)
    return obs_rms.normalize(observations, clip)


def softmax_log_probs(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64 numpy."""
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def sample_categorical(logits: np.ndarray, rng: np.random.Generator,
                       sizes: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Actions (B,) int and their log-probabilities (B,) float32 from (B, A) logits (numpy draws).

    `sizes` of a MultiDiscrete space (several components): the logits are the components' side by
    side; actions (B, components), each drawn in turn, and the sum of their log-probabilities."""
    if sizes is not None and len(sizes) > 1:
        parts = [sample_categorical(segment, rng) for segment in split_segments(logits, sizes)]
        return (np.stack([a for a, _ in parts], axis=-1),
                np.sum([lp for _, lp in parts], axis=0).astype(np.float32))
    log_probs = softmax_log_probs(logits)
    cdf = np.cumsum(np.exp(log_probs), axis=-1)
    u = rng.random((cdf.shape[0], 1)) * cdf[:, -1:]
    actions = np.minimum((cdf <= u).sum(axis=-1), cdf.shape[-1] - 1)
    return actions, np.take_along_axis(log_probs, actions[:, None], axis=-1)[:, 0].astype(np.float32)


def categorical_mode(logits: np.ndarray, sizes: tuple[int, ...] | None = None) -> np.ndarray:
    """The most likely action of each row: (B,), or (B, components) for a MultiDiscrete space."""
    if sizes is not None and len(sizes) > 1:
        return np.stack([np.argmax(s, axis=-1) for s in split_segments(logits, sizes)], axis=-1)
    return np.argmax(logits, axis=-1)


def gaussian_log_prob_np(mean: np.ndarray, log_std: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """log N(actions; mean, exp(log_std)^2), summed over the action dimensions, (B,) float32."""
    z = (np.asarray(actions, np.float64) - mean) * np.exp(-np.asarray(log_std, np.float64))
    return np.sum(-0.5 * z * z - log_std - 0.5 * np.log(2 * np.pi), axis=-1).astype(np.float32)


def sample_gaussian(mean: np.ndarray, log_std: np.ndarray, rng: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Unclipped actions (B, D) float32 and their log-probabilities (B,) (numpy draws)."""
    mean = np.asarray(mean, dtype=np.float64)
    actions = mean + np.exp(np.asarray(log_std, np.float64)) * rng.standard_normal(mean.shape)
    actions = actions.astype(np.float32)
    return actions, gaussian_log_prob_np(mean, log_std, actions)


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

    _batch = QPolicy._batch

    def normalize(self, observations: np.ndarray) -> np.ndarray:
        """Observations as the network sees them (normalized when the policy has statistics)."""
        return normalize_observations(self.obs_rms, observations, self.clip_obs)

    @staticmethod
    def _call(forward, model, obs):
        with backend.inference():
            out = forward([v.value for v in model.trainable_variables],
                          [v.value for v in model.non_trainable_variables], backend.feed(obs))
        return backend.to_numpy(out)

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
            return keras.ops.clip(out, self.action_space.low.astype(np.float32),
                                  self.action_space.high.astype(np.float32))
        logits = out if mask is None else exportable_mask(out, mask)
        if len(self.action_sizes) == 1:
            return exportable_argmax(logits)
        # MultiDiscrete: one argmax per component, (B, components)
        return keras.ops.stack([exportable_argmax(segment) for segment
                                in categorical_segments(logits, self.action_sizes)], axis=-1)

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


def scale_to_bounds(unit_actions, low: np.ndarray, high: np.ndarray, ops=np):
    """`low + (a + 1) / 2 * (high - low)` clipped to [low, high]: unit-box actions to the env's."""
    low, high = np.asarray(low, np.float32), np.asarray(high, np.float32)
    half_range = ((high - low) * np.float32(0.5)).astype(np.float32)
    scaled = (unit_actions + np.float32(1.0)) * half_range + low  # tensor first: a graph input
    return ops.clip(scaled, low, high)


def unit_from_bounds(actions: np.ndarray, low: np.ndarray, high: np.ndarray, ops=np) -> np.ndarray:
    """The inverse of `scale_to_bounds` (float32; numpy, or `ops=keras.ops` on tensors): env
    actions to the unit box."""
    low, high = np.asarray(low, np.float32), np.asarray(high, np.float32)
    half_range = ((high - low) * np.float32(0.5)).astype(np.float32)
    if ops is np:
        actions = np.asarray(actions, np.float32)
    else:  # tensors throughout (a numpy operand on the right of a PyTorch tensor is numpy's)
        low, half_range = ops.convert_to_tensor(low), ops.convert_to_tensor(half_range)
    unit = (actions - low) / half_range - np.float32(1.0)
    return ops.clip(unit, -1.0, 1.0)


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

    _batch = QPolicy._batch

    def raw_outputs(self, observations) -> np.ndarray:
        """The actor's outputs (what include_values exports beside the actions)."""
        obs, single = self._batch(observations)
        obs = normalize_observations(self.obs_rms, obs, self.clip_obs)
        out = np.asarray(ActorCriticPolicy._call(self._forward, self.model, obs))
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
        actions = self._scale(to_unit(out), keras.ops)
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
        return actions.reshape(*out.shape[:-1], *self.action_space.shape).astype(np.float32)

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
        return actions.reshape(*out.shape[:-1], *self.action_space.shape).astype(np.float32)

    __call__ = predict

    def inference_model(self, include_values: bool = False) -> keras.Model:
        """Observations -> actor -> tanh(mean) scaled to the Box bounds [, the actor's output]."""
        d = self.action_dim
        return self._inference_model(lambda out: keras.ops.tanh(out[:, :d]), include_values,
                                     "squashed_gaussian_policy")


# -- recurrent actor-critic policies (RecurrentPPO) -----------------------------------------------


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


def episode_actor(policy: Policy):
    """`act(observation) -> action` for one episode of one env, deterministic: `policy.predict`,
    or for a recurrent policy `predict` with its state carried from call to call (make a new
    actor for each episode: it starts from the initial state)."""
    if not getattr(policy, "recurrent", False):
        return policy.predict
    state = [None]

    def act(observation):
        action, state[0] = policy.predict(observation, state=state[0])
        return action

    return act
