"""Per-forecast explanations at the engine level, for both encoders: the quantiles are
`predict`'s bit for bit, from one forward pass; an incremental explanation is the full one (a
stream's: its selection weights, which depend on the rows alone); the fields are what the
model's own full forward pass outputs; the records carry each forecast's key and partition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from jsonschema import Draft202012Validator

from features.registry import FEATURE_NAMES
from model.config import ENCODERS
from model.covariates import FUTURE_NAMES, STATIC_NAMES
from model.forecaster import ForecastBatch, Forecaster
from model.metrics import attention_entropy
from model.serving.explain import SCHEMA_VERSION
from model.serving.forecast_engine import ForecastEngine, Served, WindowRequest
from model.serving.programs import FORWARD_ROWS, chunk_programs
from streams.kafka import pipeline_topics
from streams.runtime.stages.explained import explain_records
from streams.schema import BAR_HEADERS, decode_explanation
from streams.setting_rules import N_FEATURES
from streams.settings import Settings
from streams.topic_schemas import schema
from tests.checkpoints import make_checkpoint

SYMBOLS = ("6EH4", "ESU4", "NQU4")
LOOKBACK, MINUTE, T0 = 60, 60_000_000_000, 1_704_200_000_000_000_000
TOLERANCE = 3e-5  # incremental vs full encoding (1e-5 in forecasts) plus one rounding step


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    """(symbols, bars, N_FEATURES) feature rows: each symbol its own history."""
    return np.random.default_rng(7).normal(size=(len(SYMBOLS), 120, N_FEATURES))


@pytest.fixture(scope="module", params=ENCODERS)
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp(f"explain-{request.param}") / "a"
    make_checkpoint(path, encoder=request.param)
    return path


@pytest.fixture(scope="module")
def engines(checkpoint: Path) -> tuple[ForecastEngine, ForecastEngine]:
    """A worker's engine without and with BARCAST_EXPLAIN (tracing them is most of a test)."""
    plain = ForecastEngine.from_settings(checkpoint, Settings())
    return plain, ForecastEngine.from_settings(checkpoint, Settings(explain=True))


def fresh(engine: ForecastEngine) -> ForecastEngine:
    """`engine` with empty caches (as after a restart), sharing its traced programs."""
    copy = ForecastEngine.__new__(ForecastEngine)
    copy.__dict__.update(engine.__dict__)
    s = engine.served
    copy.served = Served(s.forecaster, s.path, s.programs, s.baselines, explaining=s.explaining)
    return copy


def requests(rows: np.ndarray, steps: range) -> list[WindowRequest]:
    """Every symbol's window ending at each step, interleaved by minute."""
    return [
        WindowRequest(
            symbol,
            symbol.encode(),
            k,
            LOOKBACK + step,
            rows[k, step : LOOKBACK + step],
            T0 + step * MINUTE,
            1.1,
            0,
        )
        for step in steps
        for k, symbol in enumerate(SYMBOLS)
    ]


def explained(engine: ForecastEngine, batch: list[WindowRequest], size: int, incremental: bool):
    out = [
        engine.predict_explained(batch[i : i + size], incremental, top_k=N_FEATURES)
        for i in range(0, len(batch), size)
    ]
    return np.concatenate([q for q, _ in out]), [e for _, ex in out for e in ex]


def flat(explanation: dict[str, Any]) -> dict[str, float]:
    """Every number of an explanation by name (the historical weights by feature name)."""
    values = {f"hist/{h['feature']}": h["weight"] for h in explanation["historical"]}
    values |= {f"static/{k}": v for k, v in explanation["static"].items()}
    values |= {f"future/{k}": v for k, v in explanation["future"].items()}
    attention = explanation["attention"]
    values |= {f"attention/{k}": v for k, v in attention.items() if isinstance(v, float)}
    values |= {f"entropy/{h}": v for h, v in enumerate(attention["entropy_by_horizon"])}
    return values


def test_explained_quantiles_are_predicts_bit_for_bit(engines, rows) -> None:
    batch = requests(rows, range(0, 12))
    plain, explaining = fresh(engines[0]), fresh(engines[1])
    for i in range(0, len(batch), 7):  # a symbol often twice in one batch, windows sliding
        expected = plain.predict(batch[i : i + 7])
        quantiles, explanations = explaining.predict_explained(batch[i : i + 7])
        assert np.array_equal(quantiles, expected), f"batch at {i}"
        assert len(explanations) == len(expected)
    full = explaining.predict_explained(batch[-3:], incremental=False)[0]
    assert np.array_equal(full, fresh(plain).predict(batch[-3:], False))


def test_an_explained_batch_runs_the_model_forward_once(engines, rows) -> None:
    engine = fresh(engines[1])
    explaining = engine.served.explaining
    assert explaining is not None
    calls = {"plain": 0, "explaining": 0}

    class Counted:
        """A batch's calls of a program (its chunks run within one)."""

        def __init__(self, name: str, program: Any) -> None:
            self.name, self.program, self.rows = name, program, program.rows

        def __call__(self, inputs: list[Any]) -> Any:
            calls[self.name] += 1
            return self.program(inputs)

    served = engine.served
    served.programs = served.programs._replace(forward=Counted("plain", served.programs.forward))
    served.explaining = explaining._replace(forward=Counted("explaining", explaining.forward))
    batch = requests(rows, range(0, 25))  # 75 windows
    assert -(-len(batch) // FORWARD_ROWS) == 2  # two chunks
    engine.predict_explained(batch)
    assert calls == {"plain": 0, "explaining": 1}


def test_an_incremental_explanation_is_the_full_one(engines, rows) -> None:
    """Cached rows' selection weights come from the cache; a window cached by `predict`
    (without weights) is encoded again. The plain engine explains too: its explaining
    programs are traced on its first explained batch."""
    cached, full = fresh(engines[0]), fresh(engines[1])
    cached.predict(requests(rows, range(0, 3)))
    batch = requests(rows, range(3, 25))
    quantiles, incremental = explained(cached, batch, 5, incremental=True)
    reference, whole = explained(full, batch, 5, incremental=False)
    # A stream's forecast depends on the state it carried: streamed anew from each window's
    # oldest row (not incremental) it is another forecast, but of the same rows' selection.
    stream = cached.served.forecaster.config.encoder == "stream"
    assert stream or np.abs(quantiles - reference).max() <= 1e-5
    assert all(c.weights is not None for c in cached.served.cache.values())
    worst = 0.0
    for a, b in zip(incremental, whole, strict=True):
        fa, fb = flat(a), flat(b)
        assert fa.keys() == fb.keys()
        same = [k for k in fa if not stream or k.startswith(("hist/", "static/", "future/"))]
        worst = max(worst, max(abs(fa[k] - fb[k]) for k in same))
    assert worst <= TOLERANCE, worst


def test_an_explanation_is_the_models_own_outputs(checkpoint: Path, engines, rows) -> None:
    """Against the checkpoint's full forward pass (model.forecaster, eager, unpadded): a
    stream's first window, streamed from the static state as that pass encodes it."""
    stream = engines[1].served.forecaster.config.encoder == "stream"
    batch = requests(rows, range(0, 1 if stream else 4))
    _, explanations = fresh(engines[1]).predict_explained(batch, top_k=5)
    forecaster = Forecaster(checkpoint, device="cpu")
    out = forecaster.predict(
        ForecastBatch(
            [r.symbol for r in batch],
            np.array([r.ts_event for r in batch]),
            np.array([r.close for r in batch]),
            np.stack([r.values for r in batch]),
        ),
        explain=True,
    ).explain
    assert out is not None and out.hist_weights is not None
    hist = out.hist_weights.mean(1).numpy()
    attention = out.attention.numpy()
    pooled = attention.mean((1, 2))
    for i, explanation in enumerate(explanations):
        top = np.argsort(-hist[i])[:5]
        assert [h["feature"] for h in explanation["historical"]] == [FEATURE_NAMES[j] for j in top]
        assert np.allclose(
            [h["weight"] for h in explanation["historical"]], hist[i, top], atol=1e-5
        )
        assert explanation["historical_top_k"] == pytest.approx(hist[i, top].sum(), abs=1e-5)
        static = out.static_weights[i].numpy()
        assert np.allclose(list(explanation["static"].values()), static, atol=1e-5)
        assert list(explanation["static"]) == list(STATIC_NAMES)
        future = out.future_weights[i].mean(0).numpy()
        assert np.allclose(list(explanation["future"].values()), future, atol=1e-5)
        assert list(explanation["future"]) == list(FUTURE_NAMES)
        summary = explanation["attention"]
        assert summary["entropy"] == pytest.approx(attention_entropy(attention[i]), abs=1e-4)
        by_horizon = [attention_entropy(attention[i, :, h]) for h in range(attention.shape[2])]
        assert np.allclose(summary["entropy_by_horizon"], by_horizon, atol=1e-4)
        last = pooled[i, LOOKBACK - 1]  # the forecast's own bar
        assert summary["last_5"] == pytest.approx(
            pooled[i, LOOKBACK - 5 : LOOKBACK].sum(), abs=1e-5
        )
        assert summary["last_15"] == pytest.approx(
            pooled[i, LOOKBACK - 15 : LOOKBACK].sum(), abs=1e-5
        )
        assert summary["older"] == pytest.approx(pooled[i, : LOOKBACK - 15].sum(), abs=1e-5)
        assert summary["last_15"] + summary["older"] + summary["future"] == pytest.approx(
            1, abs=1e-4
        )
        lags = {lag["lag"]: lag["weight"] for lag in summary["top_lags"]}
        heaviest = int(np.argmax(pooled[i, :LOOKBACK]))
        assert lags[LOOKBACK - 1 - heaviest] == pytest.approx(pooled[i, heaviest], abs=1e-5)
        assert 0 not in lags or lags[0] == pytest.approx(last, abs=1e-5)


def test_explanation_records_follow_their_forecasts(engines, rows) -> None:
    engine = fresh(engines[1])
    batch = requests(rows, range(0, 2))
    _, explanations = engine.predict_explained(batch, top_k=3)
    records = explain_records(engine, batch, explanations, "forecasts.explain")
    validator = Draft202012Validator(schema("forecasts.explain"))
    for request, record, explanation in zip(batch, records, explanations, strict=True):
        assert (record.topic, record.key, record.partition) == (
            "forecasts.explain",
            request.key,
            request.partition,
        )
        assert record.timestamp_ms == request.ts_event / 1e6 and record.headers == BAR_HEADERS
        value = decode_explanation(record.value)
        validator.validate(value)
        assert value == {
            "symbol": request.symbol,
            "ts_event": request.ts_event,
            "model_id": engine.model_id,
            "fingerprint": engine.fingerprint,
            "schema_version": SCHEMA_VERSION,
            **explanation,
        }
        assert len(value["historical"]) == 3


def test_explaining_settings_prepare_the_programs_with_each_checkpoint(
    checkpoint: Path, engines
) -> None:
    plain, explaining = engines
    assert explaining.served.explaining is not None
    assert explaining.prepare(checkpoint).explaining is not None  # a hot reload's
    assert plain.served.explaining is None  # until its first explained batch


def test_the_explain_topic_is_a_pipeline_topic_only_when_explaining() -> None:
    assert "forecasts.explain" not in pipeline_topics(Settings())
    assert "forecasts.explain" in pipeline_topics(Settings(explain=True))


def test_the_top_k_bound_is_the_feature_sets_width() -> None:
    assert len(FEATURE_NAMES) == N_FEATURES


def test_the_eager_programs_a_gpu_runs_explain_as_the_traced_ones(engines, rows) -> None:
    """On CUDA the programs run eagerly (model.serving.programs): the same explanation, here
    on the CPU, where a trace records exactly the ops eager mode runs."""
    batch = requests(rows, range(0, 3))
    traced = fresh(engines[1])
    eager = fresh(engines[1])
    plain, model = eager.served.programs, eager.served.forecaster.model
    rows_of = (plain.forward_rows, plain.encode_rows)
    eager.served.explaining = chunk_programs(
        model, torch.device("cuda"), "bf16", *rows_of, explain=True
    )
    assert not isinstance(eager.served.explaining.forward, torch.jit.ScriptModule)
    for step in (batch[:6], batch[6:]):  # the second incremental, from the cache
        (q_traced, e_traced), (q_eager, e_eager) = (
            traced.predict_explained(step),
            eager.predict_explained(step),
        )
        assert np.array_equal(q_traced, q_eager) and e_traced == e_eager
