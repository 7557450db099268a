"""RocketMQ's version names (MQVersion.getVersionDesc) from the number a client sends."""

from tidalmq.common.mqversion import VERSION_NAMES, version_desc, version_ordinal


def test_names_follow_rocketmqs_enum() -> None:
    assert version_desc(0) == "V3_0_0_SNAPSHOT" and version_desc(15) == "V3_0_0_FINAL"
    assert version_desc(version_ordinal("V4_9_4")) == "V4_9_4"
    assert version_ordinal("V4_9_4") == version_ordinal("V4_9_4_SNAPSHOT") + 1
    # 3.3 to 3.9 have no x.y.0 release: 3.2.9 is followed by 3.3.1
    assert VERSION_NAMES[version_ordinal("V3_2_9") + 1] == "V3_3_1_SNAPSHOT"
    assert VERSION_NAMES[-2:] == ("V5_9_9", "HIGHER_VERSION") and len(VERSION_NAMES) == 613
    assert version_desc(10**6) == "HIGHER_VERSION"  # past the end: the last name, as RocketMQ's
