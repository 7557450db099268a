"""What docs/broker.md says of the source tree: no module of src/tidalmq over 600 lines (protoc's generated
modules aside), and the properties' separators spelled in one place, the properties codec (common/message.py)."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tidalmq"
MAX_LINES = 600
CODEC = "common/message.py"
# The name/value and property separators (\x01, \x02) as a Python source spells them, or the characters.
_SEPARATOR = re.compile(r"\\x0[12]|\\u000[12]|\\00[12]|chr\([12]\)|[\x01\x02]")


# protoc's output (scripts/gen_grpc_protocol.py): generated, not written, so outside the house rules
_GENERATED = re.compile(r"_pb2(_grpc)?\.py$")


def _modules() -> dict[str, str]:
    return {p.relative_to(SRC).as_posix(): p.read_text(encoding="utf-8") for p in sorted(SRC.rglob("*.py"))
            if not _GENERATED.search(p.name)}


def test_no_module_over_600_lines() -> None:
    sizes = {name: len(text.splitlines()) for name, text in _modules().items()}
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not over, f"over {MAX_LINES} lines: {over}"


def test_the_separators_are_spelled_in_the_codec_alone() -> None:
    spelled = {name for name, text in _modules().items() if _SEPARATOR.search(text)}
    assert CODEC in spelled  # the pattern finds what it looks for
    outside = spelled - {CODEC}
    assert not outside, f"separators spelled outside {CODEC} (use its constants and helpers): {sorted(outside)}"
