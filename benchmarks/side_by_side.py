"""What the side-by-side benchmarks against one peer library share (sb3_contrib_peers.py,
tianshou_peers.py): one child process per row, pinned to a core, reporting JSON; and the table of
speed and returns by seed, as ratios to the peer."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path


def child_row(command: list[str], library: str, backend: str | None, seed: int) -> dict:
    """Run one row's child `command` (its last JSON line on stdout is the row's figures), with
    KERAS_BACKEND set to `backend` where given; the figures with the row's names."""
    env = dict(os.environ, **({"KERAS_BACKEND": backend} if backend else {}))
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"{library} {backend} seed {seed} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(lines[-1]), library=library, backend=backend, seed=seed)


def speed_and_returns_table(header: str, rows: list[dict], peer: str, peer_name: str) -> str:
    """`header`, then a row per (library, backend): mean steps/s, its ratio to `peer`'s rows
    (shown as "vs `peer_name`"), the returns by seed and their mean. kerasrl's rows first."""
    import numpy as np

    names = sorted({(r["library"], r["backend"]) for r in rows}, key=lambda k: (k[0] != "kerasrl", str(k[1])))
    peer_speed = np.mean([r["steps_per_s"] for r in rows if r["library"] == peer])
    lines = [header, "",
             f"| library | backend | steps/s (whole run, compile included) | vs {peer_name} | returns by seed | mean |",
             "|---|---|---|---|---|---|"]
    for library, backend in names:
        mine = [r for r in rows if (r["library"], r["backend"]) == (library, backend)]
        speed = np.mean([r["steps_per_s"] for r in mine])
        returns = ", ".join(f"{r['mean_return']:.1f}" for r in sorted(mine, key=lambda r: r["seed"]))
        lines.append(f"| {library} | {backend or 'PyTorch'} | {speed:,.0f} | {speed / peer_speed:.2f}x | {returns} | "
                     f"{np.mean([r['mean_return'] for r in mine]):.1f} |")
    return "\n".join(lines) + "\n"


def report(text: str, rows: list[dict], out: str | None) -> None:
    """Print the table; with `out`, write it there and the rows beside it as .json."""
    print(text)
    if out:
        Path(out).write_text(text)
        Path(out).with_suffix(".json").write_text(json.dumps(rows, indent=1))
