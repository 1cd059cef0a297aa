"""The one linear schedule: epsilon, learning rate, PPO's clip range, prioritized replay's beta.

Written so that each caller gets, bit for bit, the numbers it computed before it used this helper:
a decay to 0 is `value * linear_schedule(1.0, 0.0, progress)` (that is `value * (1 - progress)`),
and at or past the end the schedule gives `end` itself, not `start + (end - start)`.
"""

from __future__ import annotations

from keras import ops


def linear_schedule(start, end, progress):
    """`start` at progress 0, linearly to `end` at progress 1, and `end` from then on.

    `progress` is a Python number (the agents' loops) or a float32 tensor (the compiled loops, where
    `start` and `end` stay Python floats).
    """
    value = start + (end - start) * progress
    if isinstance(progress, (int, float)):
        return end if progress >= 1.0 else value
    return ops.where(progress >= 1.0, end, value)


def at_least(value, minimum: float):
    """`max(value, minimum)` of a Python number (the agents' loops) or a float32 tensor (a compiled
    loop's, which takes its run's length as an input)."""
    if isinstance(value, (int, float)):
        return max(value, minimum)
    return ops.maximum(value, minimum)
