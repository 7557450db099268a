"""BrokerController: wires the store, the managers and the processors, and keeps the broker
registered with its NameServers."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tidalmq.acl import RequestSigner, SessionCredentials, acl_home, broker_validator
from tidalmq.acl.signature_worker import SignatureWorker
from tidalmq.acl.validator import PlainAccessValidator
from tidalmq.broker import namesrv_lookup
from tidalmq.broker.config import BrokerConfig
from tidalmq.broker.consumed import consumed_commit_log_offset
from tidalmq.broker.consumer_manager import (
    ClientChannelInfo,
    ConsumerGroupInfo,
    ConsumerManager,
    SubscriptionData,
)
from tidalmq.broker.consumer_offset import ConsumerOffsetManager
from tidalmq.broker.live_config import FRAME_HEADROOM
from tidalmq.broker.long_polling import PullRequestHoldService
from tidalmq.broker.message import InnerMessage
from tidalmq.broker.pop.revive import PopReviveService
from tidalmq.broker.pop.service import PopService
from tidalmq.broker.processors.registry import register_processors
from tidalmq.broker.processors.send import SendMessageProcessor
from tidalmq.broker.rebalance_lock import RebalanceLockManager
from tidalmq.broker.schedule_admin import timer_runtime_info
from tidalmq.broker.schedule_child import EarlyChild
from tidalmq.broker.schedule_hooks import DelayLevelRewrite, TimerRewrite
from tidalmq.broker.stats import BrokerStats
from tidalmq.broker.subscription_group import SubscriptionGroupManager
from tidalmq.broker.timer_process import TimerProcess
from tidalmq.broker.topic_config import PERM_RW, TopicConfigManager
from tidalmq.broker.transaction.check_service import TransactionCheckService
from tidalmq.broker.transaction.half_service import TransactionalMessageService
from tidalmq.common import fastjson
from tidalmq.common import sysflag as sf
from tidalmq.common.fileutil import is_disk_full
from tidalmq.common.mqversion import version_desc
from tidalmq.common.msgid import host_bytes
from tidalmq.common.record import body_crc
from tidalmq.controller.manager import ReplicasManager
from tidalmq.filter import FilterCache, FilterSyntaxError
from tidalmq.ha.client import HAClient
from tidalmq.ha.service import HAService
from tidalmq.ha.slave_synchronize import SlaveSynchronize
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import CURRENT_VERSION, RemotingCommand
from tidalmq.remoting.config import RemotingServerConfig
from tidalmq.remoting.protocol.broker_headers import NotifyConsumerIdsChangedRequestHeader
from tidalmq.remoting.protocol.namesrv_headers import (
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
)
from tidalmq.remoting.tls import TlsConfig, client_context_from, server_context
from tidalmq.remoting.transport import Connection, RemotingClient, RemotingError, RemotingServer
from tidalmq.schedule.delay_level import ScheduleMessageService
from tidalmq.schedule.stats import ScheduleStats
from tidalmq.schedule.timer_service import (
    CancelTarget,
    TimerMessageService,
    check_precision,
    find_cancel_target,
)
from tidalmq.schedule.timer_takeover import mark_replica
from tidalmq.store.async_face import StoreFace
from tidalmq.store.config import MessageStoreConfig, parse_delay_levels
from tidalmq.store.message_store import AppendResult, DefaultMessageStore, PutStatus

log = logging.getLogger(__name__)

# How long a timer cancel waits for its target to be indexed (a cancel sent right after its target).
CANCEL_INDEX_WAIT_S = 0.5


class BrokerController:
    def __init__(self, config: BrokerConfig, store_config: MessageStoreConfig, *, host: str = "0.0.0.0",
                 home: str | Path | None = None, remoting_config: RemotingServerConfig | None = None,
                 tls: TlsConfig | None = None, schedule_child: EarlyChild | None = None) -> None:
        """``schedule_child``: the schedule process the command started early (schedule_child.start_early),
        adopted by the TimerProcess, else ended."""
        self.config = config
        self.store_config = store_config
        self._host = host
        # Controller mode (docs/replication.md): every replica starts as a slave; the one etcd names
        # master is promoted at runtime to the configured master role.
        self.master_role = config.broker_role
        if config.enable_controller_mode:
            config.broker_role = "SLAVE"
        root = Path(store_config.store_path_root_dir)
        # conf/plain_acl.yml lives under $ROCKETMQ_HOME, else the data directory (the store's parent).
        self.home = Path(home) if home is not None else root.parent
        cfg_dir = root / "config"
        self.topics = TopicConfigManager(
            cfg_dir / "topics.json", config.broker_name, config.broker_cluster_name,
            config.default_topic_queue_nums, config.auto_create_topic_enable,
        )
        self.offsets = ConsumerOffsetManager(cfg_dir / "consumerOffset.json")
        self.groups = SubscriptionGroupManager(cfg_dir / "subscriptionGroup.json", config.auto_create_subscription_group)
        self.consumers = ConsumerManager(self._on_consumer_ids_changed)
        # producer group -> its connections (HEART_BEAT's producerDataSet; GET_PRODUCER_CONNECTION_LIST)
        self.producers: dict[str, dict[Connection, ClientChannelInfo]] = {}
        self.pull_hold = PullRequestHoldService()
        self.locks = RebalanceLockManager()
        # SQL92 subscriptions compiled once per expression (enablePropertyFilter; docs/filtering.md).
        self.filters = FilterCache()
        self.store_host_bytes = host_bytes(config.broker_ip1)
        self.store = DefaultMessageStore(store_config, store_host=(config.broker_ip1, config.listen_port))
        self.store.is_slave = config.is_slave
        # Forcible cleanup keeps what some group has not consumed (docs/broker.md, "A full disk").
        self.store.consumed_commit_log_offset = lambda: consumed_commit_log_offset(self)
        tls = tls or TlsConfig()
        # The frame limit is fixed here; UPDATE_BROKER_CONFIG keeps maxMessageSize within it.
        self.max_frame = max(16 * 1024 * 1024, store_config.max_message_size + FRAME_HEADROOM)
        # The properties file the broker was started from (-c), where UPDATE_BROKER_CONFIG persists live keys.
        self.config_file: Path | None = None
        self.server = RemotingServer(host, config.listen_port, max_frame=self.max_frame,
                                     config=remoting_config, ssl_context=server_context(tls), tls_mode=tls.server_mode)
        # The broker's own outgoing connections (to the NameServers) speak TLS when tls.enable is set.
        self.namesrv_client = RemotingClient(ssl_context=client_context_from(tls))
        # ACL 1.0 (docs/acl.md): every request checked before its processor; a broken file stops start-up.
        self.acl: PlainAccessValidator | None = None
        self.acl_worker: SignatureWorker | None = None
        if config.acl_enable:
            self.acl = broker_validator(acl_home(self.home), config.acl_plain_file or None)
            self.server.access_validator = self.acl
        # Signs REGISTER_BROKER / UNREGISTER_BROKER for a NameServer with ACL on.
        self.namesrv_signer: RequestSigner | None = None
        if config.access_key and config.secret_key:
            self.namesrv_signer = RequestSigner(SessionCredentials(config.access_key, config.secret_key))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._register_event: asyncio.Event | None = None
        # Waiting for a registration that begins after they came (registered()): resolved when it ends
        self._register_waiters: list[asyncio.Future[None]] = []
        self._started_ms = int(time.time() * 1000)
        # RocketMQ's BrokerStatsManager (broker/stats.py): the one source of put/get counts, read by
        # VIEW_BROKER_STATS_DATA, the consume stats, the runtime info and the Prometheus counters
        self.stats = BrokerStats(config.broker_cluster_name)
        # Hooks the later layers (schedule, retry, filters, transactions) install.
        self.rewrite_hooks: list[Callable[[InnerMessage], None]] = []
        # Scheduled delivery: RocketMQ 4 delay levels.
        self.schedule_stats = ScheduleStats()
        levels = parse_delay_levels(store_config.message_delay_level)
        self.schedule = ScheduleMessageService(self.store, levels, cfg_dir / "delayOffset.json", self.schedule_stats)
        self.rewrite_hooks.append(DelayLevelRewrite(max(levels) if levels else 0))
        # RocketMQ 5 timer messages: arbitrary delivery time and cancel, in <storePathRootDir>/timerwheel, timerlog/.
        self.timer_stats = ScheduleStats()
        self.timer: TimerMessageService | TimerProcess | None = None
        sc = store_config
        check_precision(sc.timer_precision_ms)
        if sc.timer_wheel_enable and sc.timer_process_enable:
            self.timer = TimerProcess(self.store, sc, early=schedule_child)
            schedule_child = None
        elif sc.timer_wheel_enable:
            self.timer = TimerMessageService(self.store, root, precision_ms=sc.timer_precision_ms,
                                             max_delay_ms=sc.timer_max_delay_sec * 1000, stats=self.timer_stats)
        if schedule_child is not None:  # no schedule process here after all
            schedule_child.discard()
        self.store_face = StoreFace(self.store)
        self.timer_rewrite = TimerRewrite(sc.timer_max_delay_sec * 1000, sc.timer_precision_ms,
                                          lookup=self._lookup_cancel, enabled=sc.timer_wheel_enable)
        self.rewrite_hooks.append(self.timer_rewrite)
        # Transactions: half messages, END_TRANSACTION and check-back (docs/transactions.md). Its hook
        # goes first, so that the schedule hooks never see a half message.
        self.transactions = TransactionalMessageService(self, cfg_dir / "transactionState.json")
        self.rewrite_hooks.insert(0, self.transactions.rewrite)
        self.transaction_check = TransactionCheckService(self.transactions, config)
        # Built with the other processors at registration (processors/registry.py): the send path for the
        # messages the broker builds itself.
        self.send_processor: SendMessageProcessor
        # Replication (docs/replication.md): a master serves slaves on haListenPort; a slave streams
        # the master's CommitLog and copies its metadata.
        self.ha_service: HAService | None = None
        self.ha_client: HAClient | None = None
        self.slave_sync: SlaveSynchronize | None = None
        if config.is_slave:
            self.ha_client = HAClient(config, self.store)
            self.slave_sync = SlaveSynchronize(self)
        else:
            self.ha_service = HAService(config, self.store, store_config.sync_flush_timeout)
        # Pop consumption (docs/pop.md): the service the remoting processors (and a gRPC endpoint) call.
        self.pop: PopService = PopService(self)
        self.pop_revive = PopReviveService(self, self.pop)
        self.replicas: ReplicasManager | None = ReplicasManager(self) if config.enable_controller_mode else None
        self._slave_tasks: list[asyncio.Task[Any]] = []
        self._register_processors()

    def _register_processors(self) -> None:
        self.send_processor = register_processors(self)
        s = self.server
        s.close_listeners.append(self._on_connection_closed)

    # lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if isinstance(self.timer, TimerProcess):
            self.timer.attach_loop(self._loop)  # arrivals told to the schedule process from the loop
        if self.replicas is not None:
            await self.replicas.prepare()  # the group's history, to cut a divergent tail at load
        # Loading recovers the store after a crash (a CommitLog scan, queues re-dispatched): seconds on a
        # large store. Off the loop, so what already serves on it (a standalone's NameServer) keeps answering.
        await self._loop.run_in_executor(None, self._load_and_start_store)
        ephemeral = self.config.listen_port == 0
        await self.server.start()
        self.config.listen_port = self.server.port
        await self._start_ha(ephemeral)
        self._register_event = asyncio.Event()
        lookup_url = namesrv_lookup.address_server_url(self.config)
        if lookup_url is not None:
            await namesrv_lookup.fetch_once(self.config, lookup_url, self.register_soon)
            self._tasks.append(self._loop.create_task(namesrv_lookup.fetch_loop(
                self.config, lookup_url, self.register_soon, self.config.fetch_namesrv_addr_interval / 1000.0)))
        self._tasks.append(self._loop.create_task(self._register_loop()))
        self._tasks.append(self._loop.create_task(self._housekeeping_loop()))
        self._tasks.append(self._loop.create_task(self.stats.run()))
        if not self.config.is_slave:  # a slave writes nothing of its own: the master checks transactions and revives pops
            self._tasks.append(self._loop.create_task(self.transaction_check.run()))
            self._tasks.append(self._loop.create_task(self.pop_revive.run()))
        self.pop.start(self._loop)
        if self.acl is not None:
            self._tasks.append(self._loop.create_task(self.acl.watch()))
            if self.config.acl_signature_worker_enable:
                self.acl_worker = SignatureWorker()
                self.acl_worker.start(self._loop)
                self.acl.use_worker(self.acl_worker)
        if self.replicas is not None:
            self._tasks.append(self._loop.create_task(self.replicas.run()))
        log.info("Broker %s listening on %s", self.config.broker_name, self.config.broker_addr)

    async def _start_ha(self, ephemeral_listen_port: bool) -> None:
        assert self._loop is not None
        c = self.config
        if self.ha_service is not None:
            if c.ha_listen_port >= 0:
                await self.ha_service.start(c.ha_listen_port)
            elif ephemeral_listen_port:
                await self.ha_service.start(0)
            else:
                try:
                    await self.ha_service.start(c.listen_port + 1)
                except OSError as e:
                    # Unset haListenPort is only a default: slaves learn the port the NameServer names.
                    log.warning("HA: listenPort+1 (%d) unavailable (%s), taking any free port", c.listen_port + 1, e)
                    await self.ha_service.start(0)
            c.ha_listen_port = self.ha_service.port
        if self.ha_client is not None:
            self.ha_client.update_master_address(c.ha_master_address)
            self._slave_tasks.append(self._loop.create_task(self.ha_client.run()))
        if self.slave_sync is not None:
            self._slave_tasks.append(self._loop.create_task(self.slave_sync.run()))
        self._tasks.extend(self._slave_tasks)

    async def become_master(self) -> None:
        """Controller mode's promotion at runtime: the slave side stops, the store takes puts, the
        master's services start, and the broker registers as brokerId 0."""
        assert self._loop is not None
        c = self.config
        for t in self._slave_tasks:
            t.cancel()
        await asyncio.gather(*self._slave_tasks, return_exceptions=True)
        self._tasks = [t for t in self._tasks if t not in self._slave_tasks]
        self._slave_tasks.clear()
        self.ha_client = None
        self.slave_sync = None
        await self._loop.run_in_executor(None, self._start_master_store)
        if self.send_processor.dedup is not None:
            self.send_processor.dedup.forget()  # rebuilt from the replicated CommitLog at the first put
        c.broker_role = self.master_role
        c.broker_id = 0
        self.ha_service = HAService(c, self.store, self.store_config.sync_flush_timeout)
        await self.ha_service.start(c.listen_port + 1 if c.ha_listen_port < 0 else c.ha_listen_port)
        self._tasks.append(self._loop.create_task(self.transaction_check.run()))
        self._tasks.append(self._loop.create_task(self.pop_revive.run()))
        self.register_soon()
        log.warning("broker %s is master (%s) on %s", c.broker_name, c.broker_role, c.broker_addr)

    def _start_master_store(self) -> None:
        self.store.become_master()
        self.schedule.start()
        self._load_timer()
        if self.timer is not None:
            self.store.add_arrival_listener(self.timer.on_arrival)
            self.timer.start()

    def fence_master(self) -> None:
        """Controller mode: another replica was elected; this one takes no more writes (SLAVE answers)."""
        self.config.broker_role = "SLAVE"
        self.store.is_slave = True

    def _load_and_start_store(self) -> None:
        """The configs, the store (with its recovery) and the schedule services, loaded and started."""
        if isinstance(self.timer, TimerProcess) and not self.config.is_slave:
            self.timer.prestart()  # its start-up overlaps the store's recovery
        self.topics.load()
        self.offsets.load()
        self.groups.load()
        if not self.store.load():
            raise RuntimeError(f"the store under {self.store_config.store_path_root_dir} failed to load")
        if self.replicas is not None:
            self.replicas.truncate_divergent_tail()
        self.store.add_arrival_listener(self._on_arrival)
        self.store.add_arrival_listener(self.pop.on_arrival)
        self.schedule.load()
        self.transactions.load()
        self.store.add_arrival_listener(self.schedule.on_arrival)
        if self.config.is_slave:
            # A slave delivers no scheduled message and keeps no timer state: its CommitLog is the master's
            # copy (RocketMQ starts these services on masters only). Promoted, its timer service rebuilds
            # the wheel from that copy (schedule/timer_takeover.py).
            mark_replica(self.store_config.store_path_root_dir)
        else:
            self._load_timer()
        self.store.start()
        if not self.config.is_slave:
            self.schedule.start()
            if self.timer is not None:
                self.store.add_arrival_listener(self.timer.on_arrival)
                self.timer.start()
        self.topics.persist()

    def _load_timer(self) -> None:
        if self.timer is None:
            return
        try:
            self.timer.load()
        except OSError as e:
            if not is_disk_full(e):
                raise
            # Its load writes its checkpoint. Timer messages still go to the timer topic in the
            # CommitLog, and a start with space delivers them from there.
            log.error("timer service not started, the disk is full (%s): timer messages are kept and "
                      "delivered after a restart with space", e)
            self.timer = None

    async def stop(self) -> None:
        if self.replicas is not None:
            await self.replicas.stop()  # the lease revoked: the others need not wait out its TTL
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.ha_service is not None:
            await self.ha_service.stop()
        await self._unregister_all()
        await self.server.stop()
        if self.acl_worker is not None:
            self.acl_worker.close()
        self.pull_hold.cancel_all()
        await self.namesrv_client.close()
        self.offsets.persist(force=True)
        self.groups.persist()
        self.topics.persist()
        # A failure here (a full disk, say) must not skip the store's shutdown, which flushes the CommitLog
        # and ConsumeQueues; what these failed to write is recovered from the CommitLog at the next start.
        for what, step in (("delay-level service", self.schedule.shutdown),
                           ("timer service", self.timer.shutdown if self.timer is not None else None),
                           ("transaction state", self.transactions.persist)):
            if step is None:
                continue
            try:
                step()
            except OSError as e:
                if not is_disk_full(e):
                    log.exception("stopping the %s failed", what)
                else:
                    log.error("stopping the %s failed: %s", what, e)
        self.store.shutdown()

    # NameServer registration ------------------------------------------------------------------
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.config.namesrv_addr.split(";") if a.strip()]

    def register_soon(self) -> None:
        if self._register_event is not None:
            self._register_event.set()

    async def registered(self) -> None:
        """Register soon, and wait until a registration with every NameServer that began after this call has
        ended, however it ended (a NameServer down is logged; the periodic registration tries again).
        RocketMQ answers UPDATE_AND_CREATE_TOPIC once it registered the topic: a client that creates a topic
        and sends to it at once finds its route, not the default topic's. At once when nothing registers."""
        if self._register_event is None or not self.namesrv_addrs():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._register_waiters.append(waiter)
        self._register_event.set()
        await waiter

    async def _register_loop(self) -> None:
        assert self._register_event is not None
        period = self.config.register_name_server_period / 1000.0
        try:
            while True:
                # Those who asked before this registration's request is built: it carries what they changed.
                waiters, self._register_waiters = self._register_waiters, []
                try:
                    await self.register_all()
                finally:
                    _release(waiters)
                try:  # not wait_for: on 3.11 it drops a cancel that meets register_soon() (CPython gh-86296),
                    # and shutdown would then wait on this loop for ever
                    async with asyncio.timeout(period):
                        await self._register_event.wait()
                except TimeoutError:
                    pass
                self._register_event.clear()
        finally:  # cancelled at shutdown: nobody waits for a registration that will not come
            _release(self._register_waiters)
            self._register_waiters = []

    def _register_request(self, code: int) -> RemotingCommand:
        c = self.config
        wrapper = self.topics.wrapper()
        if c.broker_permission & PERM_RW != PERM_RW:
            # A broker that may not be written (or read) says so in its routes, as RocketMQ's registerBrokerAll
            # does: every topic's perm masked with brokerPermission, so producers (or consumers) go elsewhere.
            wrapper["topicConfigTable"] = {n: {**tc, "perm": tc["perm"] & c.broker_permission}
                                           for n, tc in wrapper["topicConfigTable"].items()}
        body = fastjson.dumpb({"topicConfigSerializeWrapper": wrapper, "filterServerList": []})
        ext = RegisterBrokerRequestHeader(
            broker_name=c.broker_name, broker_addr=c.broker_addr, cluster_name=c.broker_cluster_name,
            ha_server_addr=c.ha_server_addr, broker_id=c.broker_id, compressed=False, body_crc32=body_crc(body),
            heartbeat_timeout_millis=c.broker_not_active_timeout_millis,
        ).to_ext()
        cmd = RemotingCommand(code=code, ext_fields=ext, body=body if code == RC.REGISTER_BROKER else None)
        if self.namesrv_signer is not None:
            self.namesrv_signer.sign(cmd.ext_fields, cmd.body)
        return cmd

    async def register_all(self) -> None:
        for addr in self.namesrv_addrs():
            try:
                resp = await self.namesrv_client.invoke(addr, self._register_request(RC.REGISTER_BROKER),
                                                        self.config.register_broker_timeout_mills / 1000.0)
                if resp.code != ResponseCode.SUCCESS:
                    log.warning("register to %s refused: [%s] %s", addr, resp.code, resp.remark)
                else:
                    self._on_registered(resp.ext_fields)
            except RemotingError as e:
                log.warning("register to name server %s failed: %s", addr, e)

    def _on_registered(self, answer: dict[str, str]) -> None:
        """A slave learns its master from the NameServer's answer (haServerAddr, masterAddr), unless
        haMasterAddress names it (RocketMQ's updateMasterHAServerAddrPeriodically)."""
        if self.replicas is not None:
            return  # controller mode: the master is the one etcd's record names
        h = RegisterBrokerResponseHeader.parse(answer)
        if self.ha_client is not None and not self.config.ha_master_address:
            self.ha_client.update_master_address(h.ha_server_addr)
        if self.slave_sync is not None:
            self.slave_sync.update_master_addr(h.master_addr)

    async def _unregister_all(self) -> None:
        for addr in self.namesrv_addrs():
            try:
                await self.namesrv_client.invoke(addr, self._register_request(RC.UNREGISTER_BROKER), 3.0)
            except RemotingError as e:
                log.warning("unregister from %s failed: %s", addr, e)

    # housekeeping -----------------------------------------------------------------------------
    async def _housekeeping_loop(self) -> None:
        assert self._loop is not None
        interval = self.config.flush_consumer_offset_interval / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await self._loop.run_in_executor(None, self.offsets.persist)
                self.consumers.scan_not_active(self.config.channel_expired_timeout)
            except Exception:
                log.exception("housekeeping failed")

    # callbacks --------------------------------------------------------------------------------
    def _on_arrival(self, arrivals: dict[tuple[str, int], int]) -> None:
        """From the reput thread: hop onto the loop (once a round) to wake held pulls."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.pull_hold.notify_arrivals, arrivals)

    def _on_consumer_ids_changed(self, group: str, info: ConsumerGroupInfo) -> None:
        if not self.config.notify_consumer_ids_changed_enable:
            return
        ids_changed = NotifyConsumerIdsChangedRequestHeader(consumer_group=group)
        for conn in list(info.channels):
            conn.invoke_oneway(RemotingCommand(code=RC.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields=ids_changed.to_ext()))

    def _on_connection_closed(self, conn: Connection) -> None:
        client_id = conn.attributes.get("client_id")
        if client_id:
            for group, info in list(self.consumers.groups.items()):
                if conn in info.channels:
                    self.locks.unlock_client(group, client_id)
        self.consumers.connection_closed(conn)
        for members in self.producers.values():
            members.pop(conn, None)

    # hooks for processors ---------------------------------------------------------------------
    def cancel_lookup(self, msg: InnerMessage) -> Awaitable[CancelTarget] | None:
        """For a timer cancel (TIMER_DEL_UNIQKEY): the lookup of its target, to await before
        ``rewrite_before_store``; None for any other message."""
        key = self.timer_rewrite.cancel_of(msg)
        return None if key is None else self._lookup_cancel(*key)

    async def _lookup_cancel(self, topic: str, uniq: str) -> CancelTarget:
        store, face = self.store, self.store_face
        if store.has_index:
            # A cancel sent right after its target: let reput index the target first (usually done).
            await face.wait_reput(store.max_phy_offset, CANCEL_INDEX_WAIT_S)
        return await face.run(find_cancel_target, store, topic, uniq, int(time.time() * 1000))

    def rewrite_before_store(self, msg: InnerMessage) -> None:
        """Run the rewrite hooks that concern ``msg``. Most messages concern none: a hook declaring
        ``markers`` is skipped when none of them occurs in the message's properties text (a message whose
        properties were already parsed, or whose sysflag has a transaction type, meets every hook)."""
        text = msg.properties_text
        parsed = msg.is_parsed or sf.transaction_type(msg.sysflag) != sf.TRANSACTION_NOT_TYPE
        for hook in self.rewrite_hooks:
            markers = getattr(hook, "markers", None)
            if markers is None or parsed:
                hook(msg)
                continue
            for m in markers:  # a loop, not any(genexpr): this runs for every hook of every send
                if m in text:
                    hook(msg)
                    break

    def message_filter(self, group: str, sub: SubscriptionData) -> Callable[[int, memoryview], bool] | None:
        """The CommitLog-level filter of a subscription: SQL92 evaluated on each candidate record's
        properties, so unmatched messages never leave the broker. None for tag subscriptions (the
        ConsumeQueue tag-hash filter does those) and when enablePropertyFilter is off."""
        if sub.expression_type in ("", "TAG") or not self.config.enable_property_filter:
            return None
        try:
            return self.filters.get(sub.expression_type, sub.sub_string).record_filter
        except FilterSyntaxError:
            # check_expression refuses the pull before any read; were it skipped, deliver nothing, not all
            return lambda tags_code, record: False

    def check_expression(self, sub: SubscriptionData) -> str | None:
        """Why a non-TAG subscription cannot be served (position and reason), or None if it can."""
        if not self.config.enable_property_filter:
            return f"The broker does not support consumer to filter message by {sub.expression_type}"
        try:
            self.filters.get(sub.expression_type, sub.sub_string)
        except FilterSyntaxError as e:
            return str(e)
        return None

    def stats_put(self, topic: str, count: int, res: AppendResult) -> None:
        if res.status == PutStatus.PUT_OK:
            self.stats.on_put(topic, count, res.wrote_bytes)

    def stats_get(self, group: str, topic: str, count: int, size: int) -> None:
        self.stats.on_get(group, topic, count, size)

    def runtime_info(self) -> dict[str, str]:
        info = {
            # RocketMQ's: MQVersion's name and number of the version the broker writes in its headers
            "brokerVersionDesc": version_desc(CURRENT_VERSION),
            "brokerVersion": str(CURRENT_VERSION),
            "bootTimestamp": str(self._started_ms),
            "msgPutTotalYesterdayMorning": str(self.stats.put_yesterday_morning),
            "msgPutTotalTodayMorning": str(self.stats.put_today_morning),
            "msgPutTotalTodayNow": str(self.stats.put_total),
            "msgGetTotalYesterdayMorning": str(self.stats.get_yesterday_morning),
            "msgGetTotalTodayMorning": str(self.stats.get_today_morning),
            "msgGetTotalTodayNow": str(self.stats.get_total),
            "putTps": self.stats.put_tps(),
            "getTransferedTps": self.stats.get_transfered_tps(),
            "getTransferredTps": self.stats.get_transfered_tps(),  # the 5.x name, which 5.x's clusterList reads
            "earliestMessageTimeStamp": str(self.store.earliest_message_time()),
            # sends wait for the group commit, RocketMQ's send thread pool queue; pulls run as they come
            "sendThreadPoolQueueSize": str(len(self.send_processor.pending_sends())),
            "sendThreadPoolQueueHeadWaitTimeMills": str(self.send_processor.head_wait_ms()),
            "pullThreadPoolQueueSize": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "ackThreadPoolQueueSize": "0",  # acks too: RocketMQ 5's clusterList prints N for a missing key
            "ackThreadPoolQueueHeadWaitTimeMills": "0",
            "pageCacheLockTimeMills": str(int(self.store.page_cache_lock_time_ms())),  # RocketMQ's: whole ms
            "commitLogMaxOffset": str(self.store.max_phy_offset),
            "commitLogMinOffset": str(self.store.min_phy_offset),
            "pullHoldCount": str(self.pull_hold.held_count()),
            "connectionCount": str(len(self.server.connections)),
            "pid": str(os.getpid()),
        }
        for key, value in self.schedule_stats.snapshot().items():
            info[f"schedule.{key}"] = str(value)
        info["schedule.caughtUp"] = str(self.schedule.caught_up)
        for level, n in self.schedule.pending().items():
            info[f"schedule.pending.level{level}"] = str(n)
        try:
            info.update(timer_runtime_info(self))
        except Exception:
            log.exception("timer runtime info failed")
        info.update(self.transactions.runtime_info())
        info["brokerRole"] = self.config.broker_role
        # 5.x's clusterList #ACTIVATED: a broker that serves writes (a master) says true, as RocketMQ's does
        info["brokerActive"] = str(not self.config.is_slave).lower()
        if self.ha_service is not None:
            info.update(self.ha_service.runtime_info())
        if self.ha_client is not None:
            info.update(self.ha_client.runtime_info())
        if self.replicas is not None:
            info.update(self.replicas.runtime_info())
        info.update(self.pop_revive.runtime_info())
        try:
            info.update(self.store.runtime_info())
        except Exception:
            log.exception("store runtime info failed")
        return info


def _release(waiters: list[asyncio.Future[None]]) -> None:
    for w in waiters:
        if not w.done():
            w.set_result(None)
