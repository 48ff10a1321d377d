"""`barcast stats`: the corrections counters of a running worker in one line.

Scrapes the worker's Prometheus endpoint (`/metrics` on the Faust web port), so it shows what
Grafana shows, without a broker connection:

    bars in=3012 clean=2950 corrected=12 (envelope=8 scale_error=4) duplicate=20
    rejected=30 (late=10 malformed=20) dlq=30 gaps=3 (41 minutes) synthetic=41

(one line). Counters are the worker's since it started.
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from streams.exit_codes import ExitCode
from streams.metrics import Outcome, Stage
from streams.settings import Settings


class NotBarcastMetrics(ValueError):
    """The endpoint answered, but not with a barcast worker's metrics."""


@dataclass
class CorrectionsCounts:
    """What `barcast stats` prints, read back from the Prometheus text exposition."""

    bars: Counter[str] = field(default_factory=Counter)  # corrections outcome -> bars
    corrections: Counter[str] = field(default_factory=Counter)  # rule -> corrected bars
    rejections: Counter[str] = field(default_factory=Counter)  # reason -> rejected bars
    dlq: int = 0
    gaps: int = 0
    gap_minutes: int = 0

    def line(self) -> str:
        def detail(counts: Counter[str]) -> str:
            parts = [f"{key}={n}" for key, n in sorted(counts.items()) if n]
            return f" ({' '.join(parts)})" if parts else ""

        bars = self.bars
        return (
            f"bars in={bars[Outcome.IN]} clean={bars[Outcome.CLEAN]} "
            f"corrected={bars[Outcome.CORRECTED]}{detail(self.corrections)} "
            f"duplicate={bars[Outcome.DUPLICATE]} "
            f"rejected={bars[Outcome.REJECTED]}{detail(self.rejections)} "
            f"dlq={self.dlq} gaps={self.gaps} ({self.gap_minutes} minutes) "
            f"synthetic={bars[Outcome.SYNTHETIC]}"
        )


def parse(text: str) -> CorrectionsCounts:
    """The corrections counters in a `/metrics` body (Prometheus text format)."""
    counts = CorrectionsCounts()
    seen = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            value, labels = int(sample.value), sample.labels
            if sample.name == "barcast_bars_total":
                seen = True
                if labels.get("stage") == Stage.CORRECTIONS:
                    counts.bars[labels["outcome"]] += value
            elif sample.name == "barcast_corrections_total":
                counts.corrections[labels["rule"]] += value
            elif sample.name == "barcast_rejections_total":
                counts.rejections[labels["reason"]] += value
            elif sample.name == "barcast_dlq_total":
                counts.dlq += value
            elif sample.name == "barcast_gaps_total":
                counts.gaps += value
            elif sample.name == "barcast_gap_minutes_total":
                counts.gap_minutes += value
    if not seen:
        raise NotBarcastMetrics("no barcast_bars_total series")
    return counts


def scrape(url: str, timeout_s: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read().decode("utf-8")


def default_url(settings: Settings) -> str:
    return f"http://127.0.0.1:{settings.web_port}/metrics"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "stats",
        help="one-line corrections summary of a running worker",
        description="Print the corrections counters (bars in, clean, corrected per rule, "
        "duplicate, rejected per reason, DLQ, gaps, synthetic) of a running worker, "
        "scraped from its /metrics endpoint.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url",
        help="the worker's metrics URL (default: http://127.0.0.1:BARCAST_WEB_PORT/metrics)",
    )
    parser.add_argument("--timeout", type=float, default=5.0, metavar="S", help="default: 5")


def run(args: argparse.Namespace) -> int:
    url = args.url or default_url(Settings.from_env())
    try:
        counts = parse(scrape(url, args.timeout))
    except urllib.error.HTTPError as exc:
        print(
            f"barcast stats: {url} answered HTTP {exc.code}; is it a barcast worker's /metrics?",
            file=sys.stderr,
        )
        return ExitCode.NOT_BARCAST
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        print(
            f"barcast stats: no worker answered at {url} ({reason}); start one with "
            "`faust -A streams worker` or pass --url with its web port",
            file=sys.stderr,
        )
        return ExitCode.WORKER_UNREACHABLE
    except ValueError as exc:  # NotBarcastMetrics, or a body that is not Prometheus text
        print(f"barcast stats: {url} is not a barcast worker's /metrics ({exc})", file=sys.stderr)
        return ExitCode.NOT_BARCAST
    print(counts.line(), flush=True)
    return ExitCode.OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="barcast stats")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
