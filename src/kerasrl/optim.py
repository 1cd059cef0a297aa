"""Adam and RMSprop as pure functions of arrays, written once in `keras.ops`.

Keras's own `optimizer.stateless_apply` raises on TensorFlow and updates its inputs in place on
PyTorch, so the learner keeps its optimizer state as plain arrays and updates them here. The update
is Keras's Adam, step for step (Kingma & Ba, 2015, with Keras's placement of epsilon, or PyTorch's
with `epsilon_style="pytorch"`), so the same gradients give the same weights on every backend.
"""

from __future__ import annotations

import math

from keras import ops
from keras import tree

from kerasrl import backend


class Adam:
    """Adam with optional clipping of the global gradient norm.

    Args:
        beta_1: decay of the first-moment estimate.
        beta_2: decay of the second-moment estimate.
        epsilon: added to the root of the second moment.
        epsilon_style: "keras": added before the second moment's bias correction, as
            `keras.optimizers.Adam` does; "pytorch": after it, as `torch.optim.Adam` (what
            Stable-Baselines3's hyperparameters were tuned with). The same epsilon is up to
            `1 / sqrt(1 - beta_2 ** t)` times larger Keras's way at step t (32x at the first
            step, 1.5x after 625): the steps of weights whose gradients are near epsilon shrink.
        max_grad_norm: clip gradients to this global L2 norm before the update; None for no clipping.
    """

    def __init__(self, beta_1=0.9, beta_2=0.999, epsilon=1e-7, max_grad_norm=None, epsilon_style="keras"):
        if max_grad_norm is not None and not (max_grad_norm > 0 and math.isfinite(max_grad_norm)):
            raise ValueError(f"max_grad_norm must be a positive number or None, got {max_grad_norm!r}.")
        if epsilon_style not in ("keras", "pytorch"):
            raise ValueError(f"epsilon_style must be 'keras' or 'pytorch', got {epsilon_style!r}.")
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.epsilon_style = epsilon_style
        self.max_grad_norm = max_grad_norm

    @classmethod
    def from_config(cls, config, **overrides) -> "Adam":
        """The Adam an agent's `config` sets (`adam_epsilon`, `adam_epsilon_style`,
        `max_grad_norm`, and `adam_beta1` where it has one: CrossQ's), but for `overrides` (of
        this class's arguments): every agent's optimizer."""
        settings = dict(beta_1=getattr(config, "adam_beta1", 0.9), epsilon=config.adam_epsilon,
                        max_grad_norm=config.max_grad_norm, epsilon_style=config.adam_epsilon_style)
        return cls(**{**settings, **overrides})

    def init(self, params):
        """Optimizer state for `params`: zero moments and a step count of zero."""
        return {
            "m": [ops.zeros_like(p) for p in params],
            "v": [ops.zeros_like(p) for p in params],
            "count": ops.zeros((), dtype="int32"),
        }

    def update(self, grads, state, params, learning_rate):
        """One Adam step. Returns `(new_params, new_state, grad_norm)`; inputs are not modified.

        `grad_norm` is the global norm before clipping, or None when there is no clipping.
        """
        grads, grad_norm = clip_by_global_norm(grads, self.max_grad_norm)
        count = state["count"] + 1
        step = ops.cast(count, "float32")
        # Hyperparameters may come as Python or numpy scalars, or tensors made elsewhere:
        # converted here, they land on the device the update runs on (PyTorch's native ops
        # refuse a tensor of another device).
        learning_rate = ops.convert_to_tensor(learning_rate, "float32")
        root_correction = ops.sqrt(1.0 - ops.power(self.beta_2, step))
        alpha = learning_rate * root_correction / (1.0 - ops.power(self.beta_1, step))
        epsilon = self.epsilon
        if self.epsilon_style == "pytorch":  # eps after the correction is this before it
            epsilon = epsilon * root_correction
        # The backend's own kernels where it has them (PyTorch: the same arithmetic in 7
        # multi-tensor kernels for all weights instead of 12 per weight; XLA fuses the generic
        # version into one per weight).
        if backend.adam_moments_steps is not None:
            new_params, new_m, new_v = map(list, backend.adam_moments_steps(
                list(params), list(grads), list(state["m"]), list(state["v"]), alpha, self.beta_1,
                self.beta_2, epsilon))
        else:
            new_params, new_m, new_v = [], [], []
            for p, g, m, v in zip(params, grads, state["m"], state["v"]):
                p, m, v = adam_moments_step(p, g, m, v, alpha, self.beta_1, self.beta_2, epsilon)
                new_params.append(p)
                new_m.append(m)
                new_v.append(v)
        return new_params, {"m": new_m, "v": new_v, "count": count}, grad_norm


class RMSprop:
    """RMSprop as PyTorch's `torch.optim.RMSprop` (what Stable-Baselines3's A2C uses), with
    optional clipping of the global gradient norm: `v = alpha * v + (1 - alpha) * g**2`,
    `p -= learning_rate * g / (sqrt(v) + epsilon)`, v starting at zero (Keras's RMSprop is the
    same update with rho for alpha).

    Args:
        alpha: decay of the running mean of squared gradients.
        epsilon: added to its root.
        max_grad_norm: clip gradients to this global L2 norm before the update; None for no clipping.
    """

    def __init__(self, alpha=0.99, epsilon=1e-5, max_grad_norm=None):
        if max_grad_norm is not None and not (max_grad_norm > 0 and math.isfinite(max_grad_norm)):
            raise ValueError(f"max_grad_norm must be a positive number or None, got {max_grad_norm!r}.")
        self.alpha = alpha
        self.epsilon = epsilon
        self.max_grad_norm = max_grad_norm

    def init(self, params):
        """Optimizer state for `params`: zero mean squares and a step count of zero."""
        return {"v": [ops.zeros_like(p) for p in params], "count": ops.zeros((), dtype="int32")}

    def update(self, grads, state, params, learning_rate):
        """One RMSprop step. Returns `(new_params, new_state, grad_norm)` as `Adam.update`."""
        grads, grad_norm = clip_by_global_norm(grads, self.max_grad_norm)
        learning_rate = ops.convert_to_tensor(learning_rate, "float32")
        new_params, new_v = [], []
        for p, g, v in zip(params, grads, state["v"]):
            v = v + (g * g - v) * (1.0 - self.alpha)
            new_params.append(p - learning_rate * g / (ops.sqrt(v) + self.epsilon))
            new_v.append(v)
        return new_params, {"v": new_v, "count": state["count"] + 1}, grad_norm


def clip_by_global_norm(grads, max_norm):
    """`(grads scaled to a global L2 norm of at most max_norm, the norm before)`; with max_norm
    None, `(grads, None)`."""
    if max_norm is None:
        return grads, None
    grad_norm = global_norm(grads)
    scale = ops.minimum(1.0, max_norm / (grad_norm + 1e-6))
    return [g * scale for g in grads], grad_norm


def adam_moments_step(param, grad, m, v, alpha, beta_1, beta_2, epsilon):
    """One weight's Adam update: new moments, and the step `alpha * m / (sqrt(v) + epsilon)`."""
    m = m + (grad - m) * (1.0 - beta_1)
    v = v + (grad * grad - v) * (1.0 - beta_2)
    return param - (m * alpha) / (ops.sqrt(v) + epsilon), m, v


def global_norm(arrays):
    """The L2 norm of all `arrays` taken together."""
    return ops.sqrt(sum(ops.sum(ops.square(a)) for a in arrays))


def polyak(online, target, tau):
    """`tau * online + (1 - tau) * target`, exactly `online` when tau >= 1 (a hard copy).

    `tau` may be a tensor, so that one compiled step serves every sync pattern; tau = 0 leaves the
    target exactly as it was. It is converted here, onto the device the sync runs on.
    """
    tau = ops.convert_to_tensor(tau, "float32")
    hard = ops.greater_equal(tau, 1.0)
    return tree.map_structure(
        lambda o, t: ops.where(hard, o, t + ops.cast(tau, t.dtype) * (o - t)), online, target
    )


def copy_state(online, target, tau):
    """Non-trainable state (batch-norm statistics, seeds) follows the online net at any sync."""
    synced = ops.greater(ops.convert_to_tensor(tau, "float32"), 0.0)
    return tree.map_structure(lambda o, t: ops.where(synced, o, t), online, target)
