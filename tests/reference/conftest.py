"""The reference suite: the same client code and tools against Apache RocketMQ and against TidalMQ.

Marked ``reference`` and run with ``--run-reference`` (``.ci/run`` does): it fetches Apache RocketMQ and
builds the official Java and Go clients' programs the first time (scripts/reference/fetch.sh, minutes),
and starts JVMs. docs/compatibility.md says what it compares and lists the differences it allows.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reference.apache import ApacheRocketMQ, ReferenceUnavailable, fetch, rocketmq_lib
from tests.support import ModuleTmp, Standalone


@pytest.fixture(scope="session")
def reference_cache() -> Path:
    try:
        return fetch()
    except ReferenceUnavailable as e:
        pytest.skip(f"the machine refuses the reference suite: {e}")


@pytest.fixture(scope="session")
def rocketmq_jars(reference_cache: Path) -> Path:
    return rocketmq_lib(reference_cache)


@pytest.fixture(scope="module")
def apache(rocketmq_jars: Path, module_tmp: ModuleTmp) -> Iterator[ApacheRocketMQ]:
    """Apache RocketMQ's NameServer and one master broker, for the module's tests."""
    ref = ApacheRocketMQ(rocketmq_jars, module_tmp("apache-rocketmq"))
    with ref:
        yield ref


@pytest.fixture(scope="module")
def tidal(module_tmp: ModuleTmp) -> Iterator[Standalone]:
    """A TidalMQ standalone, for the module's tests."""
    with Standalone(module_tmp("tidalmq") / "data") as s:
        yield s


@pytest.fixture(scope="module", params=["apache", "tidal"])
def server(request: pytest.FixtureRequest) -> ApacheRocketMQ | Standalone:
    """Each of the two in turn: a scenario written once runs against both."""
    return request.getfixturevalue(request.param)
