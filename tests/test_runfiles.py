"""Run folders (kerasrl.runfiles): a checkpoint, log or export that cannot be written stops with one
message naming the path, the cause and the checkpoint to resume from, and loses nothing; a run
folder is held by one training process at a time.

The write failures are injected at the write layer (they hold on any machine, as any user); one
test fills a real filesystem: a 512 KiB tmpfs in a private mount namespace where this machine lets
a process mount one (root, or an unprivileged user namespace), else a file size limit lowered on the
running training (`prlimit`, any user on Linux). The locks are taken by real second processes."""

from __future__ import annotations

import errno
import json
import logging
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import kerasrl
from kerasrl import checkpoint, files, runfiles
from kerasrl.runfiles import list_checkpoints
from kerasrl.runfiles import LOCK_NAME, RunLock, RunLockedError, WriteError

CAUSES = {errno.ENOSPC: ("No space left on device", "free space"),
          errno.EACCES: ("Permission denied", "permissions"),
          errno.EROFS: ("Read-only file system", "read-only"),
          errno.EFBIG: ("File too large", "file size limit")}


def small_agent():
    return kerasrl.DQN("CartPole-v1", seed=0, learning_starts=20, buffer_size=200, batch_size=8,
                       target_update_interval=20)


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def assert_released(run: Path) -> None:
    assert not (run / LOCK_NAME).exists()
    assert not runfiles._HELD


# -- a write that fails -----------------------------------------------------------------------
def test_full_disk_mid_training_names_the_checkpoint_to_resume_from(tmp_path, monkeypatch):
    """ENOSPC on the third checkpoint: WriteError (an OSError) naming that checkpoint, the cause,
    the remedy and the last complete checkpoint; its partial folder removed, the run folder let
    go, and the checkpoint named loads (verified against its checksums) at its step."""
    run = tmp_path / "run"
    write_json = checkpoint.write_json

    def full_disk(path, value):
        if path.parent.name.startswith(".ckpt-000000060.tmp-"):  # after model.keras was written
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write_json(path, value)

    monkeypatch.setattr(checkpoint, "write_json", full_disk)
    agent = small_agent()
    with pytest.raises(WriteError) as caught:
        agent.fit(total_steps=80, progress=False, log_dir=run, checkpoint_every=20)
    error = caught.value
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC
    checkpoints = run / "checkpoints"
    assert error.path == checkpoints / "ckpt-000000060"
    assert error.last_checkpoint == checkpoints / "ckpt-000000040"
    message = str(error)
    assert "\n" not in message
    for part in (f"checkpoint {checkpoints / 'ckpt-000000060'}", "No space left on device (ENOSPC)",
                 "free space", f"last complete checkpoint is {checkpoints / 'ckpt-000000040'} "
                 "(step 40)", f"kerasrl train --resume {run}", f"kerasrl.Agent.load('{run}')"):
        assert part in message, (part, message)
    assert [s for s, _ in list_checkpoints(checkpoints)] == [20, 40]
    assert hidden(checkpoints) == []  # the partial folder is gone
    assert_released(run)
    assert kerasrl.DQN.load(run).num_timesteps == 40


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS])
def test_a_log_that_cannot_be_written_names_the_file(tmp_path, monkeypatch, code):
    """episodes.csv refused (no permission, a read-only filesystem) at the first episode, before
    any checkpoint: the message says so, and the files and the folder are let go."""
    from kerasrl import logger

    run = tmp_path / "run"

    def refuse(path, *args, **kwargs):
        if Path(path).name == "episodes.csv":
            raise OSError(code, os.strerror(code), str(path))
        return open(path, *args, **kwargs)

    monkeypatch.setattr(logger, "open", refuse, raising=False)
    with pytest.raises(WriteError) as caught:
        small_agent().fit(total_steps=200, progress=False, log_dir=run, checkpoint_every=100)
    cause, remedy = CAUSES[code]
    message = str(caught.value)
    assert f"Could not write the log {run / 'episodes.csv'}: {cause}" in message
    assert remedy in message
    assert f"no complete checkpoint in {run / 'checkpoints'} to resume from" in message
    assert_released(run)


def test_a_read_only_folder_refuses_save_policy_and_export(tmp_path, monkeypatch):
    """A read-only folder: agent.save, policy.save and policy.export raise WriteError naming the
    path; what the folder held before is intact. A non-root user gets a folder of mode 0o500; root
    writes there anyway, so for root the filesystem's refusal (EROFS) is injected where the
    folder would be made and where the export is written."""
    import keras

    agent = small_agent()
    folder = tmp_path / "read-only"
    folder.mkdir()
    agent.save(folder / "ckpt")
    before = sorted(p.name for p in (folder / "ckpt").iterdir())
    if os.geteuid() != 0:
        folder.chmod(0o500)
        code = errno.EACCES
    else:
        code = errno.EROFS

        def read_only(*args, **kwargs):
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(files.tempfile, "mkdtemp", read_only)
        monkeypatch.setattr(keras.Model, "export", read_only)
    try:
        for what, write, path in (
                ("checkpoint", agent.save, folder / "ckpt"),
                ("policy", agent.policy.save, folder / "policy"),
                ("export", lambda p: agent.policy.export(p, format="onnx"), folder / "p.onnx")):
            with pytest.raises(WriteError) as caught:
                write(path)
            assert caught.value.errno == code and caught.value.path == path
            assert str(caught.value).startswith(
                f"Could not write the {what} {path}: {CAUSES[code][0]}"), str(caught.value)
    finally:
        folder.chmod(0o700)
    assert sorted(p.name for p in (folder / "ckpt").iterdir()) == before
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt"]
    assert kerasrl.DQN.load(folder / "ckpt").num_timesteps == 0


def test_write_error_pickles_with_its_message():
    import pickle

    error = WriteError("log", "/runs/x/episodes.csv", OSError(errno.ENOSPC, "No space left"))
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is WriteError and str(copy) == str(error) and copy.errno == errno.ENOSPC


FILL = """\
set -e
mount -t tmpfs -o size=512k tmpfs "$MNT"
status=0
"$PY" -m kerasrl.cli "$@" --out "$MNT/run" 2> "$OUT/stderr" || status=$?
echo $status > "$OUT/rc"
cp -a "$MNT/run" "$OUT/run"
"""


def _namespace_with_tmpfs() -> list[str] | None:
    """An `unshare` command whose child may mount a tmpfs: as root, a mount namespace; else a user
    namespace (where the kernel allows them). None where neither works."""
    if shutil.which("unshare") is None:
        return None
    for command in (["unshare", "-m"] if os.geteuid() == 0 else [], ["unshare", "-rm"]):
        if not command:
            continue
        probe = subprocess.run([*command, "--propagation", "private", "sh", "-c",
                                'd=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs "$d"; '
                                's=$?; umount "$d" 2>/dev/null; rmdir "$d"; exit $s'],
                               capture_output=True)
        if probe.returncode == 0:
            return [*command, "--propagation", "private"]
    return None


@pytest.mark.slow  # ~20 s; the fast tier fills the disk by injection (test_full_disk_mid_training...)
def test_cli_on_a_filesystem_that_fills_up(tmp_path):
    """`kerasrl train --checkpoint-every` on a 512 KiB tmpfs (two checkpoints fit, the third does
    not): exit code 1, one line naming the path, the cause and the last complete checkpoint, no
    traceback, no partial folder; that checkpoint loads. Where no tmpfs can be mounted, the file
    size limit of the running training is lowered after its second checkpoint instead."""
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONWARNINGS": "ignore"}
    args = ["train", "dqn", "--env", "CartPole-v1", "--steps", "3000", "--checkpoint-every", "50",
            "--no-progress", "--eval-episodes", "1", "--set", "learning_starts=50",
            "--set", "buffer_size=1000", "--set", "target_update_interval=100"]
    namespace = _namespace_with_tmpfs()
    if namespace is not None:
        (tmp_path / "mnt").mkdir()
        script = tmp_path / "fill.sh"
        script.write_text(FILL)
        subprocess.run([*namespace, "bash", str(script), *args], timeout=300, check=True,
                       env={**env, "MNT": str(tmp_path / "mnt"), "OUT": str(tmp_path),
                            "PY": sys.executable})
        code, stderr = int((tmp_path / "rc").read_text()), (tmp_path / "stderr").read_text()
        cause = "No space left on device (ENOSPC)"
    else:
        assert hasattr(resource, "prlimit"), "needs Linux: a tmpfs mount or prlimit"
        proc = subprocess.Popen(
            [sys.executable, "-m", "kerasrl.cli", *args, "--out", str(tmp_path / "run")], env=env,
            stderr=subprocess.PIPE, text=True,
            preexec_fn=lambda: signal.signal(signal.SIGXFSZ, signal.SIG_IGN))  # EFBIG, not a kill
        deadline = time.monotonic() + 120
        while len(list_checkpoints(tmp_path / "run" / "checkpoints")) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (4096, 4096))
        stderr = proc.communicate(timeout=120)[1]
        code, cause = proc.returncode, "File too large (EFBIG)"
    run = tmp_path / "run"
    assert code == 1, stderr
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("kerasrl: error:")]
    assert len(lines) == 1, stderr
    found = list_checkpoints(run / "checkpoints")
    assert len(found) >= 2, stderr
    step, last = found[-1]
    shown = str(last).replace(str(run), str(tmp_path / "mnt" / "run")) if namespace else str(last)
    assert f"{cause}" in lines[0] and f"last complete checkpoint is {shown} (step {step})" in lines[0]
    assert "Could not write the " in lines[0] and "kerasrl train --resume" in lines[0]
    assert hidden(run / "checkpoints") == [] and not (run / LOCK_NAME).exists()
    assert kerasrl.DQN.load(run).num_timesteps == step


# -- one training per run folder -----------------------------------------------------------------
HOLDER = """\
import os, sys
from kerasrl import runfiles
runfiles._NO_FLOCK = sys.argv[2] == "exclusive"
runfiles.RunLock(sys.argv[1]).acquire()
print("held", flush=True)
if sys.argv[3] == "die":
    os._exit(0)  # ends without letting go: its lock file stays, naming it
sys.stdin.readline()
"""


@contextmanager
def held_by_another_process(run: Path, mode: str = "flock", die: bool = False):
    """A second process holding `run` (until the block ends, or, with `die`, one that took it
    and ended without letting it go)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run), mode, "die" if die else "hold"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "held\n"
        if die:
            proc.wait(timeout=30)
        yield proc.pid
    finally:
        if proc.poll() is None:
            proc.communicate("\n", timeout=30)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("trained") / "run"
    small_agent().fit(total_steps=40, progress=False, log_dir=run, checkpoint_every=20)
    return run


def test_a_second_training_into_a_held_run_is_refused_at_once(trained_run, tmp_path, capsys):
    """Another process holds the run: fit(log_dir=...), `kerasrl train --resume` and `kerasrl train
    --out` into it are refused before anything is read or written, naming the holder; once it
    ends, training goes on."""
    import socket

    from kerasrl.cli import main

    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    episodes = (run / "episodes.csv").read_bytes()
    agent = kerasrl.DQN.load(run)
    with held_by_another_process(run) as pid:
        with pytest.raises(RunLockedError) as caught:
            agent.fit(total_steps=60, progress=False, log_dir=run)
        holder = f"process {pid} on host {socket.gethostname()} since "
        assert f"{run} is in use by another training: {holder}" in str(caught.value)
        assert caught.value.holder["pid"] == pid
        capsys.readouterr()
        assert main(["train", "--resume", str(run), "--no-progress"]) == 1
        err = capsys.readouterr().err
        assert err.count("kerasrl: error:") == 1 and holder in err, err
        assert main(["train", "dqn", "--steps", "40", "--out", str(run), "--no-progress"]) == 1
        assert holder in capsys.readouterr().err
        assert agent.num_timesteps == 40 and (run / "episodes.csv").read_bytes() == episodes
        assert not (run / "config.json").exists()  # `train --out` wrote nothing
    agent.fit(total_steps=60, progress=False, log_dir=run)
    assert agent.num_timesteps == 60 and len((run / "episodes.csv").read_bytes()) > len(episodes)
    assert_released(run)


def test_two_kerasrl_train_resume_on_one_run(trained_run, tmp_path):
    """While this process trains into the run, `kerasrl train --resume RUN` in another process
    exits 1 with one line naming this process, and no traceback."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    agent = kerasrl.DQN.load(run)
    seen = []

    def second_launch(agent, history):
        if not seen:  # once, while fit holds the run
            seen.append(subprocess.run(
                [sys.executable, "-m", "kerasrl.cli", "train", "--resume", str(run), "--no-progress"],
                capture_output=True, text=True, timeout=120, env={**os.environ, "KERAS_BACKEND": "jax"}))

    agent.fit(total_steps=60, progress=False, log_dir=run, checkpoint_every=20, callback=second_launch)
    second = seen[0]
    assert second.returncode == 1, second.stderr
    assert "Traceback" not in second.stderr
    lines = [line for line in second.stderr.splitlines() if line.startswith("kerasrl: error:")]
    assert len(lines) == 1 and f"process {os.getpid()} on host" in lines[0], second.stderr
    assert [s for s, _ in list_checkpoints(run / "checkpoints")] == [20, 40, 60]
    steps = [int(line.split(",")[0]) for line in (run / "episodes.csv").read_text().splitlines()[1:]]
    assert steps == sorted(steps)  # one writer: the episodes in order
    assert_released(run)


@pytest.mark.parametrize("mode", ["flock", "exclusive"])
def test_the_stale_lock_of_a_dead_process_is_taken_over(tmp_path, monkeypatch, caplog, mode):
    """A process that took the run and ended without letting it go (killed) leaves its lock file;
    the next training takes it over, saying so, and lets it go at the end. With locks (flock) the
    kernel released it; on a filesystem without them (exclusive create) its process is gone."""
    monkeypatch.setattr(runfiles, "_NO_FLOCK", mode == "exclusive")
    run = tmp_path / "run"
    with held_by_another_process(run, mode, die=True) as pid:
        assert json.loads((run / LOCK_NAME).read_text())["pid"] == pid
    with caplog.at_level(logging.INFO, logger="kerasrl"):
        with RunLock(run):
            assert json.loads((run / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert f"from process {pid} on host" in caplog.text and "ended without releasing it" in caplog.text
    assert_released(run)


def test_a_live_holder_is_refused_without_flock_too(tmp_path, monkeypatch):
    monkeypatch.setattr(runfiles, "_NO_FLOCK", True)
    run = tmp_path / "run"
    with held_by_another_process(run, "exclusive") as pid:
        with pytest.raises(RunLockedError, match=f"process {pid} on host"):
            RunLock(run).acquire()
    with RunLock(run):
        pass
    assert_released(run)


def test_the_run_is_let_go_when_fit_is_interrupted(tmp_path):
    """KeyboardInterrupt inside fit: the lock file is gone and another process may take the run;
    the TensorBoard file written so far holds its scalars."""
    run = tmp_path / "run"

    def interrupt(agent, history):
        if agent.num_timesteps > 30:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        small_agent().fit(total_steps=400, progress=False, log_dir=run, log_interval=10,
                          callback=interrupt)
    assert_released(run)
    with held_by_another_process(run):
        pass
    (events,) = (run / "tensorboard").glob("events.out.tfevents.*")
    steps = {step for tag, step in read_scalars(events) if tag == "train/episodes"}
    assert 10 in steps and 20 in steps and 30 in steps


def read_scalars(path: Path) -> list[tuple[str, int]]:
    """(tag, step) of every scalar in a TensorBoard event file (TFRecord framing: length, its CRC,
    data, its CRC)."""
    from tensorboardX.proto.event_pb2 import Event

    data, scalars, at = path.read_bytes(), [], 0
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at:at + 8])
        event = Event.FromString(data[at + 12:at + 12 + length])
        scalars += [(value.tag, event.step) for value in event.summary.value]
        at += 12 + length + 4
    return scalars


RACER = """\
import os, sys, time
from kerasrl import runfiles
runfiles._NO_FLOCK = sys.argv[2] == "exclusive"
run, go, taken = sys.argv[1], sys.argv[3], 0
inside = os.path.join(run, "inside")
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.001)
end = time.monotonic() + 0.5
while time.monotonic() < end:
    try:
        lock = runfiles.RunLock(run).acquire()
    except runfiles.RunLockedError:
        continue
    fd = os.open(inside, os.O_CREAT | os.O_EXCL)  # FileExistsError: two holders at once
    time.sleep(0.002)
    os.close(fd)
    os.unlink(inside)
    lock.release()
    taken += 1
print(taken)
"""


@pytest.mark.parametrize("mode", ["flock", "exclusive"])
def test_processes_racing_for_one_run_never_hold_it_together(tmp_path, mode):
    """Four processes take and let go of one run folder as fast as they can for 0.5 s: never
    two at once (each marks its turn with a file only one can create), and turns were taken."""
    run, go = tmp_path / "run", tmp_path / "go"
    run.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(run), mode, str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    assert all(proc.stdout.readline() == "ready\n" for proc in procs)
    go.touch()  # all at once
    results = [proc.communicate(timeout=60) for proc in procs]
    for proc, (out, err) in zip(procs, results):
        assert proc.returncode == 0, err
    assert sum(int(out) for out, _ in results) > 4
    assert sorted(p.name for p in run.iterdir()) == []


def test_a_command_refused_before_writing_leaves_no_folder(tmp_path, capsys):
    """`kerasrl train --out NEW` holds NEW from the start; refused (a setting misspelt), it leaves
    no empty run folder behind."""
    from kerasrl.cli import main

    assert main(["train", "dqn", "--out", str(tmp_path / "new"), "--set", "learning_rat=0.1",
                 "--no-progress"]) == 2
    assert "learning_rat" in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == []
    for flag, unit in (("--checkpoint-every", "env steps"), ("--keep-last", "checkpoints"),
                       ("--eval-episodes", "episodes")):  # before: after training, or a folder left
        assert main(["train", "dqn", "--out", str(tmp_path / "new"), "--steps", "100", flag, "0", "--no-progress"]) == 2
        assert f"kerasrl: error: {flag} must be a positive number of {unit}, got 0." in capsys.readouterr().err
        assert sorted(tmp_path.iterdir()) == []


def test_progress_where_output_is_not_a_terminal_is_a_line_per_log_interval(capsys):
    """In a log file (nohup, Slurm, CI) a redrawn bar would be a line per redraw: there fit prints
    a line per log interval instead, as Keras's fit prints one per epoch."""
    import kerasrl

    agent = kerasrl.DQN("CartPole-v1", seed=0, learning_starts=100, target_update_interval=50)
    agent.fit(600, log_interval=200)  # pytest's captured stderr is not a terminal
    err = capsys.readouterr().err
    progress = [line for line in err.splitlines() if " steps (" in line]
    assert [line.split(" ")[0] for line in progress] == ["200/600", "400/600", "600/600"], err
    assert all("steps/s" in line and "left: ep=" in line and "ret100=" in line for line in progress)
    assert "\r" not in err and "step/s]" not in err  # no bar redraws
