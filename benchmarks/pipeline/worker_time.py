"""Where a worker's time goes over a burst: its event loop's CPU time (the process's main thread,
from /proc), and from its `/metrics` the loop's wall time in barcast's own work (`agent`: the
stages on the burst's batches; `publish`: the forecasts' calibration, values and sends) and the
inference thread's (`barcast_inference_seconds`). The loop's CPU time beyond the agent's and
the publishing's is Faust's and Kafka's clients', the commits' and the timers'."""

from __future__ import annotations

import urllib.error
from dataclasses import dataclass, fields

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.provenance import cpu_s
from streams.process import WorkerProcess
from streams.tools.stats_cli import default_url, scrape

LOOP, INFERENCE = "barcast_loop_seconds_total", "barcast_inference_seconds"
PARTS = ("loop_cpu_ms", "agent_ms", "publish_ms", "inference_ms", "micro_batches")  # `since`'s


@dataclass(frozen=True)
class WorkerTime:
    """Seconds so far, each NaN where the worker does not say."""

    loop_cpu: float
    agent: float
    publish: float
    inference: float
    micro_batches: float

    @classmethod
    def read(cls, worker: WorkerProcess | None) -> WorkerTime:
        if worker is None or worker.process is None:
            return cls(*[float("nan")] * 5)
        samples = metric_samples(worker)
        return cls(
            loop_cpu=cpu_s(worker.pid, tid=worker.pid),  # the main thread: the loop's
            agent=samples.get((LOOP, "agent"), 0.0),
            publish=samples.get((LOOP, "publish"), 0.0),
            inference=samples.get((INFERENCE + "_sum", ""), float("nan")),
            micro_batches=samples.get((INFERENCE + "_count", ""), float("nan")),
        )

    def since(self, before: WorkerTime) -> dict[str, float]:
        """The burst's share: ms, and the micro-batches inferred."""
        out = {}
        for field in fields(self):
            spent = getattr(self, field.name) - getattr(before, field.name)
            if field.name == "micro_batches":
                out["micro_batches"] = spent
            else:
                out[f"{field.name}_ms"] = round(spent * 1000, 1)
        return out


def metric_samples(worker: WorkerProcess) -> dict[tuple[str, str], float]:
    """The worker's samples by (name, `work` label), from its `/metrics`."""
    try:
        text = scrape(default_url(worker.settings), timeout_s=5.0)
    except (urllib.error.URLError, OSError):
        return {}
    return {
        (sample.name, sample.labels.get("work", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
