"""Deterministic message bodies shared by the client agent and the tests.

The 0.4.4 Python wrapper reads a received body through ``GetMessageBody``, a ``char*`` that ctypes cuts at
the first NUL byte (the library has no ``GetMessageBodyLength``), so generated bodies never hold a NUL:
what the consumer sees is then exactly what was sent.
"""

from __future__ import annotations

import base64
import hashlib
import random

_NO_NUL = bytes.maketrans(b"\x00", b"\x01")


def gen_body(size: int, seed: int, kind: str = "random") -> bytes:
    """``random``: incompressible bytes 1..255; ``text``: compressible printable text."""
    if kind == "random":
        return random.Random(seed).randbytes(size).translate(_NO_NUL)
    if kind == "text":
        words = [f"w{seed}-{i:04d} " for i in range(97)]
        unit = "".join(words).encode()
        return (unit * (size // len(unit) + 1))[:size]
    raise ValueError(f"unknown body kind {kind!r}")


def body_from_spec(spec: dict) -> bytes:
    if "b64" in spec:
        return base64.b64decode(spec["b64"])
    if "text" in spec:
        return str(spec["text"]).encode("utf-8")
    g = spec["gen"]
    return gen_body(int(g["size"]), int(g["seed"]), g.get("kind", "random"))


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()
