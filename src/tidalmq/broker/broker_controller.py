"""BrokerController: wires the store, the managers and the processors, and keeps the broker
registered with its NameServers."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidalmq.acl import acl_home, broker_validator
from tidalmq.acl.signature_worker import SignatureWorker
from tidalmq.acl.validator import PlainAccessValidator
from tidalmq.broker.client.consumer_manager import (
    ClientChannelInfo,
    ConsumerGroupInfo,
    ConsumerManager,
)
from tidalmq.broker.client.rebalance_lock import RebalanceLockManager
from tidalmq.broker.config import BrokerConfig
from tidalmq.broker.controller.replicas_manager import ReplicasManager
from tidalmq.broker.filter.expression_filter import ExpressionFilters
from tidalmq.broker.live_config import FRAME_HEADROOM
from tidalmq.broker.longpolling.pull_request_hold import PullRequestHoldService
from tidalmq.broker.message import InnerMessage
from tidalmq.broker.offset.consumed import consumed_commit_log_offset
from tidalmq.broker.offset.consumer_offset import ConsumerOffsetManager
from tidalmq.broker.out.broker_outer_api import BrokerOuterAPI
from tidalmq.broker.pop.revive import PopReviveService
from tidalmq.broker.pop.service import PopService
from tidalmq.broker.processors.registry import register_processors
from tidalmq.broker.processors.send import SendMessageProcessor
from tidalmq.broker.replication import BrokerReplication
from tidalmq.broker.schedule.admin import runtime_info as schedule_runtime_info
from tidalmq.broker.schedule.child import EarlyChild
from tidalmq.broker.schedule.services import ScheduleServices
from tidalmq.broker.slave.slave_synchronize import SlaveSynchronize
from tidalmq.broker.stats import BrokerStats
from tidalmq.broker.subscription.subscription_group import SubscriptionGroupManager
from tidalmq.broker.topic.topic_config import TopicConfigManager
from tidalmq.broker.transaction.check_service import TransactionCheckService
from tidalmq.broker.transaction.half_service import TransactionalMessageService
from tidalmq.common import sysflag as sf
from tidalmq.common.fileutil import is_disk_full
from tidalmq.common.mqversion import version_desc
from tidalmq.common.msgid import host_bytes
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.command import CURRENT_VERSION, RemotingCommand
from tidalmq.remoting.config import RemotingServerConfig
from tidalmq.remoting.protocol.broker_headers import NotifyConsumerIdsChangedRequestHeader
from tidalmq.remoting.tls import TlsConfig, server_context
from tidalmq.remoting.transport import Connection, RemotingServer
from tidalmq.store.api import MessageStore
from tidalmq.store.config import MessageStoreConfig
from tidalmq.store.message_store import AppendResult, DefaultMessageStore, PutStatus

if TYPE_CHECKING:
    from tidalmq.broker.schedule.hooks import TimerRewrite
    from tidalmq.common.metrics_exporter import PromExporter
    from tidalmq.ha.service import HAService
    from tidalmq.schedule.timer_service import CancelTarget

log = logging.getLogger(__name__)


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
        master_role = config.broker_role
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
        self.filters = ExpressionFilters(config)
        self.store_host_bytes = host_bytes(config.broker_ip1)
        self.store: MessageStore = DefaultMessageStore(store_config, store_host=(config.broker_ip1, config.listen_port))
        self.store.is_slave = config.is_slave
        # Forcible cleanup keeps what some group has not consumed (docs/broker.md, "A full disk").
        self.store.consumed_commit_log_offset = self._consumed_commit_log_offset
        tls = tls or TlsConfig()
        # The frame limit is fixed here; UPDATE_BROKER_CONFIG keeps maxMessageSize within it.
        self.max_frame = max(16 * 1024 * 1024, store_config.max_message_size + FRAME_HEADROOM)
        # The properties file the broker was started from (-c), where UPDATE_BROKER_CONFIG persists live keys.
        self.config_file: Path | None = None
        self.server = RemotingServer(host, config.listen_port, max_frame=self.max_frame,
                                     config=remoting_config, ssl_context=server_context(tls), tls_mode=tls.server_mode)
        self.outer_api = BrokerOuterAPI(config, self.topics, tls, lambda answer: self.replication.on_registered(answer))
        # ACL 1.0 (docs/acl.md): every request checked before its processor; a broken file stops start-up.
        self.acl: PlainAccessValidator | None = None
        self.acl_worker: SignatureWorker | None = None
        if config.acl_enable:
            self.acl = broker_validator(acl_home(self.home), config.acl_plain_file or None)
            self.server.access_validator = self.acl
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._started_ms = int(time.time() * 1000)
        # RocketMQ's BrokerStatsManager (broker/stats.py): the one source of put/get counts, read by
        # VIEW_BROKER_STATS_DATA, the consume stats, the runtime info and the Prometheus counters
        self.stats = BrokerStats(config.broker_cluster_name)
        # Scheduled delivery: delay levels and the timer, with the send-path rewrites that feed them.
        self.scheduled = ScheduleServices(self.store, store_config, cfg_dir, schedule_child)
        # Transactions: half messages, END_TRANSACTION and check-back (docs/transactions.md).
        self.transactions = TransactionalMessageService(
            config, self.store, self.topics, self.producers,
            lambda req, msg: self.send_processor.store_internal(req, msg), cfg_dir / "transactionState.json")
        self.transaction_check = TransactionCheckService(self.transactions, config)
        # Hooks the later layers install; the transactions' goes first, so that the schedule hooks never
        # see a half message.
        self.rewrite_hooks: list[Callable[[InnerMessage], None]] = [self.transactions.rewrite,
                                                                    *self.scheduled.rewrite_hooks]
        # Built with the other processors at registration (processors/registry.py): the send path for the
        # messages the broker builds itself.
        self.send_processor: SendMessageProcessor
        # Replication (docs/replication.md): a master serves slaves on haListenPort; a slave streams
        # the master's CommitLog and copies its metadata.
        slave_sync = (SlaveSynchronize(self.outer_api, self.topics, self.offsets, self.scheduled.schedule, self.groups,
                                       lambda text: self.scheduled.delay_table.adopt(text, self.config_file))
                      if config.is_slave else None)
        self.replication = BrokerReplication(config, self.store, store_config.sync_flush_timeout, slave_sync,
                                             master_role)
        # Pop consumption (docs/pop.md): the service the remoting processors (and a gRPC endpoint) call.
        self.pop = PopService(config, self.store, self.topics, self.groups, self.offsets, self.filters, self.stats,
                              self.scheduled, lambda req, msg: self.send_processor.store_internal(req, msg),
                              self.register_soon)
        self.pop_revive = PopReviveService(self.store, self.offsets, self.pop)
        self.replicas: ReplicasManager | None = None
        if config.enable_controller_mode:
            self.replicas = ReplicasManager(config, self.store, store_config.store_path_root_dir, self.replication,
                                            self.become_master)
        self._register_processors()

    def _register_processors(self) -> None:
        self.send_processor = register_processors(self)
        s = self.server
        s.close_listeners.append(self._on_connection_closed)

    # lifecycle --------------------------------------------------------------------------------
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.scheduled.attach_loop(self._loop)
        if self.replicas is not None:
            await self.replicas.prepare()  # the group's history, to cut a divergent tail at load
        # Loading recovers the store after a crash (a CommitLog scan, queues re-dispatched): seconds on a
        # large store. Off the loop, so what already serves on it (a standalone's NameServer) keeps answering.
        await self._loop.run_in_executor(None, self._load_and_start_store)
        ephemeral = self.config.listen_port == 0
        await self.server.start()
        self.config.listen_port = self.server.port
        await self.replication.start(self._loop, ephemeral)
        self._tasks.extend(await self.outer_api.start(self._loop))
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

    async def become_master(self) -> None:
        """Controller mode's promotion at runtime: the slave side stops, the store takes puts, the
        master's services start, and the broker registers as brokerId 0."""
        assert self._loop is not None
        c = self.config
        await self.replication.stop_slave()
        await self._loop.run_in_executor(None, self._start_master_store)
        if self.send_processor.dedup is not None:
            self.send_processor.dedup.forget()  # rebuilt from the replicated CommitLog at the first put
        await self.replication.start_master()
        self._tasks.append(self._loop.create_task(self.transaction_check.run()))
        self._tasks.append(self._loop.create_task(self.pop_revive.run()))
        self.register_soon()
        log.warning("broker %s is master (%s) on %s", c.broker_name, c.broker_role, c.broker_addr)

    def _start_master_store(self) -> None:
        self.store.become_master()
        self.scheduled.load_timer()
        self.scheduled.start()

    def _load_and_start_store(self) -> None:
        """The configs, the store (with its recovery) and the schedule services, loaded and started."""
        if not self.config.is_slave:
            self.scheduled.prestart()
        self.topics.load()
        self.offsets.load()
        self.groups.load()
        if not self.store.load():
            raise RuntimeError(f"the store under {self.store_config.store_path_root_dir} failed to load")
        if self.replicas is not None:
            self.replicas.truncate_divergent_tail()
        self.store.add_arrival_listener(self._on_arrival)
        self.store.add_arrival_listener(self.pop.on_arrival)
        self.scheduled.load(self.config.is_slave)
        self.transactions.load()
        self.store.start()
        if not self.config.is_slave:
            self.scheduled.start()
        self.topics.persist()

    async def stop(self) -> None:
        if self.replicas is not None:
            await self.replicas.stop()  # the lease revoked: the others need not wait out its TTL
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        await self.replication.stop()
        await self.outer_api.unregister_all()
        await self.server.stop()
        if self.acl_worker is not None:
            self.acl_worker.close()
        self.pull_hold.cancel_all()
        await self.outer_api.close()
        self.offsets.persist(force=True)
        self.groups.persist()
        self.topics.persist()
        # A failure here (a full disk, say) must not skip the store's shutdown, which flushes the CommitLog
        # and ConsumeQueues; what these failed to write is recovered from the CommitLog at the next start.
        dedup = self.send_processor.dedup
        steps = [*self.scheduled.shutdown_steps(), ("transaction state", self.transactions.persist)]
        if dedup is not None:
            steps.append(("de-duplication window", dedup.snapshot))
        for what, step in steps:
            try:
                step()
            except OSError as e:
                if not is_disk_full(e):
                    log.exception("stopping the %s failed", what)
                else:
                    log.error("stopping the %s failed: %s", what, e)
        self.store.shutdown()

    def start_metrics_exporter(self) -> PromExporter | None:
        """metricsExporterType=PROM: the Prometheus endpoint (call on the loop, after start)."""
        # Imported when asked: a broker that exports nothing (an in-process one) never loads prometheus_client.
        from tidalmq.broker.metrics.broker_metrics import BrokerMetrics

        return BrokerMetrics(self.config, self.server, self.store, self.stats, self.offsets, self.consumers,
                             self.producers, self.scheduled, self.replication).start_exporter()

    # NameServer registration (broker/out/broker_outer_api.py) ---------------------------------
    def register_soon(self) -> None:
        self.outer_api.register_soon()

    async def registered(self) -> None:
        """Once a registration that began after this call has ended (BrokerOuterAPI.registered)."""
        await self.outer_api.registered()

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
    def _consumed_commit_log_offset(self) -> tuple[int, str]:
        return consumed_commit_log_offset(self.store, self.offsets, self.consumers, self.scheduled.schedule)

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

    # the send path's view of the broker (processors/collaborators.py: SendHost) ---------------------
    @property
    def ha_service(self) -> HAService | None:
        return self.replication.ha_service

    @property
    def timer_rewrite(self) -> TimerRewrite:
        return self.scheduled.timer_rewrite

    def cancel_lookup(self, msg: InnerMessage) -> Awaitable[CancelTarget] | None:
        return self.scheduled.cancel_lookup(msg)

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
        info.update(schedule_runtime_info(self.scheduled))
        info.update(self.transactions.runtime_info())
        info["brokerRole"] = self.config.broker_role
        # 5.x's clusterList #ACTIVATED: a broker that serves writes (a master) says true, as RocketMQ's does
        info["brokerActive"] = str(not self.config.is_slave).lower()
        info.update(self.replication.runtime_info())
        if self.replicas is not None:
            info.update(self.replicas.runtime_info())
        info.update(self.pop_revive.runtime_info())
        try:
            info.update(self.store.runtime_info())
        except Exception:
            log.exception("store runtime info failed")
        return info

