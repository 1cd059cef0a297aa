"""The one linear schedule: the numbers every agent computed before it existed, bit for bit."""

import numpy as np
from keras import ops

from kerasrl.schedules import linear_schedule


def test_epsilon_form():
    for start, end, fraction, total in [(1.0, 0.05, 0.1, 10_000), (0.5, 0.01, 0.16, 50_000)]:
        for t in range(0, total + 1, 97):
            progress = t / max(1.0, fraction * total)
            old = end if progress >= 1.0 else start + progress * (end - start)
            assert linear_schedule(start, end, progress) == old


def test_decay_to_zero_form():
    for lr, total in [(1e-3, 10_000), (2.3e-3, 777)]:
        for t in range(0, total + 200, 13):
            assert lr * linear_schedule(1.0, 0.0, t / total) == lr * max(0.0, 1.0 - t / total)


def test_beta_form():
    for beta0 in (0.4, 0.1, 0.6, 0.33):
        for t in range(0, 1200, 7):
            progress = min(1.0, t / 1000)
            assert linear_schedule(beta0, 1.0, t / 1000) == beta0 + progress * (1.0 - beta0)


def test_tensor_form_matches_the_compiled_loops():
    t = ops.convert_to_tensor(np.arange(0, 1500, 3), "int32")
    progress = ops.cast(t, "float32") / 1000
    old = 2e-3 * ops.maximum(0.0, 1.0 - progress)
    new = 2e-3 * linear_schedule(1.0, 0.0, progress)
    np.testing.assert_array_equal(ops.convert_to_numpy(new), ops.convert_to_numpy(old))
    old_eps = ops.where(progress >= 1.0, 0.05, 1.0 + progress * (0.05 - 1.0))
    np.testing.assert_array_equal(ops.convert_to_numpy(linear_schedule(1.0, 0.05, progress)),
                                  ops.convert_to_numpy(old_eps))
