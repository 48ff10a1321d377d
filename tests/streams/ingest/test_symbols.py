"""Symbology: raw symbols per instrument_id, parent filters, spreads."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import databento
import databento_dbn
import numpy as np
import pytest

from streams.ingest.errors import UnknownSymbol
from streams.ingest.symbols import (
    Definition,
    SymbolBook,
    SymbolFilter,
    Verdict,
    check_filter,
    root_matches,
    verdict,
)

DAY = 86_400 * 10**9
JAN1 = 1_704_067_200_000_000_000


@pytest.mark.parametrize(
    ("root", "symbol", "expected"),
    [
        ("ES", "ESU4", True),
        ("ES", "ESZ24", True),
        ("ES", "MESU4", False),  # micro E-mini is another product
        ("ES", "ESTXU4", False),
        ("6E", "6EH4", True),
        ("ES", "ESU4-ESZ4", True),  # a spread belongs to its first leg's parent
        ("NQ", "ESU4", False),
    ],
)
def test_root_pattern_without_definitions(root: str, symbol: str, expected: bool) -> None:
    assert root_matches(root, symbol) is expected


def test_definitions_decide_over_the_symbol_pattern() -> None:
    odd = Definition("XYZ9", asset="ES", instrument_class="F")
    option = Definition("ESU4 C5000", asset="ES", instrument_class="C")
    assert root_matches("ES", "XYZ9", odd)
    assert not root_matches("ES", "ESU4 C5000", option)


def test_verdicts_filter_then_spreads() -> None:
    es = SymbolFilter(["ES.FUT"])
    assert verdict("ESU4", None, es, keep_spreads=False) is Verdict.KEEP
    assert verdict("NQU4", None, es, keep_spreads=False) is Verdict.FILTERED
    assert verdict("ESU4-ESZ4", None, es, keep_spreads=False) is Verdict.SPREAD
    assert verdict("ESU4-ESZ4", None, es, keep_spreads=True) is Verdict.KEEP
    assert verdict("NQU4-NQZ4", None, es, keep_spreads=True) is Verdict.FILTERED
    spread_class = Definition("UD:1V", asset="ES", instrument_class="S")
    assert verdict("UD:1V", spread_class, SymbolFilter(), keep_spreads=False) is Verdict.SPREAD


@pytest.mark.parametrize("entry", ["ES.OPT", "ES.c.0", "ES.v.1", ".FUT"])
def test_unsupported_filters_are_refused(entry: str) -> None:
    with pytest.raises(UnknownSymbol, match="not supported"):
        SymbolFilter([entry])


def test_unknown_filter_names_what_the_files_hold() -> None:
    book = SymbolBook()
    book.set(1, "ESU4")
    book.set(2, "NQU4")
    check_filter(SymbolFilter(["ES.FUT", "NQU4"]), book, ["a.dbn"])
    with pytest.raises(UnknownSymbol, match=r"ZN\.FUT matches no instrument in a\.dbn .*ESU4"):
        check_filter(SymbolFilter(["ES.FUT", "ZN.FUT"]), book, ["a.dbn"])


def metadata(mappings: dict[str, list[tuple[date, date, str]]]) -> databento_dbn.Metadata:
    from types import SimpleNamespace as NS

    SType = databento_dbn.SType
    return databento_dbn.Metadata(
        "GLBX.MDP3", JAN1, SType.RAW_SYMBOL, SType.INSTRUMENT_ID, databento_dbn.Schema.OHLCV_1M,
        list(mappings), [], [],
        [NS(raw_symbol=raw, intervals=[NS(start_date=a, end_date=b, symbol=s) for a, b, s in ivs])
         for raw, ivs in mappings.items()],
        JAN1 + 3 * DAY, 0, False, 3,
    )  # fmt: skip


def test_metadata_mappings_resolve_by_date() -> None:
    book = SymbolBook()
    book.add_metadata(
        metadata(
            {
                "ESH4": [(date(2024, 1, 1), date(2024, 1, 2), "5")],
                "ESM4": [(date(2024, 1, 2), date(2024, 1, 4), "5")],  # id reused next day
                "NQH4": [(date(2024, 1, 1), date(2024, 1, 4), "6")],
            }
        )
    )
    ids = np.array([5, 5, 6, 99], dtype=np.uint32)
    ts = np.array([JAN1 + 10, JAN1 + DAY + 10, JAN1, JAN1], dtype=np.uint64)
    names = [book.symbols[i] if i >= 0 else None for i in book.resolve(ids, ts)]
    assert names == ["ESH4", "ESM4", "NQH4", None]


@pytest.mark.parametrize("reverse", [False, True])
def test_files_reusing_an_instrument_id_on_other_dates_each_keep_their_symbol(
    reverse: bool,
) -> None:
    files = [
        metadata({"ESH3": [(date(2022, 12, 28), date(2022, 12, 29), "5")]}),
        metadata({"ESM4": [(date(2024, 1, 1), date(2024, 1, 2), "5")]}),
    ]
    book = SymbolBook()
    for file in reversed(files) if reverse else files:
        book.add_metadata(file)
    dec28 = JAN1 - (365 + 4) * DAY  # 2022-12-28
    index = book.resolve(np.array([5, 5], np.uint32), np.array([dec28, JAN1], np.uint64))
    assert [book.symbols[i] for i in index] == ["ESH3", "ESM4"]


def test_stream_mappings_override_metadata() -> None:
    book = SymbolBook()
    book.add_metadata(metadata({"ESH4": [(date(2024, 1, 1), date(2024, 1, 4), "5")]}))
    SType = databento_dbn.SType
    book.add_record(
        databento_dbn.SymbolMappingMsg(
            1, 5, JAN1, SType.PARENT, "ES.FUT", SType.RAW_SYMBOL, "ESM4", JAN1, 2**64 - 1
        )
    )
    index = book.resolve(np.array([5], np.uint32), np.array([JAN1], np.uint64))
    assert book.symbols[index[0]] == "ESM4"


def mapping_record(instrument_id: int, symbol: str, start: int, end: int) -> object:
    SType = databento_dbn.SType
    return databento_dbn.SymbolMappingMsg(
        1, instrument_id, start, SType.PARENT, "ES.FUT", SType.RAW_SYMBOL, symbol, start, end
    )


@pytest.mark.parametrize("undated_first", [False, True])
def test_dated_mappings_win_over_undated_ones_on_their_dates(
    dbn_files: list[Path], undated_first: bool
) -> None:
    """A multi-year replay: the definition file names an instrument (ESM3) on every date, and
    a 2022 bar file's metadata names the same id ESH3 on its date (ids are reused): each bar
    keeps the name of its date, whichever was read first; a recording's SymbolMappingMsg,
    dated too, wins over metadata on its dates."""
    path = next(p for p in dbn_files if "definition" in p.name)
    record = next(r for r in databento.DBNStore.from_file(path) if r.raw_symbol == "ESM3")
    iid, book = record.instrument_id, SymbolBook()
    dec28 = JAN1 - (365 + 4) * DAY  # 2022-12-28
    sources = [
        lambda: book.add_record(record),
        lambda: book.add_metadata(
            metadata({"ESH3": [(date(2022, 12, 28), date(2022, 12, 29), str(iid))]})
        ),
    ]
    for source in sources if undated_first else reversed(sources):
        source()
    ids = np.full(3, iid, np.uint32)
    ts = np.array([dec28 + 10, JAN1, dec28 + DAY], np.uint64)
    assert [book.symbols[i] for i in book.resolve(ids, ts)] == ["ESH3", "ESM3", "ESM3"]

    book.add_record(mapping_record(iid, "ESZ2", dec28 + 3_600 * 10**9, dec28 + 2 * DAY))
    names = [book.symbols[i] for i in book.resolve(ids, ts)]
    assert names == ["ESZ2", "ESM3", "ESZ2"], "a record's dates start at its day's start"


def test_a_mapping_record_without_dates_names_every_date() -> None:
    book = SymbolBook()
    book.add_metadata(metadata({"ESH3": [(date(2024, 1, 1), date(2024, 1, 2), "5")]}))
    book.add_record(mapping_record(5, "ESM4", 2**64 - 1, 2**64 - 1))
    index = book.resolve(np.array([5], np.uint32), np.array([JAN1], np.uint64))
    assert book.symbols[index[0]] == "ESM4"


def test_a_reconnects_mappings_again_add_nothing() -> None:
    """Each live session names every instrument again, and each backfill: months of
    reconnects must not grow the spans a bar's name is looked up in."""
    book, SType = SymbolBook(), databento_dbn.SType
    for _ in range(100):
        book.add_record(mapping_record(5, "ESM4", 2**64 - 1, 2**64 - 1))
        book.add_record(
            databento_dbn.SymbolMappingMsg(
                1, 5, JAN1, SType.CONTINUOUS, "ES.c.0", SType.RAW_SYMBOL, "ESM4", JAN1, 2**64 - 1
            )
        )
    assert [len(spans) for spans in (book._records[5], book._continuous[5])] == [2, 1]
    for _ in range(100):  # each backfill resolves them again, each file's metadata names them
        book.add_resolution({"5": [{"d0": "2024-01-01", "d1": "2024-01-02", "s": "ESM4"}]})
        book.add_metadata(metadata({"ESM4": [(date(2024, 1, 1), date(2024, 1, 2), "5")]}))
    assert len(book._metadata[5]) == 1
    index = book.resolve(np.array([5], np.uint32), np.array([JAN1], np.uint64))
    assert book.symbols[index[0]] == "ESM4"
    assert (
        book.symbols[book.continuous(np.array([5], np.uint32), np.array([JAN1], np.uint64))[0]]
        == "ES.c.0"
    )


def test_parent_metadata_names_no_raw_symbols() -> None:
    SType = databento_dbn.SType
    parent = databento_dbn.Metadata(
        "GLBX.MDP3", JAN1, SType.PARENT, SType.INSTRUMENT_ID, databento_dbn.Schema.OHLCV_1M,
        ["ES.FUT"], [], [], [], JAN1 + DAY, 0, False, 3,
    )  # fmt: skip
    assert SymbolBook().add_metadata(parent) is False
