"""The corrections agent's metrics: `MetricsFeed` pushes the rules' counters batch by batch, and
what `barcast stats` reads back equals a count of the outcomes themselves."""

from __future__ import annotations

import pandas as pd

from features.corrections import (
    SYNTHETIC,
    CorrectionConfig,
    CorrectionStats,
    Status,
    Step,
    SymbolState,
    correct,
    flush,
)
from streams.metrics import Metrics, MetricsFeed
from streams.tools import stats_cli
from tests.bar_streams import faulty_stream


def counted(steps: list[Step]) -> stats_cli.CorrectionsCounts:
    """The line's counters, counted from the outcomes, gaps and bars the steps released."""
    counts = stats_cli.CorrectionsCounts()
    for step in steps:
        for outcome in step.outcomes:
            counts.bars["in"] += 1
            counts.bars[outcome.status.value] += 1
            if outcome.status is Status.CORRECTED:
                counts.corrections.update({change.rule.value for change in outcome.changes})
            elif outcome.status is Status.REJECTED:
                counts.rejections[outcome.reason.value] += 1  # type: ignore[union-attr]
                counts.dlq += 1
        counts.bars["synthetic"] += sum(bar["status"] == SYNTHETIC for bar in step.clean)
        counts.gaps += len(step.gaps)
        counts.gap_minutes += sum(gap.missing for gap in step.gaps)
    return counts


def test_pushed_batches_add_up_to_every_outcome(sixe_bars: pd.DataFrame) -> None:
    values = faulty_stream(sixe_bars, 1500)
    config, stats, metrics = CorrectionConfig(), CorrectionStats(), Metrics()
    feed = MetricsFeed(stats, metrics)
    state = SymbolState()
    steps = []
    for offset, value in enumerate(values):
        steps.append(correct(value, state, config, stats, ref=["bars.raw", 0, offset]))
        if offset % 7 == 0:  # batches of uneven sizes, some with nothing new to push
            feed.push()
            feed.push()
    steps.append(flush(state, config, stats))
    feed.push()

    expected = counted(steps)
    assert expected.rejections["malformed"] and expected.corrections and expected.gaps
    assert stats_cli.parse(metrics.render().decode()).line() == expected.line()
