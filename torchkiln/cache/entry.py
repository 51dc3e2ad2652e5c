"""The on-disk / on-wire format of one cache entry, and the payload inside it.

An entry is ``header + payload``.  The header is ``MAGIC`` (8 bytes), the format
version (uint16), reserved (uint16), the payload length (uint64) and the SHA-256 of
the payload (32 bytes), little-endian.  :func:`decode` checks all of them before the
payload is used: a truncated, bit-flipped, emptied or other-version entry raises
:class:`CorruptEntry` (the store then counts it, deletes it and reports a miss).

A payload is plain data, never a pickle: :func:`pack` writes a JSON object of
metadata plus named binary blobs (a compiled ``.so``, kernel source text), and
:func:`unpack` reads it back.
"""
from __future__ import annotations

import hashlib
import json
import struct

MAGIC = b"TKCACHE\0"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sHHQ32s")
HEADER_SIZE = _HEADER.size


class CorruptEntry(Exception):
    """An entry that is truncated, damaged, or written by another format version."""


def encode(payload: bytes, version: int = FORMAT_VERSION) -> bytes:
    """``payload`` behind its versioned, checksummed header."""
    return _HEADER.pack(MAGIC, version, 0, len(payload), hashlib.sha256(payload).digest()) + payload


def decode(data: bytes) -> bytes:
    """The payload of an entry written by :func:`encode`; raises :class:`CorruptEntry`."""
    if len(data) < HEADER_SIZE:
        raise CorruptEntry(f"entry of {len(data)} bytes is shorter than its header")
    magic, version, _, length, digest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptEntry("not a torchkiln cache entry (bad magic)")
    if version != FORMAT_VERSION:
        raise CorruptEntry(f"format version {version}, this torchkiln reads {FORMAT_VERSION}")
    payload = data[HEADER_SIZE:]
    if len(payload) != length:
        raise CorruptEntry(f"payload of {len(payload)} bytes, header says {length}")
    if hashlib.sha256(payload).digest() != digest:
        raise CorruptEntry("payload checksum mismatch")
    return payload


def pack(meta: dict, blobs: dict[str, bytes] | None = None) -> bytes:
    """A payload: ``meta`` (JSON-serializable) and named byte strings."""
    blobs = blobs or {}
    index = [[name, len(b)] for name, b in blobs.items()]
    head = json.dumps({"meta": meta, "blobs": index}, sort_keys=True, separators=(",", ":")).encode()
    return struct.pack("<I", len(head)) + head + b"".join(blobs.values())


def unpack(payload: bytes) -> tuple[dict, dict[str, bytes]]:
    """``(meta, blobs)`` of a payload made by :func:`pack`; raises :class:`CorruptEntry`."""
    try:
        (n,) = struct.unpack_from("<I", payload)
        head = json.loads(payload[4:4 + n])
        blobs, pos = {}, 4 + n
        for name, length in head["blobs"]:
            blobs[name] = payload[pos:pos + length]
            pos += length
    except (struct.error, ValueError, KeyError, TypeError) as e:
        raise CorruptEntry(f"unreadable payload: {e}") from e
    if pos != len(payload):
        raise CorruptEntry("payload length does not match its blob index")
    return head["meta"], blobs
