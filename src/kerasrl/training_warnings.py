"""`TrainingWarning`, the warning every diagnostic raises, and where a warning should point.

A leaf module (no kerasrl imports), so that the modules that build models can warn without
importing kerasrl.diagnostics, which imports them. `kerasrl.diagnostics.TrainingWarning` is the
public name.
"""

from __future__ import annotations

import os
import sys


class TrainingWarning(UserWarning):
    """A set-up or a training run that will not learn as configured; the message says the fix."""


def user_stacklevel() -> int:
    """The `stacklevel` at which a warning issued by the caller of this function points at the
    first frame outside kerasrl: the user's line, however deep in kerasrl the check runs."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level
