"""The feature registry: 227 unique names on the contract's group ranges, a fingerprint that
moves with every parameter, FEATURES.md in sync, and window sums that cover every read."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from features import core, flow, registry
from features.primitives import W5, W10, W14, W20, W60
from streams.tools import features_cli as cli

WINDOW_INDEX = {"W5": W5, "W10": W10, "W14": W14, "W20": W20, "W60": W60}


def test_registry_has_227_unique_names_on_the_group_ranges() -> None:
    features = registry.FEATURES
    assert len(features) == 227
    assert len(set(registry.FEATURE_NAMES)) == 227
    assert [f.index for f in features] == list(range(227))
    for group, (lo, hi) in registry.GROUP_RANGES.items():
        assert {f.group for f in features[lo : hi + 1]} == {group}
    assert (registry.GROUP_RANGES["ADX family"]) == (211, 215)
    assert registry.FEATURE_NAMES[211:216] == (
        "plus_di_14",
        "minus_di_14",
        "dx_14",
        "adx_14",
        "adxr_14",
    )
    assert all(f.warmup >= 0 and f.formula for f in features)


def test_check_rejects_a_broken_layout() -> None:
    features = registry.FEATURES
    with pytest.raises(RuntimeError, match="227"):
        registry.check(features[:-1])
    renamed = (*features[:-1], dataclasses.replace(features[-1], name=features[0].name))
    with pytest.raises(RuntimeError, match="duplicate"):
        registry.check(renamed)
    moved = (*features[:-1], dataclasses.replace(features[-1], group="CUSUM"))
    with pytest.raises(RuntimeError, match="occupies"):
        registry.check(moved)


def test_fingerprint_follows_names_order_parameters_and_version() -> None:
    features = registry.FEATURES
    base = registry.fingerprint(features)
    assert base == registry.FINGERPRINT == registry.fingerprint(registry.collect())
    assert re.fullmatch(r"[0-9a-f]{16}", base)
    rsi = next(f for f in features if f.name == "rsi_14")
    changed_param = tuple(
        dataclasses.replace(f, params=(("period", 15),)) if f is rsi else f for f in features
    )
    swapped = (features[1], features[0], *features[2:])
    renamed = (dataclasses.replace(features[0], name="ret_one"), *features[1:])
    engine_params = {**registry.ENGINE_PARAMS, "ewma_fast": 0.95}
    variants = {
        registry.fingerprint(changed_param),
        registry.fingerprint(swapped),
        registry.fingerprint(renamed),
        registry.fingerprint(features, engine_params),
        registry.fingerprint(features, code_version=registry.CODE_VERSION + 1),
    }
    assert base not in variants
    assert len(variants) == 5


def test_features_md_is_generated_from_the_registry() -> None:
    assert cli.FEATURES_MD.read_text(encoding="utf-8") == cli.render_markdown(), (
        "FEATURES.md is stale: run `barcast features markdown`"
    )


def test_cli_lists_every_feature(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    parser = argparse.ArgumentParser(prog="barcast")
    cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["features", "list"])
    assert args.func(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:4] == ["0", "ret_1", "basic", "bar"]
    assert any(line.split()[:2] == ["224", "kama_slope"] for line in lines)
    assert registry.FINGERPRINT in lines[-1]
    target = tmp_path / "F.md"
    args = parser.parse_args(["features", "markdown", "--output", str(target)])
    assert args.func(args) == 0
    assert target.read_text(encoding="utf-8") == cli.render_markdown()
    nowhere = tmp_path / "no-folder" / "F.md"
    args = parser.parse_args(["features", "markdown", "--output", str(nowhere)])
    assert args.func(args) == 2
    assert f"--output {nowhere}: No such file or directory" in capsys.readouterr().err


def test_every_window_read_is_a_summed_field() -> None:
    """Each window only sums a prefix of the record fields (core.NF, flow.NF); a read past it
    would see a stale mean. Check every literal (window, field) read in the kernels."""
    source = "\n".join(p.read_text() for p in Path(registry.__file__).parent.glob("*.py"))
    price = re.findall(
        r"(?:mp|varp)\(ctx, (W\d+), (F_\w+)(?:, (F_\w+))?\)"
        r"|wsum\(cs, SUMS_P, KP, (W\d+), (F_\w+)\)",
        source,
    )
    volume = re.findall(
        r"mv\(ctx, (W\d+), (V_\w+)\)|wsum\(fs, SUMS_V, KV, (W\d+), (V_\w+)\)", source
    )
    assert len(price) > 50 and len(volume) > 10
    for w, f, f2, sw, sf in price:
        for field in (f, f2, sf):
            if field:
                window = WINDOW_INDEX[w or sw]
                assert getattr(core, field) < core.NF[window], f"{field} over {w or sw}"
    for w, f, sw, sf in volume:
        window = WINDOW_INDEX[w or sw]
        assert getattr(flow, f or sf) < flow.NF[window], f"{f or sf} over {w or sw}"
