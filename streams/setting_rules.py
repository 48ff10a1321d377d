"""The values barcast settings accept: each numeric setting's range, each choice's options, and
the settings that no longer exist (streams.settings validates against them)."""

from __future__ import annotations

# A bounded dead letter (streams.runtime.policy, 16 KiB of key and of value) must fit.
MIN_RECORD_BYTES, MAX_RECORD_BYTES = 65_536, 100_000_000
# The feature set's width (features.registry, whose numba kernels settings must not import; a
# test holds the two equal): the most historical features an explanation can name.
N_FEATURES = 227
# Settings that no longer exist, and what to do instead: refused rather than ignored, so that an
# old environment does not silently run something other than it asks for.
REMOVED = {
    "BARCAST_CPU_PRECISION": "CPU inference is always fp32 (INT8 dynamic quantization was no "
    "faster, so it was removed); unset BARCAST_CPU_PRECISION",
    "BARCAST_STORE": "the worker keeps no Faust tables: its state lives in stores over changelog "
    "topics barcast owns (streams.runtime.stores), in memory and restored from them; unset "
    "BARCAST_STORE",
}


# Numeric settings' accepted ranges (inclusive; None: no upper bound) and what they count, for
# the message that names the fix. A timeout of 0 s would fail every request it bounds.
RANGES: dict[str, tuple[float, float | None, str]] = {
    "partitions": (1, None, "partitions per topic"),
    "replication": (1, None, "replicas per partition, at most the brokers'"),
    "max_batch": (1, None, "forecast requests per micro-batch"),
    "max_delay_ms": (0, None, "ms"),
    "inference_threads": (1, None, "threads running model chunks"),
    "session_timeout_s": (0.001, None, "s"),
    "rebalance_timeout_s": (0.001, None, "s"),
    "connect_timeout_s": (0.001, None, "s"),
    "fetch_max_wait_ms": (1, 1500, "ms"),
    "checkpoint_min_s": (0.01, 60, "s"),
    "checkpoint_max_s": (0.1, 60, "s"),
    "score_window": (1, None, "scored forecasts"),
    "expire_days": (0, None, "days without a bar; 0: never"),
    "canary_forecasts": (1, None, "scored forecasts of a canary"),
    "explain_top_k": (1, N_FEATURES, "historical features per explanation"),
    "web_port": (1, 65535, "TCP port of the metrics and the live page"),
    "max_record_bytes": (
        MIN_RECORD_BYTES,
        MAX_RECORD_BYTES,
        "at most the brokers' message.max.bytes",
    ),
}
CHOICES = {
    "role": ("all", "stream", "forecast", "corrections", "passthrough"),
    "device": ("auto", "cpu", "cuda"),
    "security_protocol": ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
    "sasl_mechanism": ("", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
    "key_by": ("raw", "continuous"),
    "follow": ("all", "lead"),
    "serve": ("model", "baseline", "auto"),
}
