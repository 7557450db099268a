"""Controller mode (docs/replication.md, "Controller mode"): automatic failover in the spirit of RocketMQ 5's
controller (RIP-44) — a SyncStateSet, an epoch per master term, a master elected only from the SyncStateSet —
with its state and leases held in etcd rather than in a consensus protocol written here."""
