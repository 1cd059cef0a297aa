"""Comparing two training states (nested dicts and lists of arrays) leaf by leaf, for the tests that
run one round through two loops or one run in pieces."""

from __future__ import annotations

import numpy as np


def leaves(tree, prefix=""):
    """(path, numpy array) of every leaf of `tree`, dict keys in sorted order."""
    if isinstance(tree, dict):
        for key in sorted(tree):
            yield from leaves(tree[key], f"{prefix}/{key}")
    elif isinstance(tree, (list, tuple)):
        for i, item in enumerate(tree):
            yield from leaves(item, f"{prefix}/{i}")
    else:
        yield prefix, np.asarray(tree)


def assert_same_leaves(compiled, python, exact: bool) -> None:
    """Every leaf equal (bit for bit where `exact`, else within 1e-6), more than ten of them."""
    pairs = list(zip(leaves(compiled), leaves(python)))
    assert len(pairs) == len(list(leaves(python))) > 10
    for (path, a), (_, b) in pairs:
        if exact:
            np.testing.assert_array_equal(a, b, err_msg=path)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=path)
