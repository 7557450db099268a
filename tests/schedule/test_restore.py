"""restore_record: the delivered copy of a parked message, built from the parked record's bytes, is the
record an encoder would make of its fields with the real topic, queue and properties (nothing else of the
parked record changes: hosts of either family, times, flags, body CRC, reconsume times)."""

from __future__ import annotations

import pytest

from tidalmq.common import message as mc
from tidalmq.common import sysflag as sf
from tidalmq.common.naming import SCHEDULE_TOPIC, TIMER_TOPIC
from tidalmq.common.record import (
    MESSAGE_MAGIC_CODE_V2,
    RecordError,
    decode_record,
    encode_record,
    patch_for_append,
    view_record,
)
from tidalmq.schedule.restore import TIMER_PARKING_PROPERTIES, restore_record

V6 = bytes(range(16))


def parked(topic: str, props: dict[str, str], **kw: object) -> bytearray:
    rec = encode_record(topic=topic, queue_id=0, body=b"the body", properties=props, flag=7,
                        born_timestamp=1_700_000_000_123, born_port=4321, store_port=10911, reconsume_times=2,
                        **kw)  # type: ignore[arg-type]
    patch_for_append(rec, 0, 55, 123_456, 1_700_000_000_999)  # as appended
    return rec


@pytest.mark.parametrize("kw", [
    {},
    {"born_host": V6, "store_host": V6},
    {"born_host": V6, "sysflag": sf.TRANSACTION_COMMIT_TYPE},
    {"magic": MESSAGE_MAGIC_CODE_V2},
], ids=["ipv4", "ipv6", "mixed-commit", "v2-magic"])
def test_restored_record_is_the_parked_one_in_its_real_topic(kw: dict[str, object]) -> None:
    props = {"UNIQ_KEY": "U1", "KEYS": "k1 k2", "TAGS": "t", "user": "é", mc.REAL_TOPIC: "Real", mc.REAL_QID: "3",
             mc.TIMER_DELIVER_MS: "99", mc.TIMER_OUT_MS: "99", mc.TIMER_ROLL_TIMES: "1"}
    rec = parked(TIMER_TOPIC, props, **kw)
    topic, qid, out = restore_record(view_record(rec), {mc.TIMER_DEQUEUE_MS: "5"}, dropped=TIMER_PARKING_PROPERTIES)
    m, v = decode_record(rec), view_record(rec)
    # RocketMQ's timer delivery keeps TIMER_DELIVER_MS and TIMER_OUT_MS (TidalMQ never rolls)
    want = {k: v for k, v in props.items() if k != mc.TIMER_ROLL_TIMES}
    props_sec = {**props, mc.TIMER_DELAY_SEC: "5"}
    _t, _q, out_sec = restore_record(view_record(parked(TIMER_TOPIC, props_sec, **kw)), dropped=TIMER_PARKING_PROPERTIES)
    assert mc.TIMER_DELAY_SEC not in decode_record(out_sec).properties  # a relative request would delay a re-send
    want[mc.TIMER_DEQUEUE_MS] = "5"
    expected = encode_record(topic="Real", queue_id=3, body=m.body, properties=want, flag=m.flag, sysflag=m.sysflag,
                             born_timestamp=m.born_timestamp, born_host=bytes(v.born_host_raw), born_port=4321,
                             store_host=bytes(v.store_host_raw), store_port=10911, reconsume_times=2,
                             body_crc=m.body_crc)
    assert (topic, qid) == ("Real", 3)
    assert out == expected
    back = decode_record(out, check_crc=True)
    assert back.properties == want and back.born_host == m.born_host and back.store_host == m.store_host


def test_delay_level_copy_keeps_its_properties_and_bad_parkings_are_refused() -> None:
    # ScheduleMessageService.messageTimeUp: DELAY and any timer property go
    rec = parked(SCHEDULE_TOPIC, {mc.DELAY: "3", mc.REAL_TOPIC: "R", mc.REAL_QID: "x", "a": "b", mc.TIMER_DELIVER_MS: "9"})
    topic, qid, out = restore_record(view_record(rec))
    assert (topic, qid) == ("R", 0)  # an unreadable REAL_QID is queue 0
    assert decode_record(out).properties == {mc.REAL_TOPIC: "R", mc.REAL_QID: "x", "a": "b"}
    with pytest.raises(ValueError, match="REAL_TOPIC"):
        restore_record(view_record(parked(SCHEDULE_TOPIC, {mc.DELAY: "3"})))
    with pytest.raises(RecordError, match="topic too long"):
        restore_record(view_record(parked(SCHEDULE_TOPIC, {mc.REAL_TOPIC: "t" * 128})))
