"""Images in a terminal: an `rgb_array` frame as lines of coloured half blocks (`kerasrl play`).

Each character cell shows two pixels, one above the other: U+2580 (upper half block) in the upper
pixel's colour on the lower pixel's background, as 24-bit colour escapes, which today's terminals
draw (xterm, GNOME Terminal, iTerm2, Windows Terminal, VS Code). Numpy only.
"""

from __future__ import annotations

import numpy as np

UPPER_HALF = "\u2580"
RESET = "\x1b[0m"


def shrink(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """`frame` (H, W, 3) resized to (height, width, 3) uint8 by averaging the pixels each new pixel
    covers (a thin line, as CartPole's track, stays as a shade); height <= H and width <= W."""
    frame = np.asarray(frame)[..., :3].astype(np.float64)
    rows = np.linspace(0, frame.shape[0], height + 1).astype(int)  # (height + 1,) bin edges
    columns = np.linspace(0, frame.shape[1], width + 1).astype(int)
    sums = np.add.reduceat(np.add.reduceat(frame, rows[:-1], axis=0), columns[:-1], axis=1)
    counts = np.diff(rows)[:, None, None] * np.diff(columns)[None, :, None]
    return np.rint(sums / counts).astype(np.uint8)


def terminal_image(frame, columns: int = 80, rows: int = 24) -> str:
    """An RGB(A) uint8 frame (height, width, 3 or 4) as text of at most `columns` x `rows`
    characters, its aspect kept (square pixels, two to a character) and never enlarged."""
    frame = np.asarray(frame)
    if frame.ndim != 3 or frame.shape[-1] not in (3, 4) or frame.dtype != np.uint8:
        raise ValueError(f"Expected an RGB(A) uint8 image (height, width, 3 or 4), got {frame.dtype} "
                         f"{frame.shape}: render_mode='rgb_array' should give one.")
    if columns < 1 or rows < 1:
        raise ValueError(f"columns and rows must be at least 1, got {columns} and {rows}.")
    height, width = frame.shape[:2]
    scale = max(width / columns, height / (2 * rows), 1.0)  # frame pixels per shown pixel
    shown_height = min(height, max(1, round(height / scale)))
    shown_width = min(width, max(1, round(width / scale)))
    image = shrink(frame, shown_height, shown_width)
    if shown_height % 2:  # the last line's lower half: the terminal's own background
        image = np.concatenate([image, np.zeros((1, shown_width, 3), np.uint8)])
        last_lower_is_blank = True
    else:
        last_lower_is_blank = False
    lines = []
    for index, (upper, lower) in enumerate(zip(image[0::2].tolist(), image[1::2].tolist())):
        blank = last_lower_is_blank and index == len(image) // 2 - 1
        parts, colours = [], None
        for top, bottom in zip(upper, lower):
            if (top, bottom) != colours:  # escapes only where the colours change
                background = "\x1b[49m" if blank else "\x1b[48;2;{};{};{}m".format(*bottom)
                parts.append("\x1b[38;2;{};{};{}m".format(*top) + background)
                colours = (top, bottom)
            parts.append(UPPER_HALF)
        lines.append("".join(parts) + RESET)
    return "\n".join(lines)
