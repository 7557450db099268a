"""Every broker processor registered for its request (BrokerController.registerProcessor): the one
place that says which processor serves which declared request (remoting/protocol/requests.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidalmq.broker.pop.processors import PopProcessors
from tidalmq.broker.processors.admin import AdminProcessor
from tidalmq.broker.processors.client import ClientProcessor
from tidalmq.broker.processors.consumer_manage import ConsumerManageProcessor
from tidalmq.broker.processors.end_transaction import EndTransactionProcessor
from tidalmq.broker.processors.offset_reset import OffsetResetProcessor
from tidalmq.broker.processors.pull import PullMessageProcessor
from tidalmq.broker.processors.recall import RecallMessageProcessor
from tidalmq.broker.processors.reschedule import RescheduleMessageProcessor
from tidalmq.broker.processors.send import SendMessageProcessor
from tidalmq.broker.processors.stats_admin import StatsAdminProcessor
from tidalmq.broker.schedule.admin import get_timer_metrics, refresh_timer_view
from tidalmq.remoting.protocol import requests as rq
from tidalmq.remoting.request_check import serve

if TYPE_CHECKING:
    from tidalmq.broker.broker_controller import BrokerController


def register_processors(b: BrokerController) -> SendMessageProcessor:
    """Builds every processor from the broker's parts it uses, and registers each for its requests.
    Returns the send processor, which the broker's other parts call for the messages they build."""
    s, cfg, topics, groups, store = b.server, b.config, b.topics, b.groups, b.store
    sp = SendMessageProcessor(config=cfg, store_config=b.store_config, topics=topics, store=store, stats=b.stats,
                              registration=b, host=b)
    pp = PullMessageProcessor(config=cfg, topics=topics, groups=groups, consumers=b.consumers, offsets=b.offsets,
                              store=store, pull_hold=b.pull_hold, stats=b.stats, filters=b.filters)
    cp = ClientProcessor(config=cfg, topics=topics, groups=groups, consumers=b.consumers, producers=b.producers,
                         locks=b.locks, offsets=b.offsets, store=store, filters=b.filters, registration=b)
    ap = AdminProcessor(settings=b, topics=topics, groups=groups, consumers=b.consumers, producers=b.producers,
                        offsets=b.offsets, store=store, stats=b.stats, schedule=b.scheduled.schedule, registration=b,
                        timer_view=lambda: refresh_timer_view(b.scheduled), delay_levels=b.scheduled.delay_table)
    cm = ConsumerManageProcessor(config=cfg, topics=topics, groups=groups, locks=b.locks, store=store, registration=b,
                                 sender=sp)
    reset = OffsetResetProcessor(config=cfg, topics=topics, consumers=b.consumers, offsets=b.offsets, store=store)
    st = StatsAdminProcessor(config=cfg, topics=topics, groups=groups, consumers=b.consumers, offsets=b.offsets,
                             store=store, stats=b.stats)
    end = EndTransactionProcessor(config=cfg, transactions=b.transactions)
    recall = RecallMessageProcessor(config=cfg, store_config=b.store_config, topics=topics, sender=sp)
    reschedule = RescheduleMessageProcessor(config=cfg, store_config=b.store_config, topics=topics, store=store,
                                            sender=sp, scheduled=b.scheduled)
    for send in (rq.SEND_MESSAGE, rq.SEND_MESSAGE_V2, rq.SEND_BATCH_MESSAGE):
        serve(s, send, sp.process)
    serve(s, rq.PULL_MESSAGE, pp.process)
    serve(s, rq.CONSUMER_SEND_MSG_BACK, cm.send_msg_back)
    serve(s, rq.LOCK_BATCH_MQ, cm.lock_batch)
    serve(s, rq.UNLOCK_BATCH_MQ, cm.unlock_batch)
    serve(s, rq.INVOKE_BROKER_TO_RESET_OFFSET, reset.reset_offset)
    serve(s, rq.HEART_BEAT, cp.heartbeat)
    serve(s, rq.CHECK_CLIENT_CONFIG, cp.check_client_config)
    serve(s, rq.UNREGISTER_CLIENT, cp.unregister_client)
    serve(s, rq.GET_CONSUMER_LIST_BY_GROUP, cp.consumer_list)
    serve(s, rq.QUERY_CONSUMER_OFFSET, cp.query_consumer_offset)
    serve(s, rq.UPDATE_CONSUMER_OFFSET, cp.update_consumer_offset)
    serve(s, rq.GET_MAX_OFFSET, cp.get_max_offset)
    serve(s, rq.GET_MIN_OFFSET, cp.get_min_offset)
    serve(s, rq.SEARCH_OFFSET_BY_TIMESTAMP, cp.search_offset)
    serve(s, rq.GET_EARLIEST_MSG_STORETIME, cp.earliest_msg_storetime)
    serve(s, rq.VIEW_MESSAGE_BY_ID, cp.view_message_by_id)
    serve(s, rq.QUERY_MESSAGE, cp.query_message)
    serve(s, rq.UPDATE_AND_CREATE_TOPIC, ap.update_and_create_topic)
    serve(s, rq.DELETE_TOPIC_IN_BROKER, ap.delete_topic)
    serve(s, rq.GET_ALL_TOPIC_CONFIG, ap.get_all_topic_config)
    serve(s, rq.GET_TOPIC_CONFIG, ap.get_topic_config)
    serve(s, rq.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, ap.update_subscription_group)
    serve(s, rq.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, ap.get_all_subscription_groups)
    serve(s, rq.DELETE_SUBSCRIPTIONGROUP, ap.delete_subscription_group)
    serve(s, rq.GET_BROKER_RUNTIME_INFO, ap.get_runtime_info)
    serve(s, rq.GET_BROKER_CONFIG, ap.get_broker_config)
    serve(s, rq.UPDATE_BROKER_CONFIG, ap.update_broker_config)
    serve(s, rq.GET_CONSUMER_CONNECTION_LIST, ap.get_consumer_connection_list)
    serve(s, rq.GET_PRODUCER_CONNECTION_LIST, ap.get_producer_connection_list)
    serve(s, rq.CLEAN_EXPIRED_CONSUMEQUEUE, ap.clean_expired_consume_queue)
    serve(s, rq.QUERY_TOPIC_CONSUME_BY_WHO, ap.query_topic_consume_by_who)
    serve(s, rq.QUERY_TOPICS_BY_CONSUMER, ap.query_topics_by_consumer)
    serve(s, rq.TRIGGER_DELETE_FILES, ap.trigger_delete_files)
    serve(s, rq.GET_ALL_DELAY_OFFSET, ap.get_all_delay_offset)
    serve(s, rq.GET_ALL_CONSUMER_OFFSET, ap.get_all_consumer_offset)
    serve(s, rq.GET_TIMER_METRICS, lambda conn, req, _: get_timer_metrics(b.scheduled, conn, req))
    serve(s, rq.QUERY_CONSUME_QUEUE, ap.query_consume_queue)
    serve(s, rq.VIEW_BROKER_STATS_DATA, st.view_broker_stats_data)
    serve(s, rq.GET_CONSUME_STATS, st.get_consume_stats)
    serve(s, rq.GET_BROKE_CONSUME_STATS, st.get_broke_consume_stats)
    serve(s, rq.GET_TOPIC_STATS_INFO, st.get_topic_stats_info)
    serve(s, rq.GET_CONSUMER_RUNNING_INFO, st.get_consumer_running_info)
    serve(s, rq.END_TRANSACTION, end.process)
    serve(s, rq.RECALL_MESSAGE, recall.process)
    serve(s, rq.RESCHEDULE_MESSAGE, reschedule.process)
    pop = PopProcessors(b.pop)
    serve(s, rq.POP_MESSAGE, pop.pop)
    serve(s, rq.ACK_MESSAGE, pop.ack)
    serve(s, rq.BATCH_ACK_MESSAGE, pop.batch_ack)
    serve(s, rq.CHANGE_MESSAGE_INVISIBLETIME, pop.change_invisible)
    serve(s, rq.NOTIFICATION, pop.notification)
    return sp
