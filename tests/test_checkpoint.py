"""Checkpoints: crash safety under SIGKILL, refusal of damaged or unsafe files (none of which
may run code), checkpoint rotation and the CLI's resume. Exact resume in a fresh process, on the
same and on another backend: tests/test_resume_processes.py."""

from __future__ import annotations

import json
import re
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import kerasrl
from kerasrl.checkpoint import CheckpointError
from kerasrl.files import read_manifest, verify_files, write_manifest
from kerasrl.runfiles import list_checkpoints

WORKER = Path(__file__).with_name("checkpoint_worker.py")
ROUNDS = 3  # each round is a fresh process (about 20 s): three kills, two resumes


def test_sigkill_at_random_moments_never_leaves_a_partial_checkpoint(tmp_path):
    """Kill a training run with frequent checkpoints at random moments; every restart resumes
    from the newest complete checkpoint, and every checkpoint left on disk verifies."""
    rng = np.random.default_rng(0)
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    kills, resumed_steps, last = 0, [], 0
    for round_ in range(ROUNDS):
        proc = subprocess.Popen([sys.executable, str(WORKER), "crash", str(tmp_path)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = []
        # Wait until it trains past its first checkpoint, then kill it at a random moment.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            # past the first checkpoint (every 20 steps): an episode can end before step 20
            if line.startswith("step") and int(line.split()[1]) >= 20:
                break
        assert proc.poll() is None, f"worker ended early:\n{proc.stderr.read()[-3000:]}"
        time.sleep(rng.uniform(0.0, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        resumed = [int(x.split()[1]) for x in lines if x.startswith("resumed")]
        if round_ > 0:
            assert resumed, f"round {round_} did not resume: {lines[:3]}"
            assert resumed[0] >= last
            resumed_steps.append(resumed[0])
        found = list_checkpoints(tmp_path / "checkpoints")
        assert found, "no checkpoint written"
        for _, path in found:
            verify_files(path, read_manifest(path), read_manifest(path)["files"])
        last = found[-1][0]
    assert kills == ROUNDS and len(resumed_steps) == ROUNDS - 1
    agent = kerasrl.DQN.load(tmp_path)
    assert agent.num_timesteps == last


# -- refusing damaged and unsafe files ---------------------------------------------------------
@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    agent = kerasrl.DQN("CartPole-v1", seed=0, learning_starts=20, buffer_size=200, batch_size=8)
    agent.fit(total_steps=60, progress=False)
    path = tmp_path_factory.mktemp("saved") / "ckpt"
    agent.save(path)
    return path


@pytest.fixture
def ckpt(saved, tmp_path):
    path = tmp_path / "ckpt"
    shutil.copytree(saved, path)
    return path


def resign(path: Path) -> None:
    """Rewrite the manifest's checksums, as an attacker who edits files would."""
    manifest = json.loads((path / "manifest.json").read_text())
    header = {k: v for k, v in manifest.items() if k not in ("files", "format_version",
                                                              "kerasrl_version")}
    (path / "manifest.json").unlink()
    write_manifest(path, header)


def test_round_trip_continues_training(ckpt):
    agent = kerasrl.DQN.load(ckpt)
    assert agent.num_timesteps == 60
    agent.fit(total_steps=80, progress=False)
    assert agent.num_timesteps == 80


def test_checksum_mismatch_is_refused(ckpt):
    state = ckpt / "state.json"
    text = state.read_text()
    state.write_text(text.replace('"num_timesteps": 60', '"num_timesteps": 61'))
    with pytest.raises(CheckpointError, match="state.json does not match its sha256"):
        kerasrl.DQN.load(ckpt)


def test_truncated_file_is_refused(ckpt):
    npz = ckpt / "training_state.npz"
    npz.write_bytes(npz.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="training_state.npz has 1000 bytes.*truncated"):
        kerasrl.DQN.load(ckpt)


def test_missing_file_is_named(ckpt):
    (ckpt / "config.json").unlink()
    with pytest.raises(CheckpointError, match="config.json is missing"):
        kerasrl.DQN.load(ckpt)


def test_newer_format_version_is_named(ckpt):
    manifest = json.loads((ckpt / "manifest.json").read_text())
    manifest["format_version"] = 99
    (ckpt / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="format version 99.*reads versions up to 1"):
        kerasrl.DQN.load(ckpt)
    with pytest.raises(CheckpointError, match="format version 99"):
        kerasrl.load_policy(ckpt)


def test_npz_with_python_objects_is_refused(ckpt, tmp_path):
    marker = tmp_path / "ran"
    arrays = dict(np.load(ckpt / "training_state.npz"))
    arrays["loop/episode_returns"] = np.array([Evil(marker)], dtype=object)
    np.savez(ckpt / "training_state.npz", **arrays)  # pickles the object array
    resign(ckpt)
    with pytest.raises(CheckpointError, match="holds Python objects.*never unpickles"):
        kerasrl.DQN.load(ckpt)
    assert not marker.exists()


class Evil:
    """Pickled, it would create a file when loaded."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def _edit_keras_config(path: Path, edit) -> None:
    model = path / "model.keras"
    with zipfile.ZipFile(model) as z:
        files = {name: z.read(name) for name in z.namelist()}
    config = json.loads(files["config.json"])
    edit(config)
    files["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(model, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    resign(path)


def test_keras_config_naming_an_unknown_class_is_refused(ckpt):
    def edit(config):
        layer = config["config"]["layers"][-1]
        layer["class_name"], layer["module"], layer["registered_name"] = "Backdoor", "evil", "evil>Backdoor"

    _edit_keras_config(ckpt, edit)
    with pytest.raises(CheckpointError, match="Keras refused to load .*model.keras"):
        kerasrl.DQN.load(ckpt)
    with pytest.raises(CheckpointError, match="Keras refused"):
        kerasrl.load_policy(ckpt)


def test_unknown_algorithm_and_policy_type_are_refused(ckpt):
    config = json.loads((ckpt / "config.json").read_text())
    config["algorithm"] = "os.system"
    (ckpt / "config.json").write_text(json.dumps(config))
    policy = json.loads((ckpt / "policy.json").read_text())
    policy["type"] = "builtins.eval"
    (ckpt / "policy.json").write_text(json.dumps(policy))
    resign(ckpt)
    with pytest.raises(CheckpointError, match="algorithm 'os.system'"):
        kerasrl.Agent.load(ckpt)
    with pytest.raises(CheckpointError, match="policy type 'builtins.eval'"):
        kerasrl.load_policy(ckpt)


def test_lambda_layer_is_refused_at_save_and_at_load(ckpt, tmp_path):
    import keras

    marker = tmp_path / "lambda_ran"
    os.environ["KERASRL_TEST_MARKER"] = str(marker)
    inputs = keras.Input((4,))
    outputs = keras.layers.Lambda(  # touches the marker file whenever it is run
        lambda x: x + 0.0 * float(__import__("pathlib").Path(
            __import__("os").environ["KERASRL_TEST_MARKER"]).touch() is None))(
        keras.layers.Dense(2)(inputs))
    model = keras.Model(inputs, outputs)
    assert marker.exists()
    marker.unlink()
    policy = kerasrl.QPolicy(model, *_cartpole_spaces())
    with pytest.warns(UserWarning, match="Lambda layer"):  # saved, as weights only
        policy.save(tmp_path / "policy")
    assert (tmp_path / "policy" / "model.weights.h5").is_file()
    assert not (tmp_path / "policy" / "model.keras").exists()
    model.save(ckpt / "model.keras")  # Keras itself writes it; a hostile file would be like this
    resign(ckpt)
    with pytest.raises(CheckpointError, match="Lambda"):
        kerasrl.load_policy(ckpt)
    assert not marker.exists()


def _cartpole_spaces():
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    return env.observation_space, env.action_space


def test_interrupted_write_keeps_the_previous_checkpoint(saved, tmp_path, monkeypatch):
    from kerasrl import checkpoint

    agent = kerasrl.DQN.load(saved)
    target = tmp_path / "ckpt"
    agent.save(target)
    before = read_manifest(target)

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint, "write_manifest", fail)
    with pytest.raises(OSError, match="disk full"):
        agent.save(target)
    assert read_manifest(target) == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]  # no temporary folder left


def test_a_save_replaces_an_earlier_save_or_an_empty_folder_never_a_users_file_or_folder(saved, tmp_path):
    # Before: agent.save(path) replaced whatever was at `path`: a user's file, or a folder of
    # results and all in it. Checkpoints and policy folders share the rule (files.atomic_folder).
    agent = kerasrl.DQN.load(saved)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    results = tmp_path / "results"
    results.mkdir()
    for name in ("a.csv", "b.csv", "c.png", "d.png", "e.txt"):
        (results / name).write_text(name)
    for save in (agent.save, agent.policy.save):
        with pytest.raises(CheckpointError, match=rf"Not saving the (checkpoint|policy) to {re.escape(str(notes))}: "
                                                  r"it is a file, and the save would replace it. Save to a new path"):
            save(notes)
        with pytest.raises(CheckpointError, match=r"it is a folder that is not a kerasrl checkpoint or policy \(it "
                                                  r"holds a.csv, b.csv, c.png, d.png and 1 more\)"):
            save(results)
    assert notes.read_text() == "mine" and sorted(p.name for p in results.iterdir()) == [
        "a.csv", "b.csv", "c.png", "d.png", "e.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "results"]  # no temporary folder left
    empty = tmp_path / "empty"
    empty.mkdir()
    agent.save(empty)  # an empty folder, then the save itself: replaced
    agent.fit(total_steps=70, progress=False)
    agent.save(empty)
    assert kerasrl.DQN.load(empty).num_timesteps == 70


def test_fit_writes_and_prunes_checkpoints(tmp_path):
    agent = kerasrl.DQN("CartPole-v1", seed=0, learning_starts=20, buffer_size=200, batch_size=8)
    agent.fit(total_steps=100, progress=False, checkpoint_every=30, keep_last=2,
              checkpoint_dir=tmp_path)
    assert [step for step, _ in list_checkpoints(tmp_path)] == [90, 100]
    resumed = kerasrl.DQN.load(tmp_path)
    assert resumed.num_timesteps == 100
    state = json.loads((tmp_path / "ckpt-000000100" / "state.json").read_text())
    assert state["total_steps"] == 100 and state["env_not_captured"] is None


def test_cli_train_checkpoints_resume_evaluate_export(tmp_path, capsys):
    from kerasrl.cli import main

    run = tmp_path / "run"
    args = ["train", "dqn", "--env", "CartPole-v1", "--steps", "60", "--out", str(run),
            "--no-progress", "--eval-episodes", "1", "--checkpoint-every", "20", "--keep-last",
            "2", "--set", "learning_starts=20", "--set", "buffer_size=100"]
    assert main(args) == 0
    assert [s for s, _ in list_checkpoints(run / "checkpoints")] == [40, 60]
    shutil.rmtree(run / "checkpoints" / "ckpt-000000060")
    before = kerasrl.DQN.load(run)  # the newest checkpoint left: step 40
    assert before.num_timesteps == 40
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--no-progress", "--eval-episodes", "1",
                 "--checkpoint-every", "20"]) == 0
    assert "at step 40 of 60" in capsys.readouterr().out
    after = kerasrl.DQN.load(run)
    assert after.num_timesteps == 60
    # Continued, not restarted: the episodes before step 40 are the saved ones, and later ones
    # were added after them.
    n = len(before.history.episodes)
    assert after.history.episodes[:n] == before.history.episodes
    assert all(e["step"] > 40 for e in after.history.episodes[n:])
    assert main(["evaluate", str(run), "--episodes", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 2
    assert main(["export", str(run), "--format", "onnx", "-o", str(tmp_path / "p.onnx")]) == 0
    assert "actions_differing': 0" in capsys.readouterr().out
