"""Running a TensorFlow SavedModel, whatever backend trains: TensorFlow is that format's runtime.

Imported only when a SavedModel export is verified, so that no other path pays for TensorFlow.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def run_saved_model(path, observations: np.ndarray) -> list[np.ndarray]:
    """The outputs of the SavedModel at `path` (its `serve` endpoint) on `observations`."""
    loaded = tf.saved_model.load(str(path))
    out = loaded.serve(tf.constant(observations))
    out = out if isinstance(out, (list, tuple)) else [out]
    return [np.asarray(o) for o in out]
