"""A port that is in use, for the tests of what a listener does when its port is taken.

    taken, port = taken_port()
    try:
        ...  # start something on 127.0.0.1:port
    finally:
        taken.close()
"""

from __future__ import annotations

import socket


def taken_port() -> tuple[socket.socket, int]:
    """A listening socket on 127.0.0.1 (so its port is in use) and its port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock, sock.getsockname()[1]
