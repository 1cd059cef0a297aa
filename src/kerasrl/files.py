"""kerasrl's folders on disk: written atomically, listed in a manifest with checksums, verified
before anything in them is parsed; and the checkpoint folders of a run, found and pruned.

Checkpoints (kerasrl.checkpoint) and policy folders (kerasrl.policy_io) are both written through
`atomic_folder` and `write_manifest`, and read through `read_manifest` and `verify_files`. Nothing
here unpickles or evaluates code: JSON is parsed, `.npz` files are read with allow_pickle=False.
A folder appears under its final name only complete: it is written beside it under a temporary
name, fsynced, and renamed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from kerasrl import __version__
from kerasrl.runfiles import CHECKPOINT_NAME, CHECKPOINT_PREFIX, MANIFEST, list_checkpoints, writing

FORMAT_VERSION = 1
CHECKPOINT_FORMAT = "kerasrl-checkpoint"
POLICY_FORMAT = "kerasrl-policy"


class CheckpointError(ValueError):
    """A checkpoint or policy folder is missing, damaged, of an unknown version, or unsafe."""


# -- atomic folders, checksums, manifests ----------------------------------------------------
def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_path(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_folder(path, what: str = "folder"):
    """Yield a temporary folder beside `path`; on success it replaces `path` in one rename.

    Files are fsynced, then the folder, then the parent, so that after a crash `path` is either
    the previous complete folder or the new complete one, never a mix. (Replacing an existing
    folder takes two renames: for a moment only the old one exists, under a hidden backup name;
    `ckpt-<step>` folders are always new names.) A write that fails (no space, no permission, a
    read-only filesystem) removes the temporary folder and raises `WriteError` naming `what` and
    `path`, and for a `ckpt-<step>` folder the newest complete checkpoint beside it.
    """
    path = Path(path)
    refusal = not_replaceable(path, MANIFEST, "a kerasrl checkpoint or policy")
    if refusal:
        raise CheckpointError(f"Not saving the {what} to {path}: {refusal}, and the save would replace it. "
                              f"Save to a new path (or to an earlier kerasrl save, which it replaces), or remove "
                              f"{path} yourself if it is yours to lose.")
    checkpoints = run = None
    if CHECKPOINT_NAME.match(path.name):  # a failed checkpoint of a run: resume from its newest sibling
        checkpoints = path.parent
        run = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    with writing(what, path, checkpoints=checkpoints, run=run):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
        try:
            yield tmp
            for file in tmp.iterdir():
                _fsync_path(file)
            _fsync_path(tmp, directory=True)
            backup = None
            if path.exists():
                backup = path.parent / f".{path.name}.old-{os.getpid()}"
                os.replace(path, backup)
            os.replace(tmp, path)
            _fsync_path(path.parent, directory=True)
            if backup is not None:
                shutil.rmtree(backup, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def not_replaceable(path, marker: str, kind: str) -> str | None:
    """What `path` is, where a folder written there must not replace it, or None: only an earlier
    folder of the same kind (`kind`, holding the file `marker`) or an empty folder is replaced,
    never a user's file or folder (`agent.save("~/results")` would otherwise delete all in it)."""
    path = Path(path)
    if not path.exists():
        return None
    if not path.is_dir():
        return "it is a file"
    names = sorted(entry.name for entry in path.iterdir())
    if not names or marker in names:
        return None
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return f"it is a folder that is not {kind} (it holds {shown})"


def write_json(path: Path, value) -> None:
    """`value` as JSON (numpy scalars and arrays as numbers and lists)."""
    path.write_text(json.dumps(value, indent=1, default=_json_default, allow_nan=True))


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON data")


def write_manifest(folder: Path, header: dict[str, Any]) -> None:
    """The manifest of every file now in `folder`, with the format version; written last."""
    files = {file.name: {"bytes": file.stat().st_size, "sha256": sha256_file(file)}
             for file in sorted(folder.iterdir()) if file.name != MANIFEST}
    write_json(folder / MANIFEST, {**header, "format_version": FORMAT_VERSION,
                                   "kerasrl_version": __version__, "files": files})


def read_manifest(folder, formats=(CHECKPOINT_FORMAT, POLICY_FORMAT)) -> dict[str, Any]:
    """The manifest of a checkpoint or policy folder, with its format and version checked."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"No such checkpoint or policy folder: {folder}")
    path = folder / MANIFEST
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: {folder} is not a complete kerasrl checkpoint "
                              f"or policy folder (it may be an interrupted write).")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} is damaged (not valid JSON: {error}).") from None
    if isinstance(manifest, dict) and manifest.get("format") == POLICY_FORMAT and formats == (CHECKPOINT_FORMAT,):
        raise CheckpointError(f"{folder} is a policy folder (the policy alone, without its training state): load it "
                              f"with kerasrl.load_policy(path). Loading an agent to train on takes a checkpoint "
                              f"(agent.save(path), or fit(checkpoint_every=...)).")
    if not isinstance(manifest, dict) or manifest.get("format") not in formats:
        raise CheckpointError(f"{path} is not a kerasrl manifest of format "
                              f"{' or '.join(formats)} (format: {manifest.get('format')!r}).")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise CheckpointError(
            f"{folder} has format version {version!r}; this kerasrl "
            f"({__version__}) reads versions up to {FORMAT_VERSION}. It was written by "
            f"kerasrl {manifest.get('kerasrl_version', '?')}: upgrade kerasrl to load it.")
    if not isinstance(manifest.get("files"), dict):
        raise CheckpointError(f"{path} lists no files.")
    return manifest


def verify_files(folder, manifest: dict[str, Any], names) -> None:
    """Check that each named file is listed, present, of its size, and of its sha256."""
    folder = Path(folder)
    for name in names:
        entry = manifest["files"].get(name)
        path = folder / name
        if entry is None:
            raise CheckpointError(f"{folder / MANIFEST} does not list {name}: the folder is "
                                  f"incomplete or was not written by this kind of save.")
        if not path.is_file():
            raise CheckpointError(f"{path} is missing (listed in the manifest).")
        size = path.stat().st_size
        if size != entry.get("bytes"):
            raise CheckpointError(f"{path} has {size} bytes, the manifest says {entry.get('bytes')}: "
                                  f"the file is truncated or was changed. Refusing to read it.")
        if sha256_file(path) != entry.get("sha256"):
            raise CheckpointError(f"{path} does not match its sha256 checksum in the manifest: "
                                  f"the file is damaged or was changed. Refusing to read it.")


def read_json(path: Path):
    """The JSON in `path`; CheckpointError if it is not valid JSON."""
    try:
        return json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path} is not valid JSON: {error}") from None


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """All arrays of an .npz file, refusing Python objects (allow_pickle=False)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except ValueError as error:
        if "allow_pickle" in str(error):
            raise CheckpointError(
                f"{path} holds Python objects (pickled data); kerasrl never unpickles. Refusing "
                f"to read it.") from None
        raise CheckpointError(f"{path} could not be read as numpy arrays: {error}") from None
    except (OSError, zipfile.BadZipFile, EOFError) as error:
        raise CheckpointError(f"{path} could not be read as an .npz file: {error}") from None


# -- the checkpoints of a run ---------------------------------------------------------------
def checkpoint_path(directory, step: int) -> Path:
    """The folder of the checkpoint at `step` in a checkpoint directory (`ckpt-<9 digits>`)."""
    return Path(directory) / f"{CHECKPOINT_PREFIX}{step:09d}"


def prune_checkpoints(directory, keep_last: int | None) -> None:
    """Keep the newest `keep_last` checkpoints; remove leftovers of interrupted writes."""
    directory = Path(directory)
    if keep_last is not None and keep_last >= 1:
        for _, old in list_checkpoints(directory)[:-keep_last]:
            # Hidden first (one rename), then deleted: a crash mid-delete leaves no folder that
            # looks like a checkpoint but lacks files.
            with writing("checkpoint folder", directory, checkpoints=directory,
                         run=directory.parent if directory.name == "checkpoints" else None):
                os.replace(old, directory / f".{old.name}.del-{os.getpid()}")
    for child in directory.glob(f".{CHECKPOINT_PREFIX}*"):
        if ".tmp-" in child.name or ".del-" in child.name:
            shutil.rmtree(child, ignore_errors=True)


def find_checkpoint(path) -> Path:
    """A checkpoint folder itself, or the newest one of a checkpoint directory or run folder."""
    path = Path(path)
    if (path / MANIFEST).is_file():
        return path
    for directory in (path / "checkpoints", path):
        found = list_checkpoints(directory)
        if found:
            return found[-1][1]
    raise CheckpointError(f"No complete checkpoint in {path} (looked for {MANIFEST}, and for "
                          f"{CHECKPOINT_PREFIX}<step> folders in {path / 'checkpoints'} and {path}).")
