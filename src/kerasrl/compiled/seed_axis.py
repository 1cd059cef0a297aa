"""Runner states of many seeds: trees (dicts, lists, tuples) of arrays with a leading seed axis,
made, copied to the device, split and joined again (kerasrl.compiled's loops and engine)."""

from __future__ import annotations

import numpy as np

from kerasrl import backend


def repeat(tree, n: int):
    """A tree of numpy arrays with a leading axis of `n` copies (the seeds' equal starting values):
    read-only views of one copy, so that a replay buffer of 4,096 seeds takes no host memory;
    `CompiledLoop._start` repeats them on the device (`stacked_tensors`)."""
    return tree_map(lambda x: np.broadcast_to(np.asarray(x)[None], (n, *np.shape(x))), tree)


def _repeated(x) -> bool:
    """Whether `x` is one row seen along its leading axis (a `repeat` view: stride 0)."""
    return isinstance(x, np.ndarray) and x.ndim > 0 and x.shape[0] > 1 and x.strides[0] == 0


def owned(tree):
    """The tree with its read-only views copied (a backend may share a numpy array's memory and
    write into it in place: PyTorch's replay writes)."""
    return tree_map(lambda x: x if not isinstance(x, np.ndarray) or x.flags.writeable else np.array(x), tree)


def stacked_tensors(tree):
    """`backend.to_tensors` of a tree with a leading seed axis, in one transfer per leaf; the
    leaves `repeat` made (an empty replay buffer, episode sums) go over as one row, made `n` rows
    on the device by one compiled call. (The host copies of a 100k-row buffer for 512 seeds took
    most of DQN's setup: 2 GB repeated, then copied again to the device.)"""
    leaves = []
    tree_map(leaves.append, tree)
    repeated = [x for x in leaves if _repeated(x)]
    plain = iter(backend.to_tensors([x for x in leaves if not _repeated(x)]))
    if repeated:
        from keras import ops

        counts = [x.shape[0] for x in repeated]
        spread = backend.compile(lambda rows: [ops.broadcast_to(ops.expand_dims(row, 0), (n, *row.shape))
                                               for row, n in zip(rows, counts)])
        repeated = iter(spread(backend.to_tensors([np.array(x[0]) for x in repeated])))
    return tree_map(lambda x: next(repeated) if _repeated(x) else next(plain), tree)


def tree_map(fn, tree):
    if isinstance(tree, dict):
        return {key: tree_map(fn, value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(tree_map(fn, value) for value in tree)
    return fn(tree)


def stack(trees: list):
    """One tree of numpy arrays with a leading axis from a list of same-shaped trees."""
    first = trees[0]
    if isinstance(first, dict):
        return {key: stack([t[key] for t in trees]) for key in first}
    if isinstance(first, (list, tuple)):
        return type(first)(stack([t[i] for t in trees]) for i in range(len(first)))
    return np.stack([np.asarray(t) for t in trees])


def unstack(tree, index: int):
    """Entry `index` of the leading axis of a tree of numpy arrays."""
    if isinstance(tree, dict):
        return {key: unstack(value, index) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(unstack(value, index) for value in tree)
    return tree[index]
