"""``tidalmq cluster``: a local trial cluster, one command.

Two NameServers and N broker groups of R replicas, each a separate ``tidalmq`` process with its own data
dir, port and generated ``broker.conf`` (the same file runs it on another machine, docs/cluster.md). In
controller mode an etcd is started too, unless endpoints are given. The plan (who listens where, with which
keys) is pure and tested without processes; the supervisor starts the processes, reports one that dies and
stops them all, brokers first, on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import string
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

# Ports from --base-port P: NameServers P and P+1, etcd's client and peer ports P+2 and P+3, then each
# replica a block of PORT_STRIDE: listenPort and haListenPort (listenPort + 1, RocketMQ's default).
PORT_STRIDE = 10
FIRST_BROKER_OFFSET = 10
NAMESRV_COUNT = 2

NAMESRV_READY = re.compile(r"namesrv ready on")
BROKER_READY = re.compile(r"broker \S+ ready on")


@dataclass
class ProcessSpec:
    """One process of the cluster: what it runs and where its files are."""

    name: str  # namesrv-0, etcd, broker-a-0, ...
    kind: str  # namesrv | etcd | broker
    data_dir: Path
    argv: list[str]
    addr: str  # host:port of its remoting (or etcd's client URL)
    conf: dict[str, str] = field(default_factory=dict)  # broker.conf keys (brokers only)
    role: str = ""


@dataclass
class ClusterPlan:
    namesrv_addr: str  # RocketMQ's list form, host:port;host:port
    etcd_endpoints: str
    processes: list[ProcessSpec]

    @property
    def brokers(self) -> list[ProcessSpec]:
        return [p for p in self.processes if p.kind == "broker"]


def broker_name(group: int) -> str:
    """broker-a, broker-b, ..., broker-z, broker-aa, ... (RocketMQ's sample configs name groups so)."""
    letters = string.ascii_lowercase
    name = ""
    n = group + 1
    while n:
        n, rem = divmod(n - 1, 26)
        name = letters[rem] + name
    return f"broker-{name}"


def _tidalmq(*args: str) -> list[str]:
    return [sys.executable, "-m", "tidalmq.cli", *args]


def plan_cluster(*, groups: int, replicas: int, data_dir: Path, base_port: int, host: str = "127.0.0.1",
                 controller: bool = False, etcd_endpoints: str = "", cluster_name: str = "DefaultCluster",
                 master_role: str = "", extra: dict[str, str] | None = None,
                 etcd_binary: str = "etcd") -> ClusterPlan:
    """Every process of the cluster, its ports and its broker.conf. Static groups: brokerId 0 is the master
    (``master_role``, default SYNC_MASTER when there are slaves), 1..R-1 are SLAVEs. Controller mode: every
    replica has an id 1..R (the controller elects the master; brokerId 0 is the master's registration)."""
    if groups < 1 or replicas < 1:
        raise ValueError("--groups and --replicas must be >= 1")
    last = base_port + FIRST_BROKER_OFFSET + groups * replicas * PORT_STRIDE
    if base_port < 1 or last > 65535:
        raise ValueError(f"ports {base_port}..{last} do not fit below 65536: lower --base-port")
    role = master_role or ("SYNC_MASTER" if replicas > 1 else "ASYNC_MASTER")
    if role not in ("SYNC_MASTER", "ASYNC_MASTER"):
        raise ValueError(f"master role must be SYNC_MASTER or ASYNC_MASTER, got {role!r}")
    procs: list[ProcessSpec] = []
    ns_addrs = []
    for i in range(NAMESRV_COUNT):
        port = base_port + i
        d = data_dir / f"namesrv-{i}"
        procs.append(ProcessSpec(f"namesrv-{i}", "namesrv", d,
                                 _tidalmq("namesrv", "--host", host, "-p", str(port), "--data-dir", str(d)),
                                 f"{host}:{port}"))
        ns_addrs.append(f"{host}:{port}")
    namesrv_addr = ";".join(ns_addrs)
    if controller and not etcd_endpoints:
        d = data_dir / "etcd"
        client, peer = f"http://{host}:{base_port + 2}", f"http://{host}:{base_port + 3}"
        procs.append(ProcessSpec("etcd", "etcd", d, [
            etcd_binary, "--name", "tidalmq", "--data-dir", str(d / "data"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"tidalmq={peer}"], client))
        etcd_endpoints = client
    for g in range(groups):
        name = broker_name(g)
        for r in range(replicas):
            port = base_port + FIRST_BROKER_OFFSET + (g * replicas + r) * PORT_STRIDE
            d = data_dir / f"{name}-{r}"
            conf = {
                "brokerClusterName": cluster_name,
                "brokerName": name,
                "namesrvAddr": namesrv_addr,
                "brokerIP1": host,
                "brokerIP2": host,
                "listenPort": str(port),
                "haListenPort": str(port + 1),
                "storePathRootDir": str(d / "store"),
            }
            if controller:
                conf.update(brokerId=str(r + 1), brokerRole=role, enableControllerMode="true",
                            controllerEtcdEndpoints=etcd_endpoints)
                proc_role = "replica"
            else:
                proc_role = role if r == 0 else "SLAVE"
                conf.update(brokerId=str(r), brokerRole=proc_role)
            conf.update(extra or {})
            procs.append(ProcessSpec(f"{name}-{r}", "broker", d,
                                     _tidalmq("broker", "-c", str(d / "broker.conf"), "--data-dir", str(d),
                                              "--host", host),
                                     f"{host}:{port}", conf, proc_role))
    return ClusterPlan(namesrv_addr, etcd_endpoints, procs)


def render_conf(conf: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in conf.items())


def write_files(plan: ClusterPlan) -> None:
    """Each process's data dir with its broker.conf (brokers) and the command that runs it."""
    for p in plan.processes:
        p.data_dir.mkdir(parents=True, exist_ok=True)
        if p.conf:
            (p.data_dir / "broker.conf").write_text(render_conf(p.conf))
        (p.data_dir / "command").write_text(" ".join(p.argv) + "\n")


class Supervisor:
    """Runs the plan's processes; a child's output goes to ``<data dir>/<name>.log``."""

    def __init__(self, plan: ClusterPlan, ready_timeout: float = 60.0) -> None:
        self.plan = plan
        self.ready_timeout = ready_timeout
        self.children: dict[str, asyncio.subprocess.Process] = {}
        self._stopping = False
        self._exited: asyncio.Queue[tuple[str, int]] = asyncio.Queue()

    async def _spawn(self, p: ProcessSpec) -> None:
        log = open(p.data_dir / f"{p.name}.log", "ab")  # noqa: SIM115 - the child holds it; closed after spawn
        try:
            # Own session: a Ctrl-C reaches only this supervisor, which then stops the brokers before
            # the NameServers (a broker's unregistration needs them).
            proc = await asyncio.create_subprocess_exec(*_dying_with_us(p.argv), stdout=log,
                                                        stderr=asyncio.subprocess.STDOUT,
                                                        stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        self.children[p.name] = proc
        asyncio.ensure_future(self._watch(p.name, proc))

    async def _watch(self, name: str, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        if not self._stopping:
            await self._exited.put((name, code))

    async def _wait_ready(self, p: ProcessSpec) -> None:
        deadline = time.monotonic() + self.ready_timeout
        log_path = p.data_dir / f"{p.name}.log"
        proc = self.children[p.name]
        while True:
            if p.kind == "etcd":
                if await asyncio.to_thread(_etcd_healthy, p.addr):
                    return
            else:
                text = log_path.read_text(errors="replace") if log_path.exists() else ""
                if (NAMESRV_READY if p.kind == "namesrv" else BROKER_READY).search(text):
                    return
            if proc.returncode is not None:
                raise RuntimeError(f"{p.name} exited with code {proc.returncode} before it was ready; "
                                   f"see {log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{p.name} not ready after {self.ready_timeout:.0f} s; see {log_path}")
            await asyncio.sleep(0.1)

    async def start(self) -> None:
        """The etcd and NameServers first (the brokers register with them), then the masters, then the
        slaves: a slave learns its master's address from the NameServer's answer to its registration, and
        a slave registered before its master would wait for its next registration (30 s) to find it.
        Controller-mode replicas start at once (etcd decides who is master)."""
        write_files(self.plan)
        first = [p for p in self.plan.processes if p.kind != "broker"]
        masters = [p for p in self.plan.brokers if p.role != "SLAVE"]
        slaves = [p for p in self.plan.brokers if p.role == "SLAVE"]
        for stage in (first, masters, slaves):
            for p in stage:
                await self._spawn(p)
            await asyncio.gather(*(self._wait_ready(p) for p in stage))

    def describe(self) -> str:
        lines = [f"namesrvAddr={self.plan.namesrv_addr}"]
        if self.plan.etcd_endpoints:
            lines.append(f"controllerEtcdEndpoints={self.plan.etcd_endpoints}")
        for p in self.plan.processes:
            pid = self.children[p.name].pid if p.name in self.children else "-"
            extra = f" {p.conf['brokerName']} brokerId={p.conf['brokerId']} {p.role}" if p.conf else ""
            lines.append(f"{p.name} {p.addr} pid={pid}{extra} dir={p.data_dir}")
        return "\n".join(lines)

    async def report_exits(self, out: asyncio.Event) -> None:
        """Say so on stderr when a child dies; the rest keep running (that is what a trial cluster is for:
        seeing the others carry on)."""
        while not out.is_set():
            name, code = await self._exited.get()
            p = next(x for x in self.plan.processes if x.name == name)
            print(f"tidalmq cluster: {name} exited with code {code} (log {p.data_dir / (name + '.log')})",
                  file=sys.stderr, flush=True)

    async def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to the brokers, then the NameServers and etcd; SIGKILL to what outlives ``timeout``."""
        self._stopping = True
        for kinds in (("broker",), ("namesrv", "etcd")):
            procs = [self.children[p.name] for p in self.plan.processes
                     if p.kind in kinds and p.name in self.children]
            for proc in procs:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    await asyncio.wait_for(proc.wait(), timeout)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()


def _dying_with_us(argv: list[str]) -> list[str]:
    """``argv`` run so that the child gets SIGTERM if this supervisor dies without stopping it (SIGKILL,
    OOM killer): Linux's parent-death signal, set by util-linux's ``setpriv`` (it survives the exec; no
    preexec_fn, which is unsafe once threads exist). The children are in their own session, so nothing
    else would reach them. Where ``setpriv`` is missing they outlive a killed supervisor, as before."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "TERM", "--", *argv] if setpriv else argv


def _etcd_healthy(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(endpoint + "/health", timeout=1) as r:
            return b'"true"' in r.read()
    except OSError:
        return False


def default_cluster_dir() -> Path:
    return Path(os.environ.get("TIDALMQ_HOME", os.path.expanduser("~/tidalmq"))) / "cluster"
