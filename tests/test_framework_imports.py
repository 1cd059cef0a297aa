"""No framework is imported that the running backend does not need, and none of its log lines shows.

A fresh process per backend trains a small DQN (with a run folder: CSV and TensorBoard files),
saves it, loads it as an agent and as a policy, acts and saves the policy; then the frameworks in
`sys.modules` and the lines on stderr are checked. Keras imports JAX on every backend when JAX is
installed (Keras's own start-up, not kerasrl's), so JAX is allowed everywhere.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from kerasrl import backend

FRAMEWORKS = ("jax", "tensorflow", "torch")
# What each framework prints on stderr when it is imported or used (start-up banners, C++ logs).
LOG_LINES = {
    "tensorflow": re.compile(r"tensorflow|oneDNN|cpu_feature_guard|TF_ENABLE_ONEDNN_OPTS|"
                             r"rebuild TensorFlow|absl::InitializeLog"),
    "torch": re.compile(r"\btorch\b|TorchScript"),
}

SCRIPT = """
import json, sys
from pathlib import Path

import numpy as np

import kerasrl
from kerasrl.cli.common import show_info_lines

show_info_lines()  # kerasrl's INFO lines on stderr, as the CLI shows them
out = Path(sys.argv[1])
agent = kerasrl.DQN("CartPole-v1", seed=0, learning_starts=16, batch_size=8, buffer_size=64,
                    hidden_sizes=(8,), target_update_interval=8)
agent.fit(48, log_dir=out / "run", progress=False)  # CSV and TensorBoard files too
path = agent.save(out / "agent")
kerasrl.DQN.load(path).predict(np.zeros(4, np.float32))
policy = kerasrl.load_policy(path)
policy.predict(np.zeros(4, np.float32))
policy.save(out / "policy")
assert any((out / "run" / "tensorboard").iterdir())
print(json.dumps(sorted(name for name in {FRAMEWORKS} if name in sys.modules)))
""".replace("{FRAMEWORKS}", repr(FRAMEWORKS))


@pytest.mark.cross_backend
@pytest.mark.parametrize("name", [name if name == "jax" else pytest.param(name, marks=pytest.mark.slow)
                                  for name in FRAMEWORKS])  # JAX, the default, in the fast tier
def test_a_run_imports_only_its_backends_framework(name, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env.update(KERAS_BACKEND=name, KERAS_HOME=str(tmp_path / "keras_home"))
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    imported = json.loads(result.stdout.strip().splitlines()[-1])
    allowed = {name, "jax"}  # Keras imports JAX itself, on every backend
    assert set(imported) <= allowed, f"{name} run imported {sorted(set(imported) - allowed)}"
    assert name in imported
    for framework, pattern in LOG_LINES.items():
        if framework != name:
            shown = [line for line in result.stderr.splitlines() if pattern.search(line)]
            assert not shown, f"{name} run printed {framework}'s lines:\n" + "\n".join(shown)
    # The backend and why it runs, said once, when the first agent was made.
    said = [line for line in result.stderr.splitlines() if "Keras backend:" in line]
    assert said == [f"kerasrl: Keras backend: {name} (KERAS_BACKEND={name})."], said


# -- unused_frameworks_hidden, on a stand-in framework that nothing has imported -------------------
@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A framework module `standin_framework` of a backend other than the running one, on the
    path and not imported; Keras's import memory has a LazyModule of it."""
    from keras.src.utils import module_utils

    (tmp_path / "standin_framework.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(backend._FRAMEWORK, "standin", "standin_framework")
    monkeypatch.delitem(sys.modules, "standin_framework", raising=False)
    lazy = module_utils.LazyModule("standin_framework")
    monkeypatch.setattr(module_utils, "standin_framework", lazy, raising=False)
    return lazy


def test_hidden_frameworks_cannot_be_imported_and_come_back_after(stand_in):
    with backend.unused_frameworks_hidden():
        with pytest.raises(ImportError):
            import standin_framework  # noqa: F401
        assert not stand_in.available  # what Keras code sees inside
    assert stand_in.available  # Keras no longer remembers the failed import
    assert stand_in.VALUE == 1
    assert sys.modules["standin_framework"].VALUE == 1


def test_the_running_backends_framework_is_never_hidden(stand_in, monkeypatch):
    monkeypatch.setattr(backend, "NAME", "standin")
    with backend.unused_frameworks_hidden():
        import standin_framework

        assert standin_framework.VALUE == 1


def test_nothing_is_hidden_where_keras_keeps_its_import_memory_elsewhere(stand_in, monkeypatch):
    """The fallback: a Keras release whose module_utils is not as kerasrl knows it gets the
    frameworks imported as Keras itself does, rather than a failed import remembered for good."""
    from keras.src.utils import module_utils

    monkeypatch.setattr(module_utils, "tensorflow", object())
    with backend.unused_frameworks_hidden():
        import standin_framework

        assert standin_framework.VALUE == 1
