"""Run folders: one training process writes into a folder at a time, and a write that fails says so.

`RunLock(folder)` holds a run folder for this process while it trains: `fit(log_dir=...)`, its
checkpoint folder, the `RunLogger` that writes the logs and `kerasrl train` / `train --resume` take
it, so a second training into the same folder (a double launch, a scheduler's retry) is refused at
once with `RunLockedError`, naming the holder. The lock is `fcntl.flock` on `FOLDER/kerasrl.lock`:
the kernel releases it when its process ends, however it ends, so the lock file of a process that
was killed is stale by construction and the next training takes it over. The file names its holder
(process id, host, start time, command) for the message. Within one process the lock is
re-entrant (the CLI holds the run folder around `fit`, which takes it again).

`WriteError` is what a checkpoint, log, policy or export that cannot be written (no space left, no
permission, a read-only filesystem) raises: an OSError whose message names the path, the cause,
what to do, and the last complete checkpoint to resume from. Writes are atomic (see
kerasrl.checkpoint), so a failed write loses nothing already saved.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import secrets
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # not on Windows: the exclusive-create lock below is used there
    fcntl = None

LOCK_NAME = "kerasrl.lock"

_REMEDIES = {
    errno.ENOSPC: "free space on that filesystem, or write to another one",
    errno.EDQUOT: "free space within your disk quota, or write to another filesystem",
    errno.EACCES: "this user may not write there: fix the folder's permissions, or write elsewhere",
    errno.EPERM: "this user may not write there: fix the folder's permissions, or write elsewhere",
    errno.EROFS: "the filesystem is read-only: write to another one",
    errno.EFBIG: "the file would pass this process's file size limit (ulimit -f)",
}
# A checkpoint is a folder `ckpt-<step>` with this manifest, written last (kerasrl.checkpoint).
MANIFEST = "manifest.json"
CHECKPOINT_PREFIX = "ckpt-"
CHECKPOINT_NAME = re.compile(rf"^{CHECKPOINT_PREFIX}(\d+)$")


def list_checkpoints(directory) -> list[tuple[int, Path]]:
    """Complete checkpoints (`ckpt-<step>` folders with a manifest) in `directory`, by step."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for child in directory.iterdir():
        match = CHECKPOINT_NAME.match(child.name)
        if match and (child / MANIFEST).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


class WriteError(OSError):
    """A checkpoint, log, policy or export could not be written (no space left, no permission, a
    read-only filesystem). `errno` and `strerror` are the cause's; `path` is what was being
    written; `last_checkpoint` (a Path or None) is the newest complete checkpoint of the run, from
    which training resumes. Nothing already saved is lost: writes are atomic."""

    def __init__(self, what: str, path, cause: OSError | None = None, *, checkpoints=None,
                 run=None):
        cause = cause if cause is not None else OSError("unknown cause")
        if cause.errno is not None and cause.strerror:
            super().__init__(cause.errno, cause.strerror)
        else:
            super().__init__(str(cause))
        self.what = what
        self.path = Path(path)
        self.filename = str(self.path)
        self.cause = f"{cause.strerror or cause}"
        self.last_checkpoint: Path | None = None
        self.checkpoints: Path | None = None
        self.run: Path | None = None
        if checkpoints is not None:
            self.locate(checkpoints, run)

    def locate(self, checkpoints, run=None) -> WriteError:
        """Name the newest complete checkpoint in the folder `checkpoints` as the resume point
        (once: the first caller, nearest the failed write, knows best). Returns self."""
        if self.checkpoints is None and checkpoints is not None:
            self.checkpoints = Path(checkpoints)
            self.run = Path(run) if run is not None else None
            found = list_checkpoints(self.checkpoints)
            self.last_checkpoint = found[-1][1] if found else None
        return self

    def __str__(self) -> str:
        code = errno.errorcode.get(self.errno, "") if self.errno is not None else ""
        remedy = _REMEDIES.get(self.errno)
        text = (f"Could not write the {self.what} {self.path}: {self.cause}"
                f"{f' ({code})' if code else ''}{f'; {remedy}' if remedy else ''}.")
        if self.checkpoints is None:
            return f"{text} Nothing already saved is lost (the unfinished write was removed)."
        if self.last_checkpoint is None:
            return (f"{text} There is no complete checkpoint in {self.checkpoints} to resume from "
                    f"(checkpoint_every, --checkpoint-every on the command line, writes them "
                    f"while training).")
        step = CHECKPOINT_NAME.match(self.last_checkpoint.name)
        at = f" (step {int(step.group(1))})" if step else ""
        source = self.run if self.run is not None else self.last_checkpoint
        return (f"{text} Nothing already saved is lost: the last complete checkpoint is "
                f"{self.last_checkpoint}{at}. Resume from it with `kerasrl train --resume "
                f"{source}` (Python: kerasrl.Agent.load({str(source)!r}).fit(total_steps=...)).")

    def __reduce__(self):  # picklable (the constructor's arguments are not OSError's)
        return _rebuild_write_error, (type(self), self.__dict__, self.errno, self.strerror,
                                      self.args)


def _rebuild_write_error(cls, state, code, strerror, args):
    error = cls.__new__(cls)
    OSError.__init__(error, *((code, strerror) if code is not None else args))
    error.__dict__.update(state)
    return error


@contextlib.contextmanager
def writing(what: str, path, *, checkpoints=None, run=None):
    """Turn an OSError raised inside into a WriteError naming `what` and `path` (and, when the
    run's checkpoint folder is given, its last complete checkpoint)."""
    try:
        yield
    except WriteError:
        raise
    except OSError as error:
        raise WriteError(what, path, error, checkpoints=checkpoints, run=run) from error


# -- the run lock -----------------------------------------------------------------------------
class RunLockedError(RuntimeError):
    """A run folder is held by another training process (see RunLock). `holder` is what its lock
    file says: pid, host, since, command (None where it could not be read)."""

    def __init__(self, folder, holder: dict | None, note: str = ""):
        self.folder, self.holder = Path(folder), holder
        if holder:
            who = (f"process {holder.get('pid')} on host {holder.get('host')} since "
                   f"{holder.get('since')}")
            if holder.get("command"):
                who += f" (`{holder['command']}`)"
        else:
            who = "a process whose lock file gives no details"
        super().__init__(
            f"{self.folder} is in use by another training: {who}, which holds "
            f"{self.folder / LOCK_NAME}.{f' {note}' if note else ''} Two trainings in one run "
            f"folder would write over each other's checkpoints and logs. Wait for that one to end "
            f"(or stop it), or write this run to another folder.")


@dataclass
class _Holding:
    fd: int
    count: int
    pid: int
    path: Path
    made_folder: bool  # the folder was made to be held: removed at the end if still empty


_HELD: dict[str, _Holding] = {}
_GUARD = threading.Lock()


class RunLock:
    """Holds the folder `folder` (made if missing) for this process while a training writes into
    it; `RunLockedError` if another process holds it. Re-entrant within a process; a context
    manager, or `acquire()` / `release()`."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.path = self.folder / LOCK_NAME
        self._key: str | None = None

    def acquire(self) -> RunLock:
        if self._key is not None:
            raise RuntimeError(f"This RunLock of {self.folder} is already acquired.")
        made = not self.folder.exists()
        with writing("run folder", self.folder):
            self.folder.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(self.folder)
        with _GUARD:
            held = _HELD.get(key)
            if held is not None and held.pid == os.getpid():  # not a forked child's inherited entry
                held.count += 1
            else:
                with writing("lock file", self.path):
                    fd = _lock(self.folder, self.path)
                _HELD[key] = _Holding(fd, 1, os.getpid(), self.path, made)
        self._key = key
        return self

    def release(self) -> None:
        """Let the folder go (at the last release in this process: the lock file is removed)."""
        if self._key is None:
            return
        key, self._key = self._key, None
        with _GUARD:
            held = _HELD.get(key)
            if held is None or held.pid != os.getpid():
                return
            held.count -= 1
            if held.count > 0:
                return
            del _HELD[key]
            # Removed while still locked: a process that opened the file before this and locks it
            # after sees that the path no longer leads to it, and starts over (see _lock).
            with contextlib.suppress(OSError):
                os.unlink(held.path)
            os.close(held.fd)
            if held.made_folder:  # a run that wrote nothing (a command refused) leaves no folder
                with contextlib.suppress(OSError):
                    held.path.parent.rmdir()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _holder_record() -> bytes:
    return json.dumps({
        "pid": os.getpid(), "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S %z"), "time": time.time(),
        "command": " ".join(Path(sys.argv[0]).name if i == 0 else a
                            for i, a in enumerate(sys.argv))[:300],
        "token": secrets.token_hex(8)}).encode()


def _read_holder(path: Path, wait: bool = True) -> dict | None:
    """What the lock file says (waiting a moment for a holder that has locked but not written)."""
    for _ in range(20 if wait else 1):
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        with contextlib.suppress(ValueError):
            holder = json.loads(text)
            if isinstance(holder, dict):
                return holder
        time.sleep(0.05)
    return None


def _alive(holder: dict) -> bool:
    """Whether the process a lock file names may still run (a process on another host might)."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return True
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _took_over(folder: Path, holder: dict | None) -> None:
    if holder and holder.get("pid") != os.getpid():
        logging.getLogger("kerasrl").info(
            "Took over the run folder %s from process %s on host %s (since %s), which ended "
            "without releasing it.", folder, holder.get("pid"), holder.get("host"),
            holder.get("since"))


def _lock(folder: Path, path: Path) -> int:
    """An open descriptor of `path` that this process holds the lock of; RunLockedError if another
    process holds it."""
    if fcntl is not None and not _NO_FLOCK:
        for _ in range(100):
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:  # the folder's last holder removed it, empty, meanwhile
                folder.mkdir(parents=True, exist_ok=True)
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                holder = _read_holder(path)
                note = ""
                if holder and not _alive(holder):
                    note = (f"Process {holder.get('pid')} is no longer running, but a process it "
                            f"started (env workers, a child it forked) still holds the lock: end "
                            f"that process.")
                raise RunLockedError(folder, holder, note) from None
            except OSError as error:
                os.close(fd)
                if error.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    raise
                break  # this filesystem has no locks: the exclusive-create lock below
            # The holder before may have removed the file between our open and our lock: then the
            # lock we hold is on a file nobody else will open. Start over on the path's file.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            stale = _read_holder(path, wait=False)  # left by a process that was killed
            os.ftruncate(fd, 0)
            os.pwrite(fd, _holder_record(), 0)
            _took_over(folder, stale)
            return fd
        else:
            raise RunLockedError(folder, _read_holder(path), "Its lock file keeps being replaced.")
    return _lock_exclusive(folder, path)


_NO_FLOCK = False  # tests set it to run the exclusive-create lock


def _lock_exclusive(folder: Path, path: Path) -> int:
    """The lock for filesystems without flock: the lock file created with O_EXCL; one naming a
    process of this host that is gone is stale, and taken over by moving it aside under a unique
    name and checking that the one moved is the one judged stale (else it is put back). A narrow
    race remains (a third process creating a lock while a wrongly moved one is put back); flock
    has none."""
    for _ in range(100):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileNotFoundError:  # the folder's last holder removed it, empty, meanwhile
            folder.mkdir(parents=True, exist_ok=True)
            continue
        except FileExistsError:
            holder = _read_holder(path)
            if holder is None and path.exists():
                raise RunLockedError(folder, None, "Its lock file is empty or damaged: if no "
                                     "training runs there, delete it.") from None
            if holder is None:
                continue  # removed meanwhile: try again
            if _alive(holder):
                note = ("" if holder.get("host") == socket.gethostname() else
                        f"This filesystem has no locks (flock), so a process of another host is "
                        f"taken to run until its lock file goes: if it no longer runs, delete "
                        f"{path}.")
                raise RunLockedError(folder, holder, note) from None
            aside = path.with_name(f".{LOCK_NAME}.stale-{os.getpid()}-{secrets.token_hex(4)}")
            try:
                os.rename(path, aside)
            except FileNotFoundError:
                continue
            moved = _read_holder(aside, wait=False)
            if moved != holder:  # another process took it over first: give it back
                with contextlib.suppress(FileExistsError):
                    os.link(aside, path)
                os.unlink(aside)
                raise RunLockedError(folder, moved) from None
            os.unlink(aside)
            _took_over(folder, holder)
            continue
        os.write(fd, _holder_record())
        return fd
    raise RunLockedError(folder, _read_holder(path), "Its lock file keeps being replaced.")



def hold_run_folders(*folders) -> contextlib.ExitStack:
    """Lock each folder given (None skipped; one inside another given is covered by it) for this
    process: an ExitStack whose `close()` lets them go. RunLockedError if another process holds
    one (those taken before it are let go)."""
    paths = [Path(f).absolute() for f in folders if f is not None]
    held = contextlib.ExitStack()
    try:
        for path in paths:
            if not any(other != path and other in path.parents for other in paths):
                held.enter_context(RunLock(path))
    except BaseException:
        held.close()
        raise
    return held
