"""A TCP proxy for tests: sits between the frontend and a worker's file server.

It can throttle the upload direction (a slow network), count the HTTP PUTs it carried and the
bytes it relayed, and runs on its own event loop in a thread so sync and async tests can use it.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time


class ThrottlingProxy:
    def __init__(self, upstream_port: int, *, upload_bytes_per_s: float | None = None) -> None:
        self.upstream_port = upstream_port
        self.upload_bytes_per_s = upload_bytes_per_s
        self.puts = 0
        self.upload_bytes = 0
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._server: asyncio.base_events.Server | None = None

    def __enter__(self) -> ThrottlingProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port)
        )
        self._ready.set()
        self._loop.run_forever()
        self._server.close()
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(
            self._pipe(reader, up_writer, upload=True),
            self._pipe(up_reader, writer, upload=False),
            return_exceptions=True,
        )

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upload: bool
    ) -> None:
        tail = b""
        started = time.monotonic()
        moved = 0
        try:
            while data := await reader.read(64 * 1024):
                if upload:
                    window = tail + data
                    self.puts += window.count(b"PUT /v1/files/") - tail.count(b"PUT /v1/files/")
                    tail = window[-16:]
                    self.upload_bytes += len(data)
                    moved += len(data)
                    if self.upload_bytes_per_s:
                        ahead_s = moved / self.upload_bytes_per_s - (time.monotonic() - started)
                        if ahead_s > 0:
                            await asyncio.sleep(ahead_s)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
