"""Compressed request bodies and responses, as Triton's HTTP frontend supports them.

Requests: ``Content-Encoding: gzip`` or ``deflate`` (zlib-wrapped, as HTTP and
tritonclient use it; a raw deflate stream is accepted too); the inflated size is capped
by the body limit, so a small compressed body cannot expand without bound. Responses:
``Accept-Encoding`` picks gzip, deflate or identity by weight, first one winning a tie,
as Triton's CompressionTypeUsed does.
"""

from __future__ import annotations

import zlib

from .errors import GatewayError

__all__ = ["choose_encoding", "compress", "decompress"]

_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ENCODINGS = ("identity", "gzip", "deflate")


def decompress(body: bytes, encoding: str | None, limit: int) -> bytes:
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


def _inflate(body: bytes, wbits: int, limit: int, name: str) -> bytes:
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise GatewayError(400, f"malformed {name} request body: {exc}") from None
    if len(out) > limit:
        raise GatewayError(
            413,
            f"request body inflates to more than the gateway's limit of {limit} bytes "
            "(--http-max-body-bytes)",
        )
    if not inflater.eof:
        raise GatewayError(400, f"malformed {name} request body: truncated stream")
    return out


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
