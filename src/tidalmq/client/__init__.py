"""TidalMQ's Python client for the remoting protocol."""
