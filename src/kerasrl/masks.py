"""Action masks, numpy side: reading them from environments, checking them, acting with them.

An environment says which of its Discrete actions (or, for a MultiDiscrete space, which values of
each component, the components' flags side by side) are allowed in the current state the Gymnasium
way, `info["action_mask"]` (an int8 or bool array of shape (n_actions,), 1 = allowed), or with an
`action_masks()` method (as sb3-contrib's MaskablePPO reads it; `ActionMasksInfo` moves that into
the info). A vector env stacks the per-env masks to (n_envs, n_actions) in its info, and in
SAME_STEP auto-reset mode the mask of an episode's true final observation is in
`info["final_info"]`.

Masks travel as bool numpy arrays (B, n_actions) from the env to the buffers and into the compiled
steps, where `kerasrl.losses` uses them (masked max, masked expectation, masked logits). Every
random draw here is numpy's, from the agent's generator: the same actions on every backend.
"""

from __future__ import annotations

import numpy as np

from kerasrl.spaces import split_segments

MASK_KEY = "action_mask"


class ActionMaskError(ValueError):
    """An action mask has the wrong shape or allows no action; the message names where."""


def check_masks(masks, n_rows: int, n_actions: int, where: str,
                sizes: tuple[int, ...] | None = None) -> np.ndarray:
    """`masks` as bool (n_rows, n_actions), each row allowing at least one action, or a clear
    ActionMaskError naming `where` (e.g. "env step 1200" or "policy.predict"). `sizes`: a
    MultiDiscrete space's components (n_actions = their sum), each of which must allow one."""
    masks = np.asarray(masks)
    if masks.shape != (n_rows, n_actions):
        raise ActionMaskError(
            f"{where}: the action mask has shape {masks.shape}; expected ({n_rows}, {n_actions}) "
            f"(one row of {n_actions} flags, 1 = allowed, per observation).")
    masks = mask_flags(masks, where)
    empty = np.flatnonzero(~masks.any(axis=-1))
    if len(empty):
        raise ActionMaskError(
            f"{where}: the action mask of row {empty[0]} allows no action ({len(empty)} row(s) "
            f"like it). A state the agent acts in needs at least one allowed action; end the "
            f"episode (terminated=True) where none is left.")
    if sizes is not None and len(sizes) > 1:
        starts = np.cumsum((0,) + tuple(sizes))
        for j, segment in enumerate(split_segments(masks, sizes)):
            empty = np.flatnonzero(~segment.any(axis=-1))
            if len(empty):
                raise ActionMaskError(
                    f"{where}: the action mask of row {empty[0]} allows no value of component "
                    f"{j} (mask entries {starts[j]}..{starts[j + 1] - 1} of the MultiDiscrete "
                    f"space's {n_actions}: each component's flags side by side). Every component "
                    f"needs at least one allowed value.")
    return masks


def mask_flags(values, where: str) -> np.ndarray:
    """`values` (bool, or 0/1 of any int or float dtype) as bool flags; any other value refused
    naming `where`: a 0.5 or a score is not read as "allowed"."""
    values = np.asarray(values)
    if values.dtype == np.bool_:
        return values
    if not (np.issubdtype(values.dtype, np.integer) or np.issubdtype(values.dtype, np.floating)):
        raise ActionMaskError(f"{where}: the action mask must hold 0/1 or booleans, not {values.dtype}.")
    flags = (values == 0) | (values == 1)
    if not flags.all():
        raise ActionMaskError(
            f"{where}: the action mask holds {values[~flags].flat[0].item()!r}; its flags must be 0 or 1 "
            f"(1 = allowed) or booleans. A probability or score is not a mask: threshold it "
            f"(e.g. scores > 0).")
    return values != 0


def _stacked(info: dict, key: str, n_envs: int, n_actions: int, where: str):
    """info[key] as an (n_envs, n_actions) array with its `_key` flags, or None when absent."""
    if not isinstance(info, dict) or key not in info:
        return None
    values = info[key]
    present = np.asarray(info.get(f"_{key}", np.ones(n_envs, dtype=bool)), dtype=bool)
    if isinstance(values, np.ndarray) and values.dtype == object:  # ragged: one array per env
        rows = np.ones((n_envs, n_actions), dtype=bool)
        for i in np.flatnonzero(present):
            row = np.asarray(values[i])
            if row.shape != (n_actions,):
                raise ActionMaskError(f"{where}: env {i}'s info['{MASK_KEY}'] has shape "
                                      f"{row.shape}; expected ({n_actions},).")
            rows[i] = mask_flags(row, where)
        return rows
    values = np.asarray(values)
    if values.shape != (n_envs, n_actions):
        raise ActionMaskError(
            f"{where}: info['{MASK_KEY}'] has shape {values.shape[1:] or values.shape} per env; "
            f"expected ({n_actions},) for the {n_actions} actions of the env's Discrete space.")
    rows = np.array(mask_flags(values, where))  # a copy: the env's own bool array is left as it is
    rows[~present] = True  # an env that did not report a mask allows everything
    return rows


def masks_from_info(info: dict, n_envs: int, n_actions: int, where: str,
                    sizes: tuple[int, ...] | None = None) -> np.ndarray | None:
    """The masks (n_envs, n_actions) bool of the observations a vector env just returned, checked
    (right shape, one allowed action per row); None when the env reports none."""
    masks = _stacked(info, MASK_KEY, n_envs, n_actions, where)
    if masks is None:
        return None
    return check_masks(masks, n_envs, n_actions, where, sizes)


def final_masks(masks: np.ndarray | None, done: np.ndarray, info: dict, n_actions: int,
                where: str) -> np.ndarray | None:
    """The masks of the observations that end each step (`final_observations`' counterpart): the
    final observation's mask where an episode ended (from `info["final_info"]`), else `masks`.

    A final state may allow nothing (a board game's end); such a row becomes all True, which
    changes no target: a terminated transition does not bootstrap.
    """
    if masks is None:
        return None
    if not done.any():
        return masks
    final = masks.copy()
    final[done] = True
    final_info = info.get("final_info") if isinstance(info, dict) else None
    ended = _stacked(final_info, MASK_KEY, len(done), n_actions, where) if final_info else None
    if ended is not None:
        rows = done & np.asarray(final_info.get(f"_{MASK_KEY}", done), dtype=bool)
        final[rows] = ended[rows]
    final[~final.any(axis=-1)] = True
    return final


def masked_argmax(values: np.ndarray, masks: np.ndarray | None) -> np.ndarray:
    """The first index of the largest allowed value of each row (B,), int64."""
    values = np.asarray(values)
    if masks is None:
        return np.argmax(values, axis=-1)
    return np.argmax(np.where(masks, values, -np.inf), axis=-1)


def uniform_allowed(masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One uniformly random allowed action per row of `masks` (B, A) bool: (B,) int64."""
    counts = masks.sum(axis=-1)
    k = rng.integers(0, counts)  # the k-th allowed action of each row
    return (np.cumsum(masks, axis=-1) > k[:, None]).argmax(axis=-1)


def masked_logits(logits: np.ndarray, masks: np.ndarray | None) -> np.ndarray:
    """Logits with the masked actions at the float32 minimum: their probability is exactly 0."""
    if masks is None:
        return logits
    return np.where(masks, logits, np.finfo(np.float32).min).astype(np.asarray(logits).dtype)


def batch_masks(action_mask, n_rows: int, single: bool, n_actions: int, where: str,
                sizes: tuple[int, ...] | None = None) -> np.ndarray:
    """A user's mask for a batch of `n_rows` observations (or one, `single`), checked, as bool
    (n_rows, n_actions)."""
    masks = np.asarray(action_mask)
    if single and masks.ndim == 1:
        masks = masks[None]
    return check_masks(masks, n_rows, n_actions, where, sizes)
