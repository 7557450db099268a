"""Run in a subprocess by test_tls.py: the official 5.x client over TLS (``tls_enable=True``), trusting
the CA named by GRPC_DEFAULT_SSL_ROOTS_FILE_PATH (read by grpc once per process, hence a process of its
own). Sends one message, receives it, prints ``OK <message id>``. A fourth argument ``plain``: the same
without TLS."""

from __future__ import annotations

import sys
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer


def main(endpoint: str, topic: str, group: str, mode: str = "tls") -> int:
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=5)
    tls = mode != "plain"
    producer = Producer(config, (topic,), tls_enable=tls)
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=1, tls_enable=tls)
    try:
        producer.startup()
        consumer.startup()
        m = Message()
        m.topic, m.body = topic, b"over tls"
        sent = producer.send(m).message_id
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for got in consumer.receive(32, 15) or []:
                consumer.ack(got)
                if got.message_id == sent and got.body == b"over tls":
                    print("OK", sent, flush=True)
                    return 0
        print("not received", flush=True)
        return 1
    finally:
        consumer.shutdown()
        producer.shutdown()


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
