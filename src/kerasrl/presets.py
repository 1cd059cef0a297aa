"""Named, tested hyperparameter sets: `kerasrl train --preset NAME`.

Each preset names its algorithm, environment, step budget and config fields; anything can be
overridden with `--set name=value`. The presets themselves are in `kerasrl.registry`.
"""

from __future__ import annotations

from kerasrl.registry import PRESETS, Preset

__all__ = ["PRESETS", "Preset", "get_preset", "load_preset_file"]


def get_preset(name: str) -> Preset:
    """The preset called `name`, or read from the preset file `name` (a path ending in .json, as
    `kerasrl tune` writes), or a KeyError that lists the known ones."""
    if name not in PRESETS and name.endswith(".json"):
        return load_preset_file(name)
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"Unknown preset {name!r}. Known presets: {', '.join(sorted(PRESETS))}; "
                       f"or pass a preset file (.json).") from None


def load_preset_file(path) -> Preset:
    """A Preset from a JSON file holding its fields ({"algorithm", "env", "total_steps", "config",
    ...}), as `kerasrl tune` writes its best trial."""
    import json
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"No such preset file: {path}")
    try:
        fields = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"Preset file {path} is not valid JSON: {error}") from None
    known = set(Preset.__dataclass_fields__)
    unknown = sorted(set(fields) - known) if isinstance(fields, dict) else []
    missing = sorted({"algorithm", "env", "total_steps"} - set(fields)) if isinstance(fields, dict) \
        else ["algorithm", "env", "total_steps"]
    if unknown or missing:
        raise ValueError(f"Preset file {path}: " + "; ".join(
            ([f"unknown keys {', '.join(unknown)}"] if unknown else [])
            + ([f"missing keys {', '.join(missing)}"] if missing else []))
            + f". A preset file holds {', '.join(sorted(known))}.")
    config = {k: tuple(v) if isinstance(v, list) else v for k, v in dict(fields.get("config") or {}).items()}
    return Preset(**{**fields, "config": config})
