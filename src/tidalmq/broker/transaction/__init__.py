"""Transactional messages: half messages, END_TRANSACTION decisions, op records and the check-back service
(RocketMQ's TransactionalMessageService, TransactionalMessageCheckService). See docs/transactions.md."""
