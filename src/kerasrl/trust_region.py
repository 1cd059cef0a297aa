"""The math of trust-region policy optimization (TRPO; Schulman et al., 2015), in `keras.ops`.

TRPO maximises the surrogate `mean(A * pi(a|s) / pi_old(a|s))` subject to
`mean KL(pi || pi_old) <= delta`. Linearising the surrogate (gradient g) and taking the KL to
second order (its Hessian at pi_old is the Fisher matrix F) gives the step `sqrt(2 delta / s'Fs) s`
with `s = F^-1 g`, which conjugate gradients find from Fisher-vector products alone (never F
itself); a backtracking line search then shrinks the step until the KL holds and the surrogate
improved. The Fisher-vector product is the Hessian of the mean KL times a vector
(`kerasrl.backend.hessian_vector_product`, the one piece each backend differentiates itself).

Pure functions of arrays and of other functions, like `kerasrl.losses`; the agent
(`kerasrl.agents.trpo`) applies them to its networks.
"""

from __future__ import annotations

from keras import ops

from kerasrl.losses import categorical_segments


def categorical_kl(logits, reference_logits, sizes=None):
    """KL(p || q) of the categorical distributions of (B, A) `logits` (p) and `reference_logits`
    (q), per row (B,); with `sizes` (MultiDiscrete) the sum over the components. Actions a mask
    gave probability 0 in p add 0 (`mask_values` keeps their logits finite)."""
    if sizes is not None and len(sizes) > 1:
        return sum(categorical_kl(p, q) for p, q in zip(categorical_segments(logits, sizes),
                                                        categorical_segments(reference_logits, sizes)))
    log_p = ops.log_softmax(logits, axis=-1)
    log_q = ops.log_softmax(reference_logits, axis=-1)
    return ops.sum(ops.exp(log_p) * (log_p - log_q), axis=-1)


def gaussian_kl(mean, log_std, reference_mean, reference_log_std):
    """KL(p || q) of diagonal Gaussians, p of (B, D) `mean` and (D,) `log_std`, q the reference's,
    per row (B,): `sum(0.5 * (r + ((m - m_q) / std_q)^2 - 1 - log r))`, r the ratio of variances
    (as torch.distributions' Normal, summed over the dimensions)."""
    log_ratio = 2.0 * (log_std - reference_log_std)
    distance = ops.square((mean - reference_mean) * ops.exp(-reference_log_std))
    return ops.sum(0.5 * (ops.exp(log_ratio) + distance - 1.0 - log_ratio), axis=-1)


def conjugate_gradient(matrix_vector, b, iterations: int, residual_tol: float = 1e-10):
    """An approximate solution x of `A x = b` from `iterations` steps of conjugate gradients,
    `matrix_vector(v) = A v` (A symmetric positive definite; TRPO's damped Fisher matrix).

    It starts from x = 0, as Schulman's modular_rl and OpenAI Baselines do (Stable-Baselines3-
    contrib starts from 1e-4 Gaussian noise), and stops improving once the squared residual falls
    below `residual_tol`: the steps after that keep x (a fixed number of steps, so that one
    compiled graph serves; each is one product with A).
    """
    def step(i, carry):
        x, residual, direction, squared = carry
        active = squared >= residual_tol
        product = matrix_vector(direction)
        curvature = ops.sum(direction * product)
        alpha = squared / ops.where(active, curvature, 1.0)
        new_residual = residual - alpha * product
        new_squared = ops.sum(ops.square(new_residual))
        beta = new_squared / ops.where(active, squared, 1.0)
        return (ops.where(active, x + alpha * direction, x),
                ops.where(active, new_residual, residual),
                ops.where(active, new_residual + beta * direction, direction),
                ops.where(active, new_squared, squared))

    start = (ops.zeros_like(b), b, b, ops.sum(ops.square(b)))
    return ops.fori_loop(0, iterations, step, start)[0]


def backtracking_line_search(evaluate, objective, max_kl: float, iterations: int, shrink: float):
    """The largest fraction `shrink**k` (k < `iterations`) of the full step whose policy keeps the
    mean KL below `max_kl` and improves on the surrogate `objective` of the old policy, found by
    `evaluate(fraction) -> (surrogate, mean KL)` of the policy after that fraction of the step.

    Returns `(fraction, its surrogate, its KL, found)`, fraction 0 where none qualifies (the
    policy stays as it is). Every fraction is evaluated (a fixed number, for one compiled graph);
    the first that qualifies is the one Stable-Baselines3-contrib's loop stops at.
    """
    def step(k, carry):
        fraction, surrogate, kl, found = carry
        candidate = ops.power(ops.convert_to_tensor(shrink, "float32"), ops.cast(k, "float32"))
        new_surrogate, new_kl = evaluate(candidate)
        take = ops.logical_and(ops.logical_not(found),
                               ops.logical_and(new_kl < max_kl, new_surrogate > objective))
        return (ops.where(take, candidate, fraction), ops.where(take, new_surrogate, surrogate),
                ops.where(take, new_kl, kl), ops.logical_or(found, take))

    zero = ops.zeros((), "float32")
    start = (zero, ops.convert_to_tensor(objective, "float32"), zero, ops.zeros((), "bool"))
    return ops.fori_loop(0, iterations, step, start)
