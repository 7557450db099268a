"""The store: CommitLog, ConsumeQueue, index, checkpoint, flush, reput and retention (synchronous)."""
