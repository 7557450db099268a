"""The MessagingService's RPCs, grouped as RocketMQ's proxy groups them (grpc/v2's activities): routes,
clients (heartbeat, settings, Telemetry), sends and recalls, transactions, receives, and what follows a
receive (ack, invisibility, dead letter, lite subscriptions). Each activity is given the collaborators it
uses; tidalmq.proxy.service builds them and maps each RPC to its activity."""
