"""The web console's configuration keys (docs/console.md)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CONSOLE_PORT = 8082  # 8080 and 8081 are RocketMQ 5 proxy's remoting and gRPC ports


@dataclass
class ConsoleConfig:
    # consoleEnable: the standalone serves the console beside its NameServer and Broker.
    console_enable: bool = True
    # consolePort: 0 picks a free port (the ready line names it).
    console_port: int = DEFAULT_CONSOLE_PORT
    # consoleAllowedHosts: host names (comma-separated) the console answers to besides IP addresses and
    # localhost; any other Host header is refused (DNS rebinding).
    console_allowed_hosts: str = ""

    def allowed_hosts(self) -> tuple[str, ...]:
        return tuple(h.strip() for h in self.console_allowed_hosts.split(",") if h.strip())
