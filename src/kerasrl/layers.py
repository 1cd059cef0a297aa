"""Keras layers of kerasrl's own that a user's model may hold: `BatchRenormalization` (CrossQ's)
and `NoisyDense` (noisy networks, Rainbow's), and what the agents do with them
(`renormalization_for`; `noise_slots`, `draw_noise`, `with_noise`).

Registered with Keras, so that saved models holding them load in safe mode.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from kerasrl.backend.layers import walk_layers


@keras.saving.register_keras_serializable(package="kerasrl")
class BatchRenormalization(keras.layers.Layer):
    """Batch renormalization (Ioffe, 2017) as CrossQ uses it (Bhatt et al., 2024): batch
    normalization whose training-mode output, after `warmup_steps` calls, is corrected towards the
    running statistics, so that a batch unlike the rest does not throw the normalization off.

    Over every axis but the last (features), in training mode, with the batch's mean m and
    (unbiased, as PyTorch's `var`) variance v:
        during the first `warmup_steps + 1` calls: x_hat = (x - m) / sqrt(v + epsilon)
        after: r = clip(sqrt(v + eps) / sqrt(V + eps), 1/r_max, r_max),
               d = clip((m - M) / sqrt(V + eps), -d_max, d_max), both without gradient;
               x_hat = (x - (m - d sqrt(v) / r)) / sqrt(v / r^2 + epsilon)
        the running mean and variance M, V move by `momentum` towards m and v
    In inference mode: x_hat = (x - M) / sqrt(V + epsilon). The output is gamma * x_hat + beta
    (`scale` and `center`). This is Stable-Baselines3-contrib's `BatchRenorm` (and SBX's), number
    for number (tests/agents/test_crossq.py), which keeps r and d unrelaxed after the warm-up
    rather than the paper's gradual schedule.

    Args:
        momentum: the running statistics' step towards each batch's (PyTorch's convention: 0.01
            here is Keras `BatchNormalization`'s momentum=0.99).
        epsilon: added to the variances before their square roots.
        warmup_steps: training-mode calls that normalize with the batch's statistics alone.
        r_max, d_max: the bounds of the corrections r and d.
        center, scale: learn beta and gamma.
    """

    def __init__(self, momentum: float = 0.01, epsilon: float = 1e-3, warmup_steps: int = 100_000,
                 r_max: float = 3.0, d_max: float = 5.0, center: bool = True, scale: bool = True,
                 **kwargs):
        super().__init__(**kwargs)
        if not 0.0 < momentum <= 1.0:
            raise ValueError(f"BatchRenormalization momentum is the running statistics' step "
                             f"towards each batch's, in (0, 1]; got {momentum!r} (Keras "
                             f"BatchNormalization's momentum 0.99 is 0.01 here).")
        if not epsilon > 0:
            raise ValueError(f"BatchRenormalization epsilon must be positive, got {epsilon!r}.")
        if int(warmup_steps) != warmup_steps or warmup_steps < 0:
            raise ValueError(f"BatchRenormalization warmup_steps must be a non-negative whole "
                             f"number of training-mode calls, got {warmup_steps!r}.")
        if not (r_max >= 1.0 and d_max >= 0.0):
            raise ValueError(f"BatchRenormalization needs r_max >= 1 and d_max >= 0, got "
                             f"r_max={r_max!r}, d_max={d_max!r}.")
        self.momentum, self.epsilon = float(momentum), float(epsilon)
        self.warmup_steps = int(warmup_steps)
        self.r_max, self.d_max = float(r_max), float(d_max)
        self.center, self.scale = bool(center), bool(scale)
        # Kept as `<variable>_initializer`, where kerasrl's seeded initialization looks (all
        # constants: the same start on every backend).
        self.gamma_initializer = self.moving_variance_initializer = keras.initializers.Ones()
        self.beta_initializer = self.moving_mean_initializer = keras.initializers.Zeros()
        self.steps_initializer = keras.initializers.Zeros()

    def build(self, input_shape):
        features = (int(input_shape[-1]),)
        self.gamma = (self.add_weight(name="gamma", shape=features,
                                      initializer=self.gamma_initializer)
                      if self.scale else None)
        self.beta = (self.add_weight(name="beta", shape=features,
                                     initializer=self.beta_initializer)
                     if self.center else None)
        self.moving_mean = self.add_weight(name="moving_mean", shape=features,
                                           initializer=self.moving_mean_initializer,
                                           trainable=False)
        self.moving_variance = self.add_weight(name="moving_variance", shape=features,
                                               initializer=self.moving_variance_initializer,
                                               trainable=False)
        # Training-mode calls so far: when the warm-up ends (int32: exact past float32's 2^24).
        self.steps = self.add_weight(name="steps", shape=(), initializer=self.steps_initializer,
                                     dtype="int32",
                                     trainable=False)

    def call(self, inputs, training=None):
        x = ops.cast(inputs, self.compute_dtype)
        if training:
            mean, variance = self._training_statistics(x)
        else:
            mean, variance = self.moving_mean, self.moving_variance
        x = (x - mean) / ops.sqrt(variance + self.epsilon)
        if self.gamma is not None:
            x = x * self.gamma
        if self.beta is not None:
            x = x + self.beta
        return x

    def _training_statistics(self, x):
        """The mean and variance that normalize this batch; the running statistics updated."""
        axes = tuple(range(len(x.shape) - 1))
        count = 1
        for axis in axes:
            count *= ops.shape(x)[axis]
        count = ops.cast(count, x.dtype)
        batch_mean = ops.mean(x, axis=axes)
        # Unbiased, as PyTorch's x.var(dim=0) that SB3-contrib's layer uses (one row: biased).
        batch_variance = ops.var(x, axis=axes) * count / ops.maximum(count - 1.0, 1.0)
        batch_std = ops.sqrt(batch_variance + self.epsilon)
        running_std = ops.sqrt(self.moving_variance + self.epsilon)
        renorm = ops.greater(self.steps, self.warmup_steps)
        r = ops.clip(ops.stop_gradient(batch_std / running_std), 1.0 / self.r_max, self.r_max)
        d = ops.clip(ops.stop_gradient((batch_mean - self.moving_mean) / running_std),
                     -self.d_max, self.d_max)
        # During the warm-up r = 1 and d = 0 exactly, so the batch statistics pass unchanged.
        r, d = ops.where(renorm, r, 1.0), ops.where(renorm, d, 0.0)
        # sqrt(v) with a gradient of 0 where v = 0 (a ReLU unit dead over the whole batch), not
        # sqrt's infinite one, which times d = 0 would make NaN.
        positive = ops.greater(batch_variance, 0.0)
        root = ops.where(positive, ops.sqrt(ops.where(positive, batch_variance, 1.0)), 0.0)
        mean = batch_mean - d * root / r
        variance = batch_variance / ops.square(r)
        self.moving_mean.assign(self.moving_mean + self.momentum * (
            ops.stop_gradient(batch_mean) - self.moving_mean))
        self.moving_variance.assign(self.moving_variance + self.momentum * (
            ops.stop_gradient(batch_variance) - self.moving_variance))
        self.steps.assign(self.steps + 1)
        return mean, variance

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum, "epsilon": self.epsilon,
                "warmup_steps": self.warmup_steps, "r_max": self.r_max, "d_max": self.d_max,
                "center": self.center, "scale": self.scale}


def renormalization_for(config):
    """What the default actor and critics put before each Dense layer for `config`: with CrossQ's
    `batch_norm`, a function `name -> BatchRenormalization` of its settings; else None."""
    if not getattr(config, "batch_norm", False):
        return None
    return lambda name: BatchRenormalization(
        momentum=config.batch_norm_momentum, epsilon=config.batch_norm_epsilon,
        warmup_steps=config.renorm_warmup_steps, name=name)


@keras.saving.register_keras_serializable(package="kerasrl")
class NoisyDense(keras.layers.Layer):
    """A Dense layer with learned, factorised Gaussian noise on its weights (Fortunato et al.,
    2018, "Noisy Networks for Exploration"; Rainbow's exploration):

        y = x (mu_W + sigma_W * outer(f(e_in), f(e_out))) + mu_b + sigma_b * f(e_out)

    with f(e) = sign(e) sqrt(|e|) of standard normal draws e_in (inputs,) and e_out (units,).
    mu is initialised uniform in +-1/sqrt(inputs), sigma to sigma_0 / sqrt(inputs), as the paper
    and Tianshou's `NoisyLinear`.

    The noise f(e_in), f(e_out) lives in two non-trainable variables, `input_noise` and
    `output_noise`, zero unless an agent sets them: so the layer as saved, exported or loaded
    alone is the mean network (mu only), what the paper and Tianshou evaluate. A value agent
    whose Q-network holds NoisyDense layers (its own default with `noisy_nets=True`, or a user's)
    draws fresh noise from its seeded numpy generator for every acting step and, independently,
    for the online and the target network at every gradient step (`draw_noise`), and feeds it
    into the forward passes (`with_noise`); the variables stay zero.

    Args:
        units: outputs.
        activation: as Dense's.
        sigma_0: the initial noise scale (0.5 in the paper's factorised form).
    """

    per_sample = True  # the noise is shared by the batch: each sample's output is its own

    def __init__(self, units: int, activation=None, sigma_0: float = 0.5, **kwargs):
        super().__init__(**kwargs)
        if int(units) != units or units < 1:
            raise ValueError(f"NoisyDense units must be a positive whole number, got {units!r}.")
        if not sigma_0 >= 0.0:
            raise ValueError(f"NoisyDense sigma_0 is the initial noise scale, >= 0; got "
                             f"{sigma_0!r}.")
        self.units, self.sigma_0 = int(units), float(sigma_0)
        self.activation = keras.activations.get(activation)

    def build(self, input_shape):
        fan_in = int(input_shape[-1])
        bound, sigma = 1.0 / np.sqrt(fan_in), self.sigma_0 / np.sqrt(fan_in)
        # Kept as `<variable>_initializer`, where kerasrl's seeded initialization looks.
        self.kernel_mu_initializer = self.bias_mu_initializer = keras.initializers.RandomUniform(
            -bound, bound)
        self.kernel_sigma_initializer = self.bias_sigma_initializer = (
            keras.initializers.Constant(sigma))
        self.input_noise_initializer = self.output_noise_initializer = keras.initializers.Zeros()
        self.kernel_mu = self.add_weight(name="kernel_mu", shape=(fan_in, self.units),
                                         initializer=self.kernel_mu_initializer)
        self.kernel_sigma = self.add_weight(name="kernel_sigma", shape=(fan_in, self.units),
                                            initializer=self.kernel_sigma_initializer)
        self.bias_mu = self.add_weight(name="bias_mu", shape=(self.units,),
                                       initializer=self.bias_mu_initializer)
        self.bias_sigma = self.add_weight(name="bias_sigma", shape=(self.units,),
                                          initializer=self.bias_sigma_initializer)
        self.input_noise = self.add_weight(name="input_noise", shape=(fan_in,),
                                           initializer=self.input_noise_initializer,
                                           trainable=False)
        self.output_noise = self.add_weight(name="output_noise", shape=(self.units,),
                                            initializer=self.output_noise_initializer,
                                            trainable=False)

    def call(self, inputs):
        noise = ops.expand_dims(self.input_noise, -1) * ops.expand_dims(self.output_noise, 0)
        kernel = self.kernel_mu + self.kernel_sigma * noise
        bias = self.bias_mu + self.bias_sigma * self.output_noise
        outputs = ops.matmul(ops.cast(inputs, self.compute_dtype), kernel) + bias
        return outputs if self.activation is None else self.activation(outputs)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.units)

    def get_config(self):
        return {**super().get_config(), "units": self.units, "sigma_0": self.sigma_0,
                "activation": keras.activations.serialize(self.activation)}


def noise_slots(model) -> tuple[tuple[int, int], ...]:
    """(position in `model.non_trainable_variables`, size) of every noise vector of the
    `NoisyDense` layers in `model`, in that order; () for a model without noisy layers."""
    noise = {}
    for layer in walk_layers(model):
        if isinstance(layer, NoisyDense) and layer.built:
            noise[id(layer.input_noise)] = noise[id(layer.output_noise)] = True
    return tuple((i, int(np.prod(v.shape))) for i, v in enumerate(model.non_trainable_variables)
                 if id(v) in noise)


def draw_noise(slots, rng: np.random.Generator, steps: int | None = None) -> list[np.ndarray]:
    """Fresh factorised noise f(e) = sign(e) sqrt(|e|), e standard normal (float32), for each of
    `slots` (`noise_slots`): one vector per slot, or (`steps`, size) for `steps` gradient steps.
    Drawn with numpy from `rng`: the same on every backend."""
    draws = rng.standard_normal((1 if steps is None else steps, sum(size for _, size in slots)))
    draws = np.copysign(np.sqrt(np.abs(draws)), draws).astype(np.float32)
    pieces, start = [], 0
    for _, size in slots:
        pieces.append(draws[0, start:start + size] if steps is None else draws[:, start:start + size])
        start += size
    return pieces


def with_noise(non_trainable, slots, noise) -> list:
    """`non_trainable` (a model's non-trainable arrays, in order) with the entries at `slots`
    replaced by `noise` (one array per slot)."""
    values = list(non_trainable)
    for (position, _), value in zip(slots, noise or ()):
        values[position] = value
    return values
