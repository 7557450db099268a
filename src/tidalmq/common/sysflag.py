"""MessageSysFlag bits."""

COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x1 << 1
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 0x1 << 2
TRANSACTION_COMMIT_TYPE = 0x2 << 2
TRANSACTION_ROLLBACK_TYPE = 0x3 << 2
TRANSACTION_TYPE_MASK = 0x3 << 2
BORNHOST_V6_FLAG = 0x1 << 4
STOREHOSTADDRESS_V6_FLAG = 0x1 << 5
NEED_UNWRAP_FLAG = 0x1 << 6
INNER_BATCH_FLAG = 0x1 << 7


def transaction_type(sysflag: int) -> int:
    return sysflag & TRANSACTION_TYPE_MASK


def with_transaction_type(sysflag: int, ttype: int) -> int:
    return (sysflag & ~TRANSACTION_TYPE_MASK) | ttype
