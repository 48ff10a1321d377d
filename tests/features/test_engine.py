"""One kernel for training and serving: bar by bar, random chunks, interleaved symbols and batch
mode give bit-identical rows, and a state carried through bytes into a fresh process continues
exactly where it stopped."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from features import engine

COLUMNS = ("ts_event", "open", "high", "low", "close", "volume")
REPO = Path(engine.__file__).resolve().parent.parent


def arrays(bars: pd.DataFrame) -> list[np.ndarray]:
    return [bars[c].to_numpy() for c in COLUMNS]


def stream(states: np.ndarray, row: int, cols: list[np.ndarray], chunks: list[int]) -> np.ndarray:
    """Feed one symbol's bars through update_many in the given chunk sizes."""
    out, start = [], 0
    for size in chunks:
        part = [c[start : start + size] for c in cols]
        rows = np.full(size, row, dtype=np.int64)
        values, _ = engine.update_many(states, rows, *part, np.zeros(size, dtype=bool))
        out.append(values)
        start += size
    return np.concatenate(out)


@pytest.fixture(scope="module")
def month(sixe_bars: pd.DataFrame) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    cols = arrays(sixe_bars)
    values, warm = engine.compute_batch(*cols)
    return cols, values, warm


def test_bar_by_bar_random_chunks_and_batch_are_bit_identical(month) -> None:
    cols, batch, _ = month
    n = len(cols[0])
    one_by_one = stream(engine.new_states(1), 0, cols, [1] * n)
    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 700, size=n)
    chunks = [int(k) for k in sizes[np.cumsum(sizes) < n]]
    chunks.append(n - sum(chunks))
    random_chunks = stream(engine.new_states(1), 0, cols, chunks)
    assert np.array_equal(one_by_one, batch, equal_nan=True)
    assert np.array_equal(random_chunks, batch, equal_nan=True)


def test_interleaved_symbols_match_their_own_batches(month) -> None:
    """Three symbols in one state matrix, bars interleaved and a symbol repeated within a call."""
    cols, _, _ = month
    n = 3000
    scales = (1.0, 4800.0, 0.0071)  # 6E, an ES-like and a JPY-like price level
    per_symbol = [
        [c[:n] * s if k in (1, 2, 3, 4) else c[:n] for k, c in enumerate(cols)] for s in scales
    ]
    order = np.repeat(np.arange(3), n)
    np.random.default_rng(7).shuffle(order)
    cursor = [0, 0, 0]
    picks = []
    for sym in order:
        picks.append((sym, cursor[sym]))
        cursor[sym] += 1
    rows = np.array([p[0] for p in picks], dtype=np.int64)
    idx = np.array([p[1] for p in picks])
    merged = [np.array([per_symbol[s][k][i] for s, i in picks]) for k in range(6)]
    states = engine.new_states(3)
    got = []
    for start in range(0, len(rows), 257):  # chunks where symbols repeat within a call
        sl = slice(start, start + 257)
        flags = np.zeros(len(rows[sl]), dtype=bool)
        got.append(engine.update_many(states, rows[sl], *(m[sl] for m in merged), flags)[0])
    values = np.concatenate(got)
    for s in range(3):
        own, _ = engine.compute_batch(*per_symbol[s])
        assert np.array_equal(values[rows == s][np.argsort(idx[rows == s])], own, equal_nan=True)


def test_warm_flag_and_nan_warmup(month) -> None:
    _, values, warm = month
    assert not warm[: engine.MAX_WARMUP].any() and warm[engine.MAX_WARMUP :].all()
    for j, w in enumerate(engine.WARMUPS):
        assert np.isnan(values[:w, j]).all(), engine.FEATURE_NAMES[j]
        assert np.isfinite(values[w:, j]).all(), engine.FEATURE_NAMES[j]


def test_state_resumes_bit_exactly_in_a_fresh_process(month, tmp_path: Path) -> None:
    cols, batch, _ = month
    n = len(cols[0])
    cut = int(np.random.default_rng(11).integers(engine.MAX_WARMUP, n - 1000))
    states = engine.new_states(2)
    stream(states, 1, [c[:cut] for c in cols], [cut])
    blob = engine.state_to_bytes(states[1])
    rest = {k: c[cut:] for k, c in zip(COLUMNS, cols, strict=True)}
    np.savez(tmp_path / "rest.npz", state=np.frombuffer(blob, np.uint8), **rest)
    child = textwrap.dedent(
        """
        import sys
        import numpy as np
        from features import engine
        d = np.load(sys.argv[1])
        states = engine.new_states(1)
        states[0] = engine.state_from_bytes(d["state"].tobytes())
        n = len(d["ts_event"])
        values, _ = engine.update_many(
            states, np.zeros(n, np.int64), d["ts_event"], d["open"], d["high"], d["low"],
            d["close"], d["volume"], np.zeros(n, bool))
        np.save(sys.argv[2], values)
        """
    )
    subprocess.run(
        [sys.executable, "-c", child, str(tmp_path / "rest.npz"), str(tmp_path / "out.npy")],
        check=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "NUMBA_NUM_THREADS": "1"},
        timeout=600,
    )
    resumed = np.load(tmp_path / "out.npy")
    assert np.array_equal(resumed, batch[cut:], equal_nan=True)


def test_state_bytes_round_trip_and_rejections(month) -> None:
    cols, _, _ = month
    states = engine.new_states(1)
    stream(states, 0, [c[:500] for c in cols], [500])
    blob = engine.state_to_bytes(states[0])
    assert np.array_equal(engine.state_from_bytes(blob), states[0])
    assert len(blob) == 44 + 8 * engine.STATE_SIZE
    with pytest.raises(ValueError, match="truncated"):
        engine.state_from_bytes(blob[:-8])
    with pytest.raises(ValueError, match="bad magic"):
        engine.state_from_bytes(b"XXXX" + blob[4:])
    foreign = blob.replace(engine.FINGERPRINT.encode(), b"0123456789abcdef", 1)
    with pytest.raises(ValueError, match=r"feature set 0123456789abcdef.*replaying"):
        engine.state_from_bytes(foreign)
    with pytest.raises(ValueError, match="shape"):
        engine.state_to_bytes(states[0][:-1])


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("close", np.nan, "prices must be finite"),
        ("low", 0.0, "prices must be finite"),
        ("high", 1.0, "low <= open, close <= high"),
        ("volume", -1.0, "volume must be finite"),
        ("ts_event", 0, "strictly increasing"),
        ("rows", 5, "outside states"),
    ],
)
def test_bad_bars_raise_and_leave_states_untouched(month, column, value, message) -> None:
    cols, _, _ = month
    states = engine.new_states(2)
    stream(states, 0, [c[:100] for c in cols], [100])
    before = states.copy()
    data = {k: c[100:110].copy() for k, c in zip(COLUMNS, cols, strict=True)}
    data["rows"] = np.zeros(10, dtype=np.int64)
    data[column][7] = value
    with pytest.raises(ValueError, match=message):
        engine.update_many(states, data["rows"], *(data[k] for k in COLUMNS), np.zeros(10, bool))
    assert np.array_equal(states, before)


def test_the_kernel_lets_the_gil_go_while_it_runs() -> None:
    """The forecast worker's model thread needs the GIL beside the batch's features
    (features/engine.py, `_build_kernel`)."""
    assert engine._run.targetoptions["nogil"] is True
