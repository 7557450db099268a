"""TidalMQ: Apache RocketMQ's architecture in Python, speaking its wire protocols."""

__version__ = "0.1.0"
