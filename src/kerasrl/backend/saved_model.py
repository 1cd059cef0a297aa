"""Running a TensorFlow SavedModel, whatever backend trains: TensorFlow is that format's runtime.

Imported only when a SavedModel export is verified, so that no other path pays for TensorFlow.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def run_saved_model(path, observations: np.ndarray, masks: np.ndarray | None = None
                    ) -> list[np.ndarray]:
    """The outputs of the SavedModel at `path` (its `serve` endpoint) on `observations` (and the
    action `masks`, for a model exported with the mask input)."""
    loaded = tf.saved_model.load(str(path))
    if masks is None:
        out = loaded.serve(tf.constant(observations))
    else:
        out = loaded.serve([tf.constant(observations), tf.constant(masks)])
    out = out if isinstance(out, (list, tuple)) else [out]
    return [np.asarray(o) for o in out]
