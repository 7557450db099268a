"""Compiles the apache.rocketmq.v2 protocol (src/tidalmq/proxy/protocol/*.proto) into the generated
modules beside it, with grpcio-tools (the version the test extra pins, whose protoc matches the pinned
protobuf runtime):

    .venv/bin/python scripts/gen_grpc_protocol.py          # rewrite the generated modules
    .venv/bin/python scripts/gen_grpc_protocol.py --check  # exit 1 when they differ from what it makes

The generated messages go into TidalMQ's own descriptor pool (tidalmq/proxy/protocol/pool.py), not
protobuf's default one, where the official 5.x client registers the same names."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = Path("tidalmq/proxy/protocol")
PROTOS = ("definition", "service")
SERVICES = ("service",)  # the files that declare a service: only these get a _pb2_grpc module
DEFAULT_POOL = "_descriptor_pool.Default()"
OWN_POOL = "_pool.POOL"
IMPORT_MARK = "# @@protoc_insertion_point(imports)\n"
IMPORT_POOL = "from tidalmq.proxy.protocol import pool as _pool\n"


def generated() -> dict[str, str]:
    """The generated modules' names (in the package) and texts, as this script makes them."""
    from grpc_tools import protoc  # the test extra's: not needed to run TidalMQ

    include = Path(protoc.__file__).parent / "_proto"  # google/protobuf/*.proto
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="protoc-") as tmp:
        args = ["protoc", f"-I{SRC}", f"-I{include}", f"--python_out={tmp}"]
        rc = protoc.main([*args, *(str(PACKAGE / f"{p}.proto") for p in PROTOS)])
        rc = rc or protoc.main([args[0], args[1], args[2], f"--grpc_python_out={tmp}",
                                *(str(PACKAGE / f"{p}.proto") for p in SERVICES)])
        if rc:
            raise SystemExit(f"protoc failed ({rc})")
        for path in sorted((Path(tmp) / PACKAGE).glob("*.py")):
            text = path.read_text()
            if path.name.endswith("_pb2.py"):
                if text.count(DEFAULT_POOL) != 1 or IMPORT_MARK not in text:
                    raise SystemExit(f"{path.name}: not the protoc output this script knows how to adapt")
                text = text.replace(DEFAULT_POOL, OWN_POOL).replace(IMPORT_MARK, IMPORT_POOL + IMPORT_MARK)
            out[path.name] = text
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed modules, write nothing")
    args = ap.parse_args()
    target = SRC / PACKAGE
    stale = []
    for name, text in generated().items():
        path = target / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(SRC.parent)}")
    if stale:
        print(f"out of date (run scripts/gen_grpc_protocol.py): {', '.join(stale)}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
