"""RocketMQ's client and broker versions: the number a client sends in every request (``version``) is the
ordinal of RocketMQ's ``MQVersion.Version`` enum; its tools print the enum's name (``V4_9_4``) with
``MQVersion.getVersionDesc``, where a number past the end names the last entry (``HIGHER_VERSION``).

The enum runs V3_0_0_SNAPSHOT, V3_0_0_ALPHA1, V3_0_0_BETA1..5, then BETA6..9 each after its SNAPSHOT,
V3_0_0_FINAL; from there every release follows its SNAPSHOT: 3.0.1-3.0.15, 3.1.0-3.2.9, 3.3.1-3.9.9 (no
x.y.0 in 3.3 to 3.9), 4.0.0-5.9.9; HIGHER_VERSION last. The table is built from that rule
(tests/common/test_mqversion.py checks known ordinals)."""

from __future__ import annotations


def _names() -> tuple[str, ...]:
    out = ["V3_0_0_SNAPSHOT", "V3_0_0_ALPHA1"]
    out += [f"V3_0_0_BETA{i}" for i in range(1, 6)]
    for i in range(6, 10):
        out += [f"V3_0_0_BETA{i}_SNAPSHOT", f"V3_0_0_BETA{i}"]
    out.append("V3_0_0_FINAL")

    def release(major: int, minor: int, patch: int) -> None:
        out.extend((f"V{major}_{minor}_{patch}_SNAPSHOT", f"V{major}_{minor}_{patch}"))

    for patch in range(1, 16):
        release(3, 0, patch)
    for minor in (1, 2):
        for patch in range(10):
            release(3, minor, patch)
    for minor in range(3, 10):
        for patch in range(1, 10):
            release(3, minor, patch)
    for major in (4, 5):
        for minor in range(10):
            for patch in range(10):
                release(major, minor, patch)
    out.append("HIGHER_VERSION")
    return tuple(out)


VERSION_NAMES: tuple[str, ...] = _names()


def version_desc(value: int) -> str:
    """RocketMQ's MQVersion.getVersionDesc: the enum name of a version number."""
    if value >= len(VERSION_NAMES):
        return VERSION_NAMES[-1]
    return VERSION_NAMES[value]


def version_ordinal(name: str) -> int:
    return VERSION_NAMES.index(name)
