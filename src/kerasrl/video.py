"""Videos of a policy's episodes: `kerasrl evaluate RUN --video out.mp4` (or `.gif`).

Frames are captured by Gymnasium's `RecordVideo` (every episode, from the frame after `reset`
to the last step's) and written by imageio, as one file for all the episodes: `.mp4` through
imageio-ffmpeg (H.264, which needs even frame sides: an odd side gets one row or column of
edge pixels), `.gif` through pillow.

    env = recording_env("kerasrl/Snake-v0", {}, "snake.gif")
    ... play episodes in env (each finished episode is written to the file at once) ...
    env.save()    # finishes snake.gif; returns the number of frames written

imageio is imported lazily (`pip install 'kerasrl[video]'`).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

FORMATS = (".mp4", ".gif")


def check_video_path(path) -> Path:
    """`path` if it names a format kerasrl writes, else a ValueError naming them."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ValueError(f"Cannot write a video to {path}: name a .mp4 or .gif file.")
    return path


def _record_video_class():
    from gymnasium.wrappers import RecordVideo

    class EpisodeRecorder(RecordVideo):
        """RecordVideo that keeps the frames of every episode for one file written by `save`
        (RecordVideo itself writes one file per episode with moviepy)."""

        def __init__(self, env, path: Path, fps: int | None = None):
            with warnings.catch_warnings():
                # RecordVideo warns that it may overwrite videos in an existing folder; it writes
                # none here (stop_recording is replaced), the file is `path`.
                warnings.simplefilter("ignore")
                super().__init__(env, video_folder=str(path.parent), episode_trigger=lambda _: True,
                                 fps=fps, disable_logger=True, gc_trigger=None)
            self.path = path
            self.frames_written = 0
            self.recorded_episodes = 0
            self._writer = None

        def stop_recording(self):
            # Each finished episode goes to the file at once: only one episode's frames are ever
            # held (20 CartPole episodes of 500 frames would be 7 GB in memory).
            if self.recorded_frames:
                if self._writer is None:
                    self._writer = open_writer(self.path, self.frames_per_sec)
                for frame in self.recorded_frames:
                    self._writer.append_data(frame)
                self.frames_written += len(self.recorded_frames)
            self.recorded_frames = []
            self.recording = False
            self._video_name = None
            self.recorded_episodes += 1

        def save(self) -> int:
            """Finish the file with the episodes played so far; the number of frames written."""
            if self.recording:  # the episode in progress (e.g. one cut short by a step limit)
                self.stop_recording()
            if self._writer is None:
                raise ValueError(f"No frame to write to {self.path}: no episode was played.")
            self._writer.close()
            self._writer = None
            return self.frames_written

        def close(self):
            super().close()
            if self._writer is not None:  # closed without save(): finish the file anyway
                self._writer.close()
                self._writer = None

    return EpisodeRecorder


def recording_env(env_id: str, env_kwargs: dict, path, fps: int | None = None):
    """`gymnasium.make(env_id, render_mode="rgb_array", **env_kwargs)` wrapped to record every
    episode; its `save()` writes them to `path` (.mp4 or .gif) at `fps` (default: the env's
    `render_fps`, else 30)."""
    from kerasrl.watch.stepping import make_render_env

    path = check_video_path(path)
    _imageio()  # fail before playing, not after
    env = make_render_env(env_id, env_kwargs, ("rgb_array",), "--video records 'rgb_array' frames")
    return _record_video_class()(env, path, fps)


def _imageio():
    try:
        import imageio.v2 as imageio
    except ImportError:
        raise ImportError("Writing videos needs imageio: pip install 'kerasrl[video]'.") from None
    return imageio


def _even_sides(frame: np.ndarray) -> np.ndarray:
    """The frame padded by edge pixels to even height and width (H.264's 4:2:0 needs them)."""
    height, width = frame.shape[:2]
    return np.pad(frame, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge")


class _Writer:
    """Frames appended one by one to a video file: `append_data(frame)`, then `close()`."""

    def __init__(self, path: Path, fps: float):
        imageio = _imageio()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._mp4 = path.suffix.lower() == ".mp4"
        if self._mp4:
            try:
                import imageio_ffmpeg  # noqa: F401
            except ImportError:
                raise ImportError("Writing .mp4 needs imageio-ffmpeg: pip install "
                                  "'kerasrl[video]', or write a .gif (pillow only).") from None
            # macro_block_size=2 stops imageio from resizing frames to multiples of 16.
            self._writer = imageio.get_writer(path, format="FFMPEG", mode="I", fps=fps,
                                              codec="libx264", pixelformat="yuv420p",
                                              macro_block_size=2, ffmpeg_log_level="error")
        else:
            # pillow's GIF writer takes each frame's duration in milliseconds; loop=0 repeats
            # forever. It keeps the frames until close: GIFs are for short clips.
            self._writer = imageio.get_writer(path, format="GIF", mode="I",
                                              duration=1000.0 / fps, loop=0)

    def append_data(self, frame) -> None:
        frame = np.asarray(frame, dtype=np.uint8)
        self._writer.append_data(_even_sides(frame) if self._mp4 else frame)

    def close(self) -> None:
        self._writer.close()


def open_writer(path, fps: float = 30.0) -> _Writer:
    """A writer of `path` (.mp4 or .gif) at `fps`: `append_data(frame)` for each [height, width,
    3] uint8 frame, then `close()`."""
    return _Writer(check_video_path(path), fps)


def write_video(frames, path, fps: float = 30.0) -> Path:
    """Write `frames` (each [height, width, 3] uint8) to `path`: .mp4 (H.264) or .gif."""
    writer = open_writer(path, fps)
    try:
        for frame in frames:
            writer.append_data(frame)
    finally:
        writer.close()
    return Path(path)


def read_video(path) -> np.ndarray:
    """Every frame of a video written by `write_video`, shape [frames, height, width, 3] uint8."""
    imageio = _imageio()
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"No such video: {path}")
    if path.suffix.lower() == ".gif":
        frames = imageio.mimread(path, format="GIF", memtest=False)
        return np.stack([np.asarray(f)[..., :3] for f in frames])
    with imageio.get_reader(path, format="FFMPEG") as reader:
        return np.stack([np.asarray(f) for f in reader])
