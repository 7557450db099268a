"""The broker's side of scheduled delivery: the send-path rewrites, the timer process, the admin views (RocketMQ's broker/schedule)."""
