"""Apache Kafka (the ``kafka`` peer's KRaft node and settings) driven by its own Java client
(tidalmq.bench.KafkaLoad in bench/compare/jvm/loadgen, run with the peer's kafka-clients jar): W1 only, as
for the ``kafka`` peer, whose aiokafka producer bounds it well below what the broker does per core."""

from __future__ import annotations

from bench.compare import jload
from bench.compare.peers import kafka

workloads = jload  # run.py runs this module's W1


class Server(kafka.Server):
    name = "kafka_java"

    def settings(self) -> dict[str, str]:
        return {**super().settings(),
                "client": f"Kafka's Java client (kafka-clients {kafka.pinned('kafka', 'kafka.version')}, "
                f"tidalmq.bench.KafkaLoad): acks=all, {jload.BATCH * jload.BATCH_WINDOW} records in flight, linger.ms "
                f"at its default (5) for the throughput and 0 for the paced latency; a group consumer from the "
                f"earliest offset in the same JVM ({' '.join(jload.HEAP)})"}


Client = kafka.Client  # topic creation (setup) only
