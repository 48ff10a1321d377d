"""Every exit code of barcast's processes, the `barcast` commands' and the worker's, in one enum
(docs/operations.md's tables). A code that means the same for several commands has one member,
and an alias where a command's own name for it reads better."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    NOTHING_PUBLISHED = 1  # `barcast demo`: the worker published no forecast
    USAGE = 2  # a bad argument or `BARCAST_*` setting
    BROKER_UNAVAILABLE = 3  # no broker within BARCAST_CONNECT_TIMEOUT_S
    WORKER_UNREACHABLE = 3  # `barcast stats`: the worker's metrics endpoint did not answer
    FILE_NOT_FOUND = 4  # an input file missing or unreadable
    NO_TOPIC = 4  # `barcast tail`: the topic does not exist
    NOT_BARCAST = 4  # `barcast stats`: the endpoint answered, not with a worker's metrics
    NOT_DBN = 5  # empty file, wrong magic, unknown version, bad metadata
    UNSUPPORTED_SCHEMA = 6
    CORRUPT = 7  # a truncated or damaged file (its readable part was produced)
    UNKNOWN_SYMBOL = 8
    DELIVERY_FAILED = 9  # Kafka delivery failed
    AUTH_FAILED = 10  # Databento authentication failed or the key is missing
    GATEWAY_UNAVAILABLE = 11  # live ingest gave up reconnecting
    BROKER_FAILED = 69  # EX_UNAVAILABLE: the Kafka cluster failed a request (send, acks, read)
    AGENT_FAILED = 70  # EX_SOFTWARE: a bug in barcast
    # EX_CONFIG: the forecast worker cannot serve the checkpoint it starts with; a restart
    # serves it no better, so it is not 70's restart-and-retry
    CHECKPOINT_REFUSED = 78
    INTERRUPTED = 130
    BROKEN_PIPE = 141  # stdout's reader went away; a shell reports SIGPIPE so (128 + 13)
