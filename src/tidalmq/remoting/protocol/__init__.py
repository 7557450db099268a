"""Every request a TidalMQ server serves, declared once (RocketMQ's remoting.protocol.header classes):
``requests.REQUESTS`` and the header classes of ``broker_headers`` and ``namesrv_headers``."""
