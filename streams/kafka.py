"""Kafka client configuration derived from Settings, for aiokafka/Faust and librdkafka alike.

Every client in barcast gets its connection and security options here, so a production cluster
with SASL_SSL works for the worker, `barcast replay` and `barcast tail` from the same settings.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from streams.settings import Settings

_QUIET = logging.getLogger("barcast.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


class BrokerUnavailable(ConnectionError):
    """No Kafka metadata from the configured bootstrap servers within the timeout."""


def bootstrap_servers(settings: Settings) -> str:
    if settings.embedded:
        return f"127.0.0.1:{settings.embedded_port}"
    return ",".join(settings.brokers)


# OpenSSL's reason in librdkafka's handshake error, e.g. "certificate verify failed".
TLS_REASON = re.compile(r"SSL routines::([^:(]+)")


def unavailable_message(bootstrap: str, timeout_s: float, tls_failure: str = "") -> str:
    if tls_failure:
        return (
            f"no Kafka broker answered at {bootstrap} within {timeout_s:.0f}s: the TLS handshake "
            f"failed ({tls_failure}): set BARCAST_SSL_CAFILE to the CA certificate (PEM) that "
            f"signed the broker's, and check that BARCAST_BROKER names a host it was issued for"
        )
    return (
        f"no Kafka broker answered at {bootstrap} within {timeout_s:.0f}s: check BARCAST_BROKER, "
        f"that the broker is running (`barcast broker` starts the embedded one) and reachable, "
        f"and the BARCAST_SECURITY_* settings"
    )


class TlsFailures:
    """A librdkafka `error_cb` keeping the reason of the last failed TLS handshake, so the
    message names the setting to fix instead of librdkafka's own property names."""

    def __init__(self) -> None:
        self.reason = ""

    def __call__(self, error: Any) -> None:
        from confluent_kafka import KafkaError

        if error.code() == KafkaError._SSL:
            match = TLS_REASON.search(error.str())
            self.reason = match.group(1).strip() if match else error.str()


def confluent_config(settings: Settings, **extra: Any) -> dict[str, Any]:
    """librdkafka properties (confluent-kafka), with its own log lines silenced: barcast
    reports connection failures itself, once, instead of a line per retry."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers(settings),
        "security.protocol": settings.security_protocol.lower(),
        "logger": _QUIET,
    }
    if settings.sasl_mechanism:
        config["sasl.mechanism"] = settings.sasl_mechanism
        config["sasl.username"] = settings.sasl_username
        config["sasl.password"] = settings.sasl_password
    if settings.ssl_cafile:
        config["ssl.ca.location"] = settings.ssl_cafile
    config.update(extra)
    return config


def aiokafka_config(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for aiokafka producers and consumers."""
    config: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers(settings),
        "security_protocol": settings.security_protocol,
    }
    if settings.sasl_mechanism:
        config["sasl_mechanism"] = settings.sasl_mechanism
        config["sasl_plain_username"] = settings.sasl_username
        config["sasl_plain_password"] = settings.sasl_password
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        from aiokafka.helpers import create_ssl_context

        config["ssl_context"] = create_ssl_context(cafile=settings.ssl_cafile or None)
    return config


def wait_for_metadata(
    bootstrap: str, timeout_s: float, settings: Settings | None = None
) -> dict[str, int]:
    """Block until the cluster answers a metadata request; return {topic: partitions}."""
    from confluent_kafka.admin import AdminClient

    base = Settings(broker=bootstrap) if settings is None else settings
    config = confluent_config(base)
    config["bootstrap.servers"] = bootstrap
    tls_failures = TlsFailures()
    config["error_cb"] = tls_failures
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            metadata = admin.list_topics(timeout=max(0.2, min(remaining, 2.0)))
            return {name: len(topic.partitions) for name, topic in metadata.topics.items()}
        except Exception:
            if time.monotonic() >= deadline:
                admin.poll(0)  # serves the queued error callbacks
                message = unavailable_message(bootstrap, timeout_s, tls_failures.reason)
                raise BrokerUnavailable(message) from None
            time.sleep(0.1)


def ensure_topics(
    settings: Settings,
    topics: list[str],
    partitions: int | None = None,
    config: dict[str, str] | None = None,
) -> None:
    """Create missing topics with the configured partitions and replication (and `config`,
    e.g. a compacted cleanup policy)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = bootstrap_servers(settings)
    existing = wait_for_metadata(bootstrap, settings.connect_timeout_s, settings)
    missing = [t for t in topics if t not in existing]
    if not missing:
        return
    admin = AdminClient(confluent_config(settings))
    count = partitions or settings.partitions
    futures = admin.create_topics(
        [NewTopic(t, count, settings.replication, config=config or {}) for t in missing]
    )
    for topic, future in futures.items():
        try:
            future.result(timeout=settings.connect_timeout_s)
        except Exception as exc:
            if "already exists" not in str(exc).lower():
                raise RuntimeError(
                    f"could not create topic {topic!r} on {bootstrap}: {exc}"
                ) from exc


def pipeline_topics(settings: Settings) -> list[str]:
    """The topics a worker with `settings` writes or reads (the explain topic only when it
    explains, the shadow topic only with canaries: nothing else reads them, and a cluster that
    never writes one needs no empty topic)."""
    return [
        settings.topic_raw,
        settings.topic_clean,
        settings.topic_dlq,
        settings.topic_features,
        settings.topic_forecasts,
        settings.topic_scores,
        *([settings.topic_shadow] if settings.canary else []),
        *([settings.topic_explain] if settings.explain else []),
    ]


def newest_values(settings: Settings, topic: str) -> dict[int, bytes]:
    """The value of each partition's last record in `topic`, read without joining a group; a
    partition without records, and a topic that does not exist, have none."""
    return {partition: values[-1] for partition, values in tail_values(settings, topic, 1).items()}


def tail_values(settings: Settings, topic: str, count: int) -> dict[int, list[bytes]]:
    """The values of each partition's last `count` records (at least) in `topic`, in offset
    order, read without joining a group; a partition without records, and a topic that does
    not exist, have none."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    timeout_s = settings.connect_timeout_s
    config = {"group.id": "barcast-newest", "enable.auto.commit": False}
    consumer = Consumer(confluent_config(settings, **config, **{"enable.partition.eof": True}))
    try:
        found = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if found is None or found.error is not None:
            return {}
        first: dict[int, int] = {}  # partition -> the offset its tail starts at or before
        for partition in sorted(found.partitions):
            where = TopicPartition(topic, partition)
            low, high = consumer.get_watermark_offsets(where, timeout=timeout_s)
            if high > low:
                first[partition] = max(low, high - count)
        consumer.assign([TopicPartition(topic, p, offset) for p, offset in first.items()])
        tails: dict[int, dict[int, bytes]] = {partition: {} for partition in first}
        # Each partition is read to its end, not to the high watermark: the embedded broker
        # reports the start of a partition's last batch as its last offset (the changelogs'
        # lone last records, runtime.kafka_io), so its last record may lie after it. The
        # timeout is of a broker silent that long, not of a long read.
        pending, deadline = set(first), time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                bootstrap = bootstrap_servers(settings)
                raise BrokerUnavailable(unavailable_message(bootstrap, timeout_s))
            message = consumer.poll(0.5)
            if message is None:
                continue
            deadline = time.monotonic() + timeout_s
            error, partition = message.error(), message.partition()
            if error is None:
                tails[partition][message.offset()] = message.value()
            elif error.code() == KafkaError._PARTITION_EOF:
                pending.discard(partition)
            else:
                raise KafkaException(error)
        return {
            partition: [values[offset] for offset in sorted(values)]
            for partition, values in tails.items()
            if values
        }
    finally:
        consumer.close()
