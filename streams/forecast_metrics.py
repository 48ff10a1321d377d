"""The forecasts' quality as Prometheus gauges: their rolling coverage and pinball, their skill
over the shadow baselines, and which source serves how many symbols (streams.metrics holds
them with every other metric)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Gauge


class ScoringMetrics:
    """`barcast_forecast_coverage{horizon}` and `barcast_forecast_pinball{horizon,quantile}` in
    the worker's registry (`streams.metrics.Metrics.registry`); `set` them from
    `pooled_figures` of the symbols the worker holds."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.coverage = Gauge(
            "barcast_forecast_coverage",
            "Rolling share of scored forecasts inside their 80 % interval (q10..q90).",
            ["horizon"],
            registry=registry,
        )
        self.pinball = Gauge(
            "barcast_forecast_pinball",
            "Rolling mean pinball loss of scored forecasts (log-return units).",
            ["horizon", "quantile"],
            registry=registry,
        )

    def set(self, figures: dict[tuple[int, str], float]) -> None:
        clear(self.coverage, self.pinball)  # gone from `figures`: moved to another worker
        for (horizon, name), figure in figures.items():
            if name == "coverage":
                self.coverage.labels(horizon=str(horizon)).set(figure)
            else:
                self.pinball.labels(horizon=str(horizon), quantile=name).set(figure)


def clear(*gauges: Gauge) -> None:
    """Only the series of now: one its symbols or its checkpoint took away is not kept."""
    for gauge in gauges:
        gauge.clear()


class SkillMetrics:
    """`barcast_forecast_skill{horizon,baseline}`: 1 - pinball(model) / pinball(baseline) over
    the rolling window of the symbols the worker holds, and its circular block bootstrap interval
    (`_lower`, `_upper`; model.serving.skill); `barcast_forecast_source_symbols{source}`: how
    many symbols serve the model's forecasts, how many a baseline's."""

    def __init__(self, registry: CollectorRegistry) -> None:
        what = "the model's rolling skill over a shadow baseline, 1 - pinball(model) / "
        self.skill, self.lower, self.upper = (
            Gauge(
                f"barcast_forecast_skill{suffix}",
                f"{bound}{what}pinball(baseline), over the last BARCAST_SCORE_WINDOW scored "
                "forecasts of each symbol the worker holds.",
                ["horizon", "baseline"],
                registry=registry,
            )
            for suffix, bound in (
                ("", "The "),
                ("_lower", "Lower end of the 90 % block-bootstrap interval of "),
                ("_upper", "Upper end of the 90 % block-bootstrap interval of "),
            )
        )
        self.sources = Gauge(
            "barcast_forecast_source_symbols",
            "Symbols whose forecasts come from each source (`model`, or a baseline's name).",
            ["source"],
            registry=registry,
        )

    def set(self, skill: dict[tuple[int, str], Any], sources: dict[str, int]) -> None:
        clear(self.skill, self.lower, self.upper, self.sources)
        for (horizon, baseline), found in skill.items():
            labels = {"horizon": str(horizon), "baseline": baseline}
            self.skill.labels(**labels).set(found.skill)
            self.lower.labels(**labels).set(found.lower)
            self.upper.labels(**labels).set(found.upper)
        for source, count in sources.items():
            self.sources.labels(source=source).set(count)
