"""The RocketMQ 5 gRPC endpoint (apache.rocketmq.v2.MessagingService) in front of NameServer and brokers.

The protocol's generated messages come from rocketmq-python-client's ``rocketmq.grpc_protocol``. Importing
a submodule runs its package's ``__init__`` first, and ``rocketmq/__init__.py`` imports the whole 5.x client
(OpenTelemetry and all): ~90 ms of every broker's start, for modules the endpoint never uses. So the package
is entered here without running it (``_enter_rocketmq_lazily``); the first attribute the package itself is
asked for (``rocketmq.Producer``, in a process that also runs the client) runs its ``__init__`` then, in
place, so the client works as ever."""

from __future__ import annotations

import importlib.util
import sys
import types


class _LazyPackage(types.ModuleType):
    """``rocketmq`` with its submodules importable and its ``__init__`` not yet run."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):  # what the import system probes: not a reason to load the client
            raise AttributeError(name)
        self.__class__ = types.ModuleType  # type: ignore[assignment]  # a plain module from now on
        spec = self.__spec__
        assert spec is not None and spec.loader is not None
        spec.loader.exec_module(self)
        return getattr(self, name)


def _enter_rocketmq_lazily() -> None:
    if "rocketmq" in sys.modules:
        return
    spec = importlib.util.find_spec("rocketmq")
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return  # not installed (an import of the protocol then says so) or not a package
    package = importlib.util.module_from_spec(spec)
    package.__class__ = _LazyPackage
    sys.modules["rocketmq"] = package


_enter_rocketmq_lazily()
