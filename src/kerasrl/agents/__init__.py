"""Agents: one algorithm per file, each imported on first access (the names are read from
kerasrl.registry.ALGORITHMS)."""

import importlib

from kerasrl import registry

_LAZY = {name: module for name, module in registry.public_names().items()
         if module.startswith("kerasrl.agents.")}
_LAZY["Agent"] = "kerasrl.agents.base"

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kerasrl.agents' has no attribute {name!r}")
