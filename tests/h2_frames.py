"""A bare HTTP/2 client that only watches: it opens a connection to a gRPC server, acks
its SETTINGS and answers its PINGs, and records every frame until the connection ends.

grpc's own clients hide GOAWAY (a channel simply reconnects); this one shows whether a
server ended a connection with GOAWAY and a FIN, or closed or reset it without a word.
Standard library only, so both test environments can use it.
"""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass, field

__all__ = ["GOAWAY", "Frame", "FrameWatcher"]

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_SETTINGS, _PING, GOAWAY = 0x4, 0x6, 0x7
_ACK = 0x1


@dataclass(frozen=True)
class Frame:
    kind: int
    flags: int
    payload: bytes

    @property
    def goaway(self) -> tuple[int, int]:
        """A GOAWAY's (last stream id, error code)."""
        last, code = struct.unpack_from(">II", self.payload)
        return last & 0x7FFFFFFF, code


@dataclass
class FrameWatcher:
    """``start`` connects and watches in a thread; ``join`` waits for the end, which is
    ``"eof"`` (FIN), ``"reset"`` or ``"timeout"``."""

    host: str
    port: int
    frames: list[Frame] = field(default_factory=list)
    end: str = ""

    def start(self, timeout: float = 120.0) -> FrameWatcher:
        self._sock = socket.create_connection((self.host, self.port), timeout=10)
        self._sock.settimeout(timeout)
        self._sock.sendall(_PREFACE + _frame(_SETTINGS, 0, b""))
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the connection did not end"

    def of_kind(self, kind: int) -> list[Frame]:
        return [f for f in self.frames if f.kind == kind]

    def _watch(self) -> None:
        buffer = b""
        try:
            while True:
                chunk = self._sock.recv(65536)
                if not chunk:
                    self.end = "eof"
                    return
                buffer += chunk
                while len(buffer) >= 9:
                    length = int.from_bytes(buffer[:3], "big")
                    if len(buffer) < 9 + length:
                        break
                    frame = Frame(buffer[3], buffer[4], buffer[9 : 9 + length])
                    buffer = buffer[9 + length :]
                    self.frames.append(frame)
                    self._answer(frame)
        except ConnectionResetError:
            self.end = "reset"
        except TimeoutError:
            self.end = "timeout"
        finally:
            self._sock.close()

    def _answer(self, frame: Frame) -> None:
        if frame.flags & _ACK:
            return
        if frame.kind == _SETTINGS:
            self._sock.sendall(_frame(_SETTINGS, _ACK, b""))
        elif frame.kind == _PING:
            self._sock.sendall(_frame(_PING, _ACK, frame.payload))


def _frame(kind: int, flags: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + b"\0\0\0\0" + payload
