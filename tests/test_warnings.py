"""The test run's warnings: third-party deprecations are filtered where they arise (pyproject.toml,
[tool.pytest.ini_options] filterwarnings), so that kerasrl's own warnings, and the tests', are seen;
a DeprecationWarning raised in kerasrl's own code is an error.

Each check issues a warning as if from a module (`warnings.warn_explicit`), through the filters
that pytest installs for every test from the configuration.
"""

from __future__ import annotations

import warnings

import pytest

from kerasrl import backend
from kerasrl.diagnostics import TrainingWarning

THIRD_PARTY = ("keras", "keras.src.backend.common.variables", "tensorflow.python.framework.ops",
               "torch.nn.modules.module", "jax._src.numpy.lax_numpy", "tensorboardX.writer",
               "gymnasium.envs.registration", "google.protobuf.internal", "numpy.core")


def shown(category: type[Warning], module: str) -> bool:
    """Whether a warning of `category` issued from `module` reaches the test output; a `module`
    that is a path is a file's, as Python names a warning's module when nothing else does."""
    with warnings.catch_warnings(record=True) as caught:  # the filters in force, kept
        issue(category, module)
    return len(caught) == 1


def issue(category: type[Warning], module: str) -> None:
    """A warning of `category` from `module`, a dotted name or a file's path (without .py)."""
    if "/" in module:  # no module: Python names the warning's module after the file
        warnings.warn_explicit("a message", category, module + ".py", 1)
    else:
        warnings.warn_explicit("a message", category, module.replace(".", "/") + ".py", 1,
                               module=module)


@pytest.mark.parametrize("category", [DeprecationWarning, PendingDeprecationWarning, FutureWarning])
def test_third_party_deprecations_are_filtered_where_they_arise(category):
    assert [module for module in THIRD_PARTY if shown(category, module)] == []
    by_file = [f"/venv/lib/python3.11/{packages}/{module.replace('.', '/')}"
               for packages in ("site-packages", "dist-packages") for module in THIRD_PARTY]
    assert [path for path in by_file if shown(category, path)] == []


def test_deprecations_that_pytest_warns_passes_on_are_filtered():
    """pytest.warns passes on the warnings it did not expect under their file's path alone."""
    with warnings.catch_warnings(record=True) as caught:
        with pytest.warns(UserWarning, match="expected"):
            warnings.warn_explicit("expected", UserWarning, "test_x.py", 1, module="test_x")
            warnings.warn_explicit("numpy 2", DeprecationWarning,
                                   "/venv/lib/python3.11/site-packages/keras/src/backend/jax/core.py",
                                   409, module="keras.src.backend.jax.core")
    assert caught == []


def test_kerasrls_own_warnings_show(monkeypatch):
    for category in (TrainingWarning, UserWarning, RuntimeWarning, FutureWarning):
        assert shown(category, "kerasrl.agents.base"), category
    # A package whose name begins with a filtered one's is not filtered (`keras` is not `kerasrl`).
    assert shown(DeprecationWarning, "keras_rl_plugin")
    # A real one: a fast path that fails says so (once per process, hence a fresh record).
    monkeypatch.setattr(backend, "_FELL_BACK", set())
    with warnings.catch_warnings(record=True) as caught:
        backend.fall_back("a stand-in private API", RuntimeError("gone"), "the public path runs")
    assert [str(w.message)[:50] for w in caught] == [
        "kerasrl: the fast path through a stand-in private "]


def test_deprecations_outside_the_named_packages_show():
    """kerasrl's own deprecations (an old config field name) are reported at the caller's line:
    the user's code, or a test, where they show."""
    for module in ("test_config", "my_project.train", "__main__", "/home/me/kerasrl/tests/test_x"):
        assert shown(DeprecationWarning, module), module


@pytest.mark.parametrize("module", ["kerasrl.agents.base", "/work/src/kerasrl/agents/base",
                                    "/venv/lib/python3.11/site-packages/kerasrl/agents/base"])
def test_a_deprecation_in_kerasrls_own_code_is_an_error(module):
    with pytest.raises(DeprecationWarning):
        issue(DeprecationWarning, module)
