"""Installing TidalMQ installs no top-level ``rocketmq`` package: a user can have TidalMQ and either
official Python client (``rocketmq==0.4.4``, ``rocketmq-python-client``, both of which install one) in
one environment. The default run reads the requirements' metadata; ``--run-slow`` installs the project
into a fresh venv and looks."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import tomllib
import venv
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def base_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


def closure(reqs: list[Requirement]) -> dict[str, md.Distribution]:
    """The installed distributions the requirements bring, transitively (extras not asked for left out)."""
    out: dict[str, md.Distribution] = {}
    todo = list(reqs)
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in out:
            continue
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            pytest.fail(f"{req.name}, a requirement of the base install, is not installed here")
        out[name] = dist
        for text in dist.requires or ():
            sub = Requirement(text)
            if sub.marker is None or sub.marker.evaluate({"extra": ""}):
                todo.append(sub)
    return out


def top_level(dist: md.Distribution) -> set[str]:
    """The top-level importable names a distribution installs (from its RECORD)."""
    names = set()
    for f in dist.files or ():
        first = f.parts[0]
        if first.endswith((".dist-info", ".egg-info", ".data")) or first in ("..", "__pycache__"):
            continue
        names.add(first.removesuffix(".py"))
    return names


def test_the_base_requirements_bring_no_top_level_rocketmq_package() -> None:
    dists = closure(base_requirements())
    assert "grpcio" in dists and "protobuf" in dists  # the walk found the gRPC endpoint's runtime
    shipping = sorted(name for name, d in dists.items() if "rocketmq" in top_level(d))
    assert shipping == [], f"the base install brings a top-level rocketmq through {shipping}"
    assert "rocketmq-python-client" not in dists


@pytest.mark.slow
def test_a_fresh_venv_install_has_no_rocketmq_and_serves_the_protocol(tmp_path: Path) -> None:
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    py = env / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", str(ROOT)], check=True, timeout=1200)
    check = ("import importlib.util, tidalmq.proxy.server\n"
             "assert importlib.util.find_spec('rocketmq') is None\n"
             "from tidalmq.proxy.protocol import service_pb2\n"
             "print(service_pb2.DESCRIPTOR.services_by_name['MessagingService'].full_name)\n")
    out = subprocess.run([str(py), "-c", check], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "apache.rocketmq.v2.MessagingService"
