"""The web server of `kerasrl watch`: one stepping loop broadcast to every viewer as server-sent
events, and the page's own files, served from the package (nothing from a CDN).

Starlette and uvicorn are imported here only; `kerasrl.watch` imports this module when a server is
made, so that the rest of kerasrl needs neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import resources

try:
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route
except ImportError as error:  # pragma: no cover - the message is what matters
    raise ImportError(
        f"`kerasrl watch` needs Starlette and uvicorn ({error}): pip install 'kerasrl[watch]'"
    ) from None

from kerasrl.watch.curve import MetricsTail
from kerasrl.watch.stepping import step_event

# The page's files: every name the server will send, read once from the package.
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8"}
# The page loads nothing from elsewhere; frames arrive as data: URLs.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; connect-src 'self'; "
                               "object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}
KEEP_ALIVE_S = 15.0
CURVE_POLL_S = 1.0


def static_files() -> dict[str, tuple[bytes, str]]:
    """{file name: (bytes, media type)} of the page's files shipped in kerasrl/watch/static."""
    files = {}
    for entry in resources.files("kerasrl.watch").joinpath("static").iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in STATIC_TYPES:
            files[entry.name] = (entry.read_bytes(), STATIC_TYPES[suffix])
    if "index.html" not in files:
        raise RuntimeError("kerasrl/watch/static/index.html is missing: reinstall kerasrl.")
    return files


def sse(event: str, data) -> bytes:
    """One server-sent event, its data as JSON (NaN and infinities as null)."""
    return f"event: {event}\ndata: {json.dumps(_finite(data), separators=(',', ':'))}\n\n".encode()


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class Hub:
    """One game stepped for everyone: each step is encoded once and queued to every viewer.

    A viewer that falls behind loses its oldest frames rather than holding the game up or
    growing a queue without bound; one that disconnects is dropped when its stream ends.
    """

    def __init__(self, steps, env, *, fps: float, hello: dict, metrics_path=None,
                 queue_size: int = 32, title=None):
        self.steps, self.env, self.fps, self.hello = steps, env, fps, hello
        self.title = title  # () -> what is playing now (a followed run's newest policy)
        self.snake = hello["frame_kind"] == "board"
        self.tail = MetricsTail(metrics_path) if metrics_path is not None else None
        self.curve: list[dict] = []
        self.last_step: bytes | None = None
        self.last_event: dict | None = None
        self.finished: bytes | None = None
        self.viewers: set[asyncio.Queue] = set()
        self.closing = False
        self.queue_size = queue_size
        self.frames = 0
        # The policy and env are used from one thread only (backends and envs need not be
        # thread-safe), and never from the event loop, which keeps serving meanwhile.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kerasrl-watch")
        self._tasks: list[asyncio.Task] = []

    # -- viewers --------------------------------------------------------------------------------
    def subscribe(self) -> asyncio.Queue:
        """A new viewer's queue, holding what it needs to draw the page at once."""
        queue: asyncio.Queue = asyncio.Queue(maxsize=self.queue_size)
        queue.put_nowait(sse("hello", self.hello))
        if self.tail is not None:
            queue.put_nowait(sse("curve", {"reset": True, "points": self.curve}))
        if self.last_step is not None:
            queue.put_nowait(self.last_step)
        if self.finished is not None:
            queue.put_nowait(self.finished)
        if self.closing:
            queue.put_nowait(None)
        self.viewers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue) -> None:
        self.viewers.discard(queue)

    def publish(self, message: bytes | None) -> None:
        for queue in list(self.viewers):
            if queue.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    queue.get_nowait()
            queue.put_nowait(message)

    # -- the loops ------------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._play())]
        if self.tail is not None:
            self._tasks.append(asyncio.create_task(self._follow_curve()))

    def close_streams(self) -> None:
        """End every viewer's stream (the server is stopping: it waits for open responses)."""
        self.closing = True
        self.publish(None)

    async def stop(self) -> None:
        self.close_streams()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._executor.shutdown(wait=True)

    def _next_event(self):
        step = next(self.steps, None)
        if step is None:
            return None
        event = step_event(self.env, step, self.snake)
        if self.title is not None:
            event["title"] = self.title()
        return event

    async def _play(self) -> None:
        loop = asyncio.get_running_loop()
        period = 1.0 / self.fps if self.fps > 0 else 0.0
        while True:
            start = time.monotonic()
            try:
                event = await loop.run_in_executor(self._executor, self._next_event)
            except Exception as error:  # shown on the page and here; the server stays up
                message = f"{type(error).__name__}: {error}"
                print(f"kerasrl watch: the game stopped: {message}", file=sys.stderr, flush=True)
                self.finished = sse("failed", {"message": message})
                self.publish(self.finished)
                return
            if event is None:
                self.finished = sse("end", {"episodes": (self.last_event or {}).get("episode", -1) + 1})
                self.publish(self.finished)
                return
            self.frames += 1
            event["number"] = self.frames  # the same number for the same frame, for every viewer
            self.last_event = event
            self.last_step = sse("step", event)
            self.publish(self.last_step)
            await asyncio.sleep(max(0.0, period - (time.monotonic() - start)))

    async def _follow_curve(self) -> None:
        while True:
            points = self.tail.read()
            if self.tail.restarted:
                self.curve = []
            if points or self.tail.restarted:
                self.curve.extend(points)
                self.publish(sse("curve", {"reset": self.tail.restarted, "points": points}))
            await asyncio.sleep(CURVE_POLL_S)


def make_app(hub: Hub) -> Starlette:
    """The Starlette app: the page, its files, the event stream and a JSON state."""
    files = static_files()

    def send_file(name: str) -> Response:
        body, media_type = files[name]
        return Response(body, media_type=media_type, headers=SECURITY_HEADERS)

    async def index(request):
        return send_file("index.html")

    async def static(request):
        # Only the package's own files, by exact name: no path is ever built from the request.
        name = request.path_params["name"]
        if name not in files:
            return Response("Not found", status_code=404, media_type="text/plain")
        return send_file(name)

    async def events(request):
        queue = hub.subscribe()

        async def stream():
            try:
                while True:
                    try:
                        message = await asyncio.wait_for(queue.get(), KEEP_ALIVE_S)
                    except asyncio.TimeoutError:
                        message = b": keep-alive\n\n"
                    if message is None:  # the server is stopping
                        return
                    yield message
            finally:
                hub.unsubscribe(queue)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={**SECURITY_HEADERS, "X-Accel-Buffering": "no"})

    async def state(request):
        return JSONResponse(_finite({"viewers": len(hub.viewers), "frames": hub.frames,
                                     "finished": hub.finished is not None,
                                     "curve_points": len(hub.curve), **hub.hello,
                                     "last": None if hub.last_event is None else {
                                         k: v for k, v in hub.last_event.items() if k != "frame"}}),
                            headers=SECURITY_HEADERS)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        hub.start()
        try:
            yield
        finally:
            await hub.stop()

    return Starlette(routes=[Route("/", index), Route("/static/{name}", static),
                             Route("/events", events), Route("/state", state)],
                     lifespan=lifespan)


def make_server(hub: Hub, app: Starlette, config_options: dict):
    """A uvicorn server that ends the event streams before waiting for open responses (which an
    endless stream never finishes on its own)."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets=None):
            hub.close_streams()
            await super().shutdown(sockets)

    return Server(uvicorn.Config(app, **config_options))
