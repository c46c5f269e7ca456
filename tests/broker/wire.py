"""A tiny blocking Kafka wire client for tests: send kio requests or raw bytes, read frames."""

from __future__ import annotations

import socket
import struct

from databus.protocol.framing import decode_response, encode_request


class WireClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        """The next response frame without its size prefix; ConnectionError on EOF."""
        (size,) = struct.unpack(">i", self._read_exact(4))
        return self._read_exact(size)

    def _read_exact(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(n - got)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def send(self, body, client_id: str | None = "wire-test") -> int:
        self._correlation += 1
        self.send_raw(encode_request(body, self._correlation, client_id))
        return self._correlation

    def request(self, body, client_id: str | None = "wire-test"):
        """Send a kio request and decode its response (checking the correlation id)."""
        correlation = self.send(body, client_id)
        got, response = decode_response(self.read_frame(), body.__api_key__, body.__version__)
        assert got == correlation
        return response

    def is_closed_by_peer(self) -> bool:
        """True if the broker closed this connection (EOF or reset) within the timeout."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
