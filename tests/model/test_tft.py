"""The TFT itself: shapes, non-crossing quantiles, batched variable selection, causal attention,
the split forward used by the worker's incremental cache."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from model.config import ConfigError, TFTConfig
from model.layers import VariableGRN, VariableSelection
from model.tft import TemporalFusionTransformer
from tests.checkpoints import untrained_model

torch.set_num_threads(1)

SMALL = TFTConfig(
    lookback=12,
    horizon=4,
    hidden=16,
    heads=4,
    lstm_layers=2,
    n_hist=30,
    var_dim=4,
    n_symbols=3,
    dropout=0.0,
)


def inputs(config: TFTConfig, batch: int = 5, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randint(0, config.n_symbols, (batch,), generator=g),
        torch.randn(batch, config.n_static_reals, generator=g),
        torch.randn(batch, config.lookback, config.n_hist, generator=g),
        torch.randn(batch, config.horizon, config.n_future, generator=g),
    )


@pytest.fixture(scope="module")
def model() -> TemporalFusionTransformer:
    torch.manual_seed(0)
    return untrained_model(SMALL)


def test_output_shapes_and_interpretation(model: TemporalFusionTransformer) -> None:
    out = model(*inputs(SMALL))
    c = SMALL
    assert out.quantiles.shape == (5, c.horizon, 3)
    assert out.attention.shape == (5, c.heads, c.horizon, c.lookback + c.horizon)
    assert out.hist_weights is not None and out.hist_weights.shape == (5, c.lookback, c.n_hist)
    assert out.future_weights.shape == (5, c.horizon, c.n_future)
    assert out.static_weights.shape == (5, c.n_static)
    for weights in (out.hist_weights, out.future_weights, out.static_weights, out.attention):
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_quantiles_never_cross_even_for_extreme_inputs(model: TemporalFusionTransformer) -> None:
    symbol, static, hist, future = inputs(SMALL, batch=64, seed=1)
    for scale in (1.0, 1e3):
        q = model(symbol, static * scale, hist * scale, future * scale).quantiles
        assert torch.all(q[..., 1:] >= q[..., :-1])
    model.head.proj.bias.data += torch.tensor([5.0, 0.0, -5.0])  # pushes q10 above q90 raw
    q = model(symbol, static, hist, future).quantiles
    model.head.proj.bias.data -= torch.tensor([5.0, 0.0, -5.0])
    assert torch.all(q[..., 1:] >= q[..., :-1])


def test_variable_selection_is_batched_not_a_loop_over_variables() -> None:
    """The 227 per-variable GRNs are single (V, in, out) weight tensors, so the number of
    modules and of parameter tensors does not grow with the number of variables."""
    small = TemporalFusionTransformer(TFTConfig(hidden=16, heads=4, n_hist=10, var_dim=4))
    full = TemporalFusionTransformer(TFTConfig(hidden=16, heads=4, n_hist=227, var_dim=4))
    assert len(list(small.modules())) == len(list(full.modules()))
    assert len(list(small.parameters())) == len(list(full.parameters()))
    grn = full.hist_selection.real_grn
    assert isinstance(grn, VariableGRN)
    assert grn.w_in.shape == (227, 4, 1) and grn.w_glu.shape == (227, 8, 4)
    assert not any(isinstance(m, nn.ModuleList | nn.ModuleDict) for m in full.modules())


def test_variable_grns_are_independent_per_variable() -> None:
    """Changing variable j's value changes only variable j's transformed vector."""
    torch.manual_seed(0)
    grn = VariableGRN(6, 4, 0.0)
    x = torch.randn(3, 6)
    y = x.clone()
    y[:, 2] += 1.0
    diff = (grn(x) - grn(y)).abs().sum(dim=(1, 2))
    assert diff[2] > 0 and torch.all(diff[[0, 1, 3, 4, 5]] == 0)


def test_cpu_blocking_gives_the_same_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    vsn = VariableSelection(20, 4, 16, 0.0, d_context=16).eval()
    x, ctx = torch.randn(30, 10, 20), torch.randn(30, 16)
    whole = vsn(x, ctx)
    monkeypatch.setattr(VariableSelection, "CPU_BLOCK_VALUES", 25 * 20)  # 2 windows per block
    blocked = vsn(x, ctx)
    torch.testing.assert_close(blocked[0], whole[0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(blocked[1], whole[1], atol=1e-6, rtol=1e-5)


def test_decoder_attention_is_causal(model: TemporalFusionTransformer) -> None:
    symbol, static, hist, future = inputs(SMALL)
    out = model(symbol, static, hist, future)
    n_past = SMALL.lookback
    allowed = torch.ones(SMALL.horizon, n_past + SMALL.horizon).tril(n_past).bool()
    assert torch.all(out.attention[..., ~allowed] == 0)
    changed = future.clone()
    changed[:, 2] += 3.0  # the known inputs of future step 2
    q = model(symbol, static, hist, changed).quantiles
    torch.testing.assert_close(q[:, :2], out.quantiles[:, :2])
    assert not torch.allclose(q[:, 2:], out.quantiles[:, 2:])


def test_attention_entropy_is_positive_at_init(model: TemporalFusionTransformer) -> None:
    attention = model(*inputs(SMALL)).attention
    entropy = -(attention * attention.clamp_min(1e-12).log()).sum(-1).mean()
    assert entropy > 0.5


def test_incremental_encoding_equals_full_forward(model: TemporalFusionTransformer) -> None:
    """Sliding a window one bar at a time, encoding only the new bar, gives the full forward's
    quantiles (<= 1e-5): what the worker's per-symbol cache relies on."""
    c = SMALL
    steps = 40
    g = torch.Generator().manual_seed(3)
    symbol, static = torch.tensor([1]), torch.randn(1, c.n_static_reals, generator=g)
    history = torch.randn(1, steps, c.n_hist, generator=g)
    future = torch.randn(steps, 1, c.horizon, c.n_future, generator=g)
    with torch.inference_mode():
        ctx = model.static_context(symbol, static)
        cache = []
        for t in range(steps):
            cache.append(model.encode_history(history[:, t : t + 1], ctx.selection)[0])
            if t + 1 < c.lookback:
                continue
            encoded = torch.cat(cache[-c.lookback :], dim=1)
            cached = model.forward_encoded(encoded, ctx, future[t]).quantiles
            full = model(symbol, static, history[:, t + 1 - c.lookback : t + 1], future[t])
            assert (cached - full.quantiles).abs().max() <= 1e-5


def test_forward_shared_equals_forward(model: TemporalFusionTransformer) -> None:
    c = SMALL
    g = torch.Generator().manual_seed(4)
    rows = torch.randn(20, c.n_hist, generator=g)
    index = torch.stack([torch.arange(s, s + c.lookback) for s in (0, 3, 8)])
    row_window = torch.tensor([0] * 3 + [1] * 5 + [2] * 12)
    symbol = torch.tensor([2, 2, 2])
    static = torch.randn(1, c.n_static_reals, generator=g).expand(3, -1)
    future = torch.randn(3, c.horizon, c.n_future, generator=g)
    shared = model.forward_shared(symbol, static, rows, index, row_window, future)
    full = model(symbol, static, rows[index], future)
    torch.testing.assert_close(shared.quantiles, full.quantiles, atol=1e-5, rtol=1e-5)


def test_config_rejects_unusable_values() -> None:
    with pytest.raises(ConfigError, match="divisible"):
        TFTConfig(hidden=30, heads=8)
    with pytest.raises(ConfigError, match=r"0\.5"):
        TFTConfig(quantiles=(0.1, 0.9))
    with pytest.raises(ConfigError, match="unknown"):
        TFTConfig.from_dict({"hidden": 16, "heads": 4, "bogus": 1})
    assert TFTConfig.from_dict(TFTConfig().to_dict()) == TFTConfig()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_variables_embedding_tells_the_size_of_its_value_from_the_start(seed: int) -> None:
    """A volatility input says how big, not only which sign: at initialization the embeddings
    of a small and a large value of a variable must point in clearly different directions (a
    zero residual bias made them nearly one direction, mean cosine about 0.9)."""
    torch.manual_seed(seed)
    grn = VariableGRN(64, 8, dropout=0.0).eval()
    small, large = torch.full((1, 64), 0.5), torch.full((1, 64), 4.0)
    with torch.no_grad():
        cos = nn.functional.cosine_similarity(grn(small)[:, :, 0], grn(large)[:, :, 0], dim=1)
    assert cos.mean() < 0.75
