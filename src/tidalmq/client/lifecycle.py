"""The life of a producer or consumer, as RocketMQ's ServiceState: created -> running -> shutdown. It starts
once; once shut down it cannot start again (a new one is made instead); calls that need it running say
which of the two it is not."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Self

from tidalmq.client.errors import IllegalStateError

if TYPE_CHECKING:
    from tidalmq.client.instance import ClientInstance


class ClientLifecycle:
    """``start``/``shutdown`` are the subclass's; it sets ``_state`` to "running" and "shutdown" (and may
    pass through others, such as a producer's "stopping"). ``KIND`` names it in errors."""

    KIND: ClassVar[str] = "client"
    group: str
    _state: str

    async def start(self) -> None:
        raise NotImplementedError

    async def shutdown(self) -> None:
        raise NotImplementedError

    def _may_start(self) -> bool:
        """Whether ``start`` has work to do: False when already running; IllegalStateError once shut down."""
        if self._state == "running":
            return False
        if self._state != "created":
            raise IllegalStateError(f"the {self.KIND} {self.group} has been shut down and cannot start again")
        return True

    def _check_running(self) -> None:
        if self._state != "running":
            what = "not started: call start() first" if self._state == "created" else "shut down"
            raise IllegalStateError(f"the {self.KIND} {self.group} is {what}")

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()


class InstanceClient(ClientLifecycle):
    """A client whose start and shutdown are its client instance's (RocketMQ's MQClientInstance): the pull
    and pop consumers; the producer adds its registration to ``start``."""

    _instance: ClientInstance

    @property
    def client_id(self) -> str:
        return self._instance.client_id

    async def start(self) -> None:
        if not self._may_start():
            return
        await self._instance.start()
        self._state = "running"

    async def shutdown(self) -> None:
        if self._state == "running":
            await self._instance.shutdown()
        self._state = "shutdown"
