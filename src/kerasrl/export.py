"""Exports of a policy for serving without kerasrl: ONNX (every backend) and TF SavedModel.

What is exported is `policy.inference_model()`: one Keras model from raw observations (float32) to
actions, with the policy's preprocessing (observation normalization, scaling inside the network)
and the action choice (argmax, or the Gaussian mean clipped to the bounds) inside; with
`include_values=True` the Q-values (or logits, or means) are a second output. With
`action_mask=True` (Discrete policies) the artifact takes a second input, "action_mask"
(B, n_actions) float32, 1 = allowed, and its argmax runs over the allowed actions only. A policy
of a Dict or Tuple observation space takes one float32 input per leaf, named as the leaf ("image",
"pos.x"; see kerasrl.spaces), in the leaves' order, before any action mask.

Every export checks itself before returning: it runs the artifact (onnxruntime, or
`tf.saved_model.load`) on a sample of observations and compares with the policy. Any action that
differs, or a value off by more than `VALUE_TOLERANCE`, raises an ExportError with the figures.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import gymnasium as gym
import numpy as np

from kerasrl.spaces import FlatObservations, categorical_sizes, split

VALUE_TOLERANCE = 1e-5
FORMATS = ("onnx", "saved_model")


def tolerance_for(expected) -> float:
    """How far an artifact's numbers may be from the policy's: VALUE_TOLERANCE for numbers up to
    1, relative beyond (float32 rounds relative to a number's size: C51's Q-values of 100 differ
    by 1e-5 between two correct graphs)."""
    return VALUE_TOLERANCE * max(1.0, float(np.max(np.abs(expected), initial=0.0)))


class ExportError(RuntimeError):
    """An export could not be made, or does not reproduce the policy."""


def sample_observations(space: gym.Space, n: int, seed: int = 0) -> np.ndarray:
    """`n` float32 observations spread over the space (normal draws where it is unbounded)."""
    rng = np.random.default_rng(seed)
    shape = (n, *space.shape)
    if isinstance(space, gym.spaces.MultiBinary):  # carried as the env gives them, 0 and 1
        return rng.integers(0, 2, size=shape).astype(np.float32)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return (space.start + rng.integers(0, space.nvec, size=shape)).astype(np.float32)
    low = np.broadcast_to(np.asarray(space.low, np.float64), space.shape)
    high = np.broadcast_to(np.asarray(space.high, np.float64), space.shape)
    bounded = np.isfinite(low) & np.isfinite(high) & (high - low < 1e6)
    uniform = rng.uniform(np.where(bounded, low, 0.0), np.where(bounded, high, 1.0), size=shape)
    normal = rng.normal(size=shape)
    if np.issubdtype(space.dtype, np.integer):
        uniform = np.floor(uniform)
    return np.where(bounded, uniform, normal).astype(np.float32)


def sample_action_masks(n_actions: int, n: int, seed: int = 0, sizes=None) -> np.ndarray:
    """`n` random (n_actions,) float32 masks, each allowing at least one action (of each component,
    for a MultiDiscrete space's `sizes`)."""
    rng = np.random.default_rng(seed)
    masks = rng.random((n, n_actions)) < 0.5
    start = 0
    for size in sizes or (n_actions,):
        masks[np.arange(n), start + rng.integers(0, size, n)] = True
        start += size
    return masks.astype(np.float32)


def _check_inputs(policy, n: int, action_mask: bool, seed: int):
    """Sample observations (and masks) for checking an export: the artifact's inputs."""
    observations = sample_observations(policy.observation_space, n, seed=seed)
    if not action_mask:
        return [observations]
    sizes = categorical_sizes(policy.action_space)
    if sizes is None:
        raise ExportError(f"action_mask=True needs a Discrete or MultiDiscrete action space; this "
                          f"policy acts in {policy.action_space}.")
    return [observations, sample_action_masks(int(sum(sizes)), n, seed, sizes)]


def _export_onnx(model, path: Path) -> None:
    """Keras's ONNX export of `model`, with only the converter plugins it needs loaded first
    (where the backend can narrow them), and with all of them where that was not enough."""
    from kerasrl import backend

    narrowed = backend.narrow_onnx_plugins is not None and backend.narrow_onnx_plugins()
    try:
        model.export(str(path), format="onnx", verbose=False)
    except Exception:
        if not narrowed:
            raise
        backend.widen_onnx_plugins()
        model.export(str(path), format="onnx", verbose=False)


def export_policy(policy, path, format: str = "onnx", *, include_values: bool = False,  # noqa: A002
                  n_check: int = 256, action_mask: bool | None = None) -> Path:
    """Export `policy` to `path` and check the artifact against it. Returns the path.

    `action_mask=True`: the artifact takes the action mask as a second input (see above); None:
    when the policy was trained on an env with action masks (`policy.action_masks`).
    """
    if action_mask is None:
        action_mask = bool(getattr(policy, "action_masks", False))
    from kerasrl import backend

    if format not in FORMATS:
        raise ExportError(f"Unknown export format {format!r}; kerasrl exports {' or '.join(FORMATS)}.")
    if format == "saved_model" and backend.NAME == "torch":
        raise ExportError(
            "Keras cannot write a TF SavedModel from the PyTorch backend. Export from JAX or "
            "TensorFlow instead (a saved policy loads on any backend): for example "
            "`KERAS_BACKEND=jax kerasrl export RUN --format saved_model -o DIR`, or "
            "kerasrl.load_policy(path).export(..., format='saved_model') under "
            "KERAS_BACKEND=tensorflow. ONNX export works from PyTorch.")
    path = Path(path)
    if format != "onnx":  # a folder, replaced as a whole: only an earlier SavedModel or an empty one
        from kerasrl.files import not_replaceable

        refusal = not_replaceable(path, "saved_model.pb", "a SavedModel")
        if refusal:
            raise ExportError(f"Not exporting to {path}: {refusal}, and the export would replace it. Export to a "
                              f"new path (or to an earlier SavedModel, which it replaces), or remove {path} yourself "
                              f"if it is yours to lose.")
    inputs = _check_inputs(policy, n_check, action_mask, seed=0)
    model = (policy.inference_model(include_values=include_values, action_mask=True)
             if action_mask else policy.inference_model(include_values=include_values))
    # A model that has never been called cannot be exported.
    first = artifact_inputs(policy.observation_space, inputs[0][:2],
                            inputs[1][:2] if action_mask else None)
    recurrent = getattr(policy, "recurrent", False)
    if recurrent:
        first += policy.initial_state(2)
    model(first if len(first) > 1 else first[0])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if format == "onnx":
            _require("onnx", "onnx")
            _export_onnx(model, path)
        else:
            if path.exists():
                shutil.rmtree(path)
            model.export(str(path), format="tf_saved_model", verbose=False)
    except ExportError:
        raise
    except ImportError as error:
        raise ExportError(f"{format} export from the {backend.NAME} backend needs a package that "
                          f"is not installed ({error}). Install it with: pip install "
                          f"'kerasrl[export]'") from error
    except OSError as error:  # no space, no permission: kerasrl.WriteError, naming the path
        from kerasrl.runfiles import WriteError

        raise WriteError("export", path, error) from error
    if recurrent:
        check_recurrent_export(policy, path, format, include_values, action_mask, n_check)
        return path
    outputs = run_export(path, format, *inputs, space=policy.observation_space)
    check_outputs(policy, inputs[0], outputs, include_values, f"{format} export {path}",
                  masks=inputs[1] if action_mask else None)
    return path


def check_recurrent_export(policy, path, format: str, include_values: bool,  # noqa: A002
                           action_mask: bool, n_check: int = 256, seed: int = 0,
                           n_sequences: int = 4) -> dict:
    """A recurrent policy's export against the policy over whole episodes with the state carried:
    `n_sequences` sequences of `n_check // n_sequences` steps of sample observations, episodes
    starting at random steps (the state zeroed there); the artifact is fed its own new states.
    Any action that differs, or a state or value off by more than VALUE_TOLERANCE, raises."""
    length = max(n_check // n_sequences, 2)
    rng = np.random.default_rng(seed)
    observations = sample_observations(policy.observation_space, length * n_sequences, seed)
    observations = observations.reshape(length, n_sequences, *observations.shape[1:])
    starts = rng.random((length, n_sequences)) < 0.05
    starts[0] = True
    masks = None
    if action_mask:
        masks = _check_inputs(policy, length * n_sequences, True, seed)[1]
        masks = masks.reshape(length, n_sequences, -1)
    what = f"{format} export {path}"
    expected_state = artifact_state = policy.initial_state(n_sequences)
    figures = {"steps": length, "sequences": n_sequences, "max_state_diff": 0.0}
    for t in range(length):
        keep = (~starts[t])[:, None].astype(np.float32)
        artifact_state = [s * keep for s in artifact_state]
        step_masks = None if masks is None else masks[t]
        outputs = run_export(path, format, observations[t], step_masks,
                             space=policy.observation_space, extra=artifact_state)
        masked = {} if step_masks is None else {"action_mask": step_masks}
        n_outputs = 2 if include_values else 1
        step_figures = check_outputs(
            _AtState(policy, expected_state, starts[t]), observations[t], outputs[:n_outputs],
            include_values, f"{what} (step {t} of a carried state)", masks=step_masks)
        for key, value in step_figures.items():
            figures[key] = max(figures.get(key, 0), value)
        _, expected_state = policy.predict(observations[t], state=expected_state,
                                           episode_start=starts[t], **masked)
        artifact_state = [np.asarray(s).reshape(e.shape) for s, e
                          in zip(outputs[n_outputs:], expected_state)]
        diff = max(float(np.max(np.abs(a - e))) for a, e in zip(artifact_state, expected_state))
        figures["max_state_diff"] = max(figures["max_state_diff"], diff)
        tolerance = max(tolerance_for(e) for e in expected_state)
        if not diff <= tolerance:
            raise ExportError(f"The {what} carries a state up to {diff:.3g} away from the "
                              f"policy's after step {t} (tolerance {tolerance:.3g}). Not "
                              f"exported.")
    return figures


class _AtState:
    """A recurrent policy seen at one step (its state given) as `check_outputs` sees a policy."""

    def __init__(self, policy, state, starts):
        self.policy, self.state, self.starts = policy, state, starts

    def predict(self, observations, deterministic=True, **masked):
        return self.policy.predict(observations, state=self.state, episode_start=self.starts,
                                   deterministic=deterministic, **masked)[0]

    def raw_outputs(self, observations):
        return self.policy.step(observations, self.state, self.starts)[0]


def artifact_inputs(space: gym.Space, observations: np.ndarray, masks: np.ndarray | None = None
                    ) -> list[np.ndarray]:
    """An artifact's inputs in order: the observations (B, *obs_shape), or for a Dict or Tuple
    space each leaf (B, *leaf shape) from the flat observations; then the masks, if any."""
    if isinstance(space, FlatObservations):
        leaves = split(space, observations)
        arrays = [leaves[leaf.name] for leaf in space.leaves]
    else:
        arrays = [observations]
    return arrays + ([] if masks is None else [masks])


def _require(module: str, package: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ExportError(f"Export needs {package}: pip install 'kerasrl[export]'")


def run_export(path: Path, format: str, observations: np.ndarray,  # noqa: A002
               masks: np.ndarray | None = None, *, space: gym.Space | None = None,
               extra: list[np.ndarray] | None = None) -> list[np.ndarray]:
    """The outputs of an exported artifact on `observations` (and action `masks`, for an
    artifact with the mask input), as numpy; `space` (the policy's observation space) splits
    flat observations into the leaves of a Dict or Tuple policy's artifact; `extra`: inputs
    after those (a recurrent policy's states)."""
    arrays = artifact_inputs(space, observations, masks) + list(extra or [])
    if format == "onnx":
        _require("onnxruntime", "onnxruntime")
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        if len(names) < len(arrays):
            raise ExportError(f"{path} takes {len(names)} input(s) ({', '.join(names)}), not "
                              f"{len(arrays)}" + (" (export it with action_mask=True)"
                                                  if masks is not None else "") + ".")
        return [np.asarray(o) for o in session.run(None, dict(zip(names, arrays)))]
    # Reading a SavedModel back needs TensorFlow itself (Keras wrote it with TensorFlow too).
    from kerasrl.backend.saved_model import run_saved_model

    if len(arrays) > 2 or (masks is None and len(arrays) > 1):
        return run_saved_model(path, arrays[0], None, extra=[np.asarray(a) for a in arrays])
    return run_saved_model(path, observations, masks)


def check_outputs(policy, observations, outputs, include_values: bool, what: str,
                  masks: np.ndarray | None = None) -> dict:
    """Compare an artifact's outputs with the policy's; raise ExportError on any difference."""
    masked = {} if masks is None else {"action_mask": masks}
    expected_actions = np.asarray(policy.predict(observations, deterministic=True, **masked))
    actions = np.asarray(outputs[0]).reshape(expected_actions.shape)
    figures = {}
    if np.issubdtype(expected_actions.dtype, np.integer):
        differs = actions.astype(np.int64) != expected_actions.astype(np.int64)
        wrong = np.flatnonzero(differs.reshape(len(differs), -1).any(axis=-1))  # rows
        figures["actions_differing"] = int(len(wrong))
        if len(wrong):
            raise ExportError(
                f"The {what} picks different actions from the policy on {len(wrong)} of "
                f"{len(observations)} sample observations (first at index {wrong[0]}: "
                f"{actions[wrong[0]]} instead of {expected_actions[wrong[0]]}). Not exported.")
    else:
        diff = float(np.max(np.abs(actions - expected_actions)))
        figures["max_action_diff"] = diff
        tolerance = tolerance_for(expected_actions)
        if not diff <= tolerance:
            raise ExportError(f"The {what} gives actions up to {diff:.3g} away from the policy's "
                              f"(tolerance {tolerance:.3g}). Not exported.")
    if include_values:
        expected = np.asarray(policy.raw_outputs(observations))
        values = np.asarray(outputs[1]).reshape(expected.shape)
        diff = float(np.max(np.abs(values - expected)))
        figures["max_value_diff"] = diff
        tolerance = tolerance_for(expected)
        if not diff <= tolerance:
            raise ExportError(f"The {what} gives values up to {diff:.3g} away from the policy's "
                              f"(tolerance {tolerance:.3g}: {VALUE_TOLERANCE} times the largest "
                              f"value, at least {VALUE_TOLERANCE}) over {len(observations)} "
                              f"sample observations. Not exported.")
    return figures


def compare_export(policy, path, format: str = "onnx", n: int = 1000, seed: int = 1,  # noqa: A002
                   action_mask: bool | None = None) -> dict:
    """Figures (actions differing, max value difference) of an export against the policy;
    `action_mask` as in `export_policy`."""
    if action_mask is None:
        action_mask = bool(getattr(policy, "action_masks", False))
    if getattr(policy, "recurrent", False):
        # The artifact's number of outputs tells whether it gives the values.
        n_outputs = 1 + len(policy.state_sizes)
        include_values = len(run_export(Path(path), format, *_check_inputs(policy, 1, action_mask,
                                                                           seed),
                                        space=policy.observation_space,
                                        extra=policy.initial_state(1))) > n_outputs
        return check_recurrent_export(policy, path, format, include_values, action_mask, n, seed)
    inputs = _check_inputs(policy, n, action_mask, seed)
    outputs = run_export(Path(path), format, *inputs, space=policy.observation_space)
    return check_outputs(policy, inputs[0], outputs, len(outputs) > 1, f"{format} export {path}",
                         masks=inputs[1] if action_mask else None)


__all__ = ["ExportError", "FORMATS", "VALUE_TOLERANCE", "check_recurrent_export",
           "compare_export", "export_policy",
           "sample_action_masks", "sample_observations"]
_ = tempfile  # (kept for callers that export to a temporary folder)
