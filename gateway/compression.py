"""Compressed request bodies and responses, as Triton's HTTP frontend supports them.

Requests: ``Content-Encoding: gzip`` or ``deflate`` (zlib-wrapped, as HTTP and
tritonclient use it; a raw deflate stream is accepted too); gzip bodies may hold several
members. The inflated size is capped by the body limit while inflating: output comes in
1 MiB pieces and the count stops at the limit, so a small compressed body (a "bomb")
costs at most the limit in memory, never the limit twice over; and a gzip body whose
trailer announces more than the limit (its last member's ISIZE) is refused before any
inflating (when that size is one the body could hold: a truncated body's last bytes are
no trailer). Responses: ``Accept-Encoding`` picks gzip, deflate or identity by weight,
first one winning a tie, as Triton's CompressionTypeUsed does.
"""

from __future__ import annotations

import zlib

from .errors import GatewayError

__all__ = ["choose_encoding", "compress", "decompress"]

_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ENCODINGS = ("identity", "gzip", "deflate")


def decompress(body: bytes | bytearray, encoding: str | None, limit: int) -> bytes | bytearray:
    """The body as sent, inflated when it is gzip or deflate encoded."""
    name = (encoding or "identity").strip().lower()
    if name == "identity" or not name:
        return body
    if name == "gzip":
        return _inflate(body, _GZIP_WBITS, limit, "gzip")
    if name == "deflate":
        try:
            return _inflate(body, zlib.MAX_WBITS, limit, "deflate")
        except GatewayError as exc:
            if exc.status != 400:
                raise
            return _inflate(body, -zlib.MAX_WBITS, limit, "deflate")
    raise GatewayError(
        415,
        f"Unsupported Content-Encoding {encoding!r}; supported: gzip, deflate, identity",
        headers=(("accept-encoding", "gzip, deflate"),),
    )


_PIECE = 1 << 20  # inflated bytes per step: the limit is checked after each
_MAX_RATIO = 1032  # deflate's best: no stream inflates more than this per byte


def _too_large(limit: int) -> GatewayError:
    return GatewayError(
        413,
        f"request body inflates to more than the gateway's limit of {limit} bytes "
        "(--http-max-body-bytes)",
    )


def _inflate(body: bytes | bytearray, wbits: int, limit: int, name: str) -> bytes:
    gzip = wbits == _GZIP_WBITS
    announced = int.from_bytes(body[-4:], "little") if gzip and len(body) >= 18 else 0
    if limit < announced <= len(body) * _MAX_RATIO:  # a size the body could really hold
        raise _too_large(limit)  # the last member alone says it inflates past the limit
    pieces: list[bytes] = []
    size = 0
    data = body
    inflater = zlib.decompressobj(wbits)
    while True:
        try:
            out = inflater.decompress(data, _PIECE)
        except zlib.error as exc:
            raise GatewayError(400, f"malformed {name} request body: {exc}") from None
        size += len(out)
        if size > limit:
            raise _too_large(limit)
        pieces.append(out)
        data = inflater.unconsumed_tail
        if inflater.eof:
            data = inflater.unused_data
            if not (gzip and data):
                break
            inflater = zlib.decompressobj(wbits)  # the next gzip member
        elif not data and len(out) < _PIECE:  # input used up, stream not finished
            raise GatewayError(400, f"malformed {name} request body: truncated stream")
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def choose_encoding(accept_encoding: str | None) -> str | None:
    """'gzip', 'deflate' or None (identity) for an Accept-Encoding header."""
    if not accept_encoding:
        return None
    best, weight = "identity", 0.0
    for item in accept_encoding.split(","):
        name, _, params = item.partition(";")
        name = name.strip().lower()
        value = 1.0
        params = params.strip()
        if params:
            if not params.startswith("q="):
                continue
            try:
                value = float(params[2:])
            except ValueError:
                continue
        if name in _ENCODINGS and value > weight:
            best, weight = name, value
    return None if best == "identity" else best


def compress(body: bytes, encoding: str) -> bytes:
    """gzip or zlib-wrapped deflate at zlib's default level, as Triton."""
    if encoding == "gzip":
        packer = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, _GZIP_WBITS)
        return packer.compress(body) + packer.flush()
    return zlib.compress(body)
