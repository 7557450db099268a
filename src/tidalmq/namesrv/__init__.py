"""The NameServer: broker registration, routes by topic, cluster info and KV config."""
