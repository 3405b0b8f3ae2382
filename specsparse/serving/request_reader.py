"""Reading a request from a socket under one deadline, so that a slow client cannot hold a connection."""

from __future__ import annotations

import io
import socket
import time


class HeadersTooLargeError(ValueError):
    """The request line plus headers exceed the reader's head limit."""


class RequestReader(io.RawIOBase):
    """A socket's input with one deadline for the whole request: each read may wait only until
    `deadline`, so a client trickling bytes cannot hold the socket past it. Until `head_done()`,
    at most `head_limit` bytes are read (a head needing more raises HeadersTooLargeError)."""

    def __init__(self, sock: socket.socket, timeout_s: float, head_limit: int) -> None:
        super().__init__()
        self.sock, self.deadline, self.head_left = sock, time.monotonic() + timeout_s, head_limit
        self.timed_out = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.timed_out = True
            raise TimeoutError("request deadline passed")
        if self.head_left is not None:
            if self.head_left <= 0:
                raise HeadersTooLargeError
            buffer = memoryview(buffer)[:self.head_left]
        self.sock.settimeout(remaining)
        try:
            n = self.sock.recv_into(buffer)
        except TimeoutError:
            self.timed_out = True
            raise
        if self.head_left is not None:
            self.head_left -= n
        return n

    def head_done(self) -> None:
        self.head_left = None

    @property
    def in_head(self) -> bool:
        return self.head_left is not None

