"""A small PNG reader (stdlib only) to tell a rendered page from a blank one."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def _unfilter(kind: int, line: bytearray, previous: bytearray, bpp: int) -> None:
    if kind == 1:
        for i in range(bpp, len(line)):
            line[i] = (line[i] + line[i - bpp]) & 0xFF
    elif kind == 2:
        for i in range(len(line)):
            line[i] = (line[i] + previous[i]) & 0xFF
    elif kind == 3:
        for i in range(len(line)):
            left = line[i - bpp] if i >= bpp else 0
            line[i] = (line[i] + ((left + previous[i]) >> 1)) & 0xFF
    elif kind == 4:
        for i in range(len(line)):
            left = line[i - bpp] if i >= bpp else 0
            upper_left = previous[i - bpp] if i >= bpp else 0
            line[i] = (line[i] + _paeth(left, previous[i], upper_left)) & 0xFF


def read_png(path: Path, max_rows: int | None = None) -> tuple[int, int, list[bytes]]:
    """Width, height and the first ``max_rows`` rows of pixels of an 8-bit RGB(A) PNG."""
    data = path.read_bytes()
    assert data[:8] == SIGNATURE, "not a PNG file"
    offset, chunks = 8, {}
    idat = b""
    while offset < len(data):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        if kind == b"IDAT":
            idat += body
        else:
            chunks[kind] = body
        offset += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert depth == 8, f"unsupported PNG bit depth {depth}"
    assert colour in (2, 6), f"unsupported PNG colour type {colour}"
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    assert len(raw) == height * (stride + 1), "truncated image data"
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(min(height, max_rows or height)):
        start = y * (stride + 1)
        line = bytearray(raw[start + 1 : start + 1 + stride])
        _unfilter(raw[start], line, previous, bpp)
        rows.append(bytes(line))
        previous = line
    return width, height, rows


def distinct_colours(rows: list[bytes], bpp: int = 4, step: int = 1) -> int:
    """How many different pixel values the rows hold."""
    seen = set()
    for row in rows:
        for x in range(0, len(row), bpp * step):
            seen.add(row[x : x + 3])
    return len(seen)
