"""Temporal Fusion Transformer (Lim et al. 2021) for multi-horizon quantile forecasts of bars.

The forward pass is split so the forecast worker can cache work: `encode_history` turns each
past bar into its variable-selection encoding using only that bar's features and the symbol's
static context, so when the window slides by one bar only the new bar needs encoding;
`forward_encoded` runs the LSTM, attention and head over a whole window of such encodings.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from model.config import TFTConfig
from model.layers import (
    GRN,
    GateAddNorm,
    InterpretableAttention,
    QuantileHead,
    VariableSelection,
)


class StaticContext(NamedTuple):
    """The four static covariate encodings of a batch of symbols, each `(B, hidden)`."""

    selection: Tensor
    enrichment: Tensor
    state_h: Tensor
    state_c: Tensor
    weights: Tensor  # static variable-selection weights (B, n_static)


class TFTOutput(NamedTuple):
    quantiles: Tensor  # (B, horizon, n_quantiles), in units of the window's volatility scale
    attention: Tensor  # (B, heads, horizon, lookback + horizon)
    future_weights: Tensor  # (B, horizon, n_future)
    static_weights: Tensor  # (B, n_static)
    hist_weights: Tensor | None = None  # (B, lookback, n_hist); None from forward_encoded


class TemporalFusionTransformer(nn.Module):
    def __init__(self, config: TFTConfig) -> None:
        super().__init__()
        self.config = c = config
        h, d = c.hidden, c.var_dim

        self.symbol_embedding = nn.Embedding(c.n_symbols, d)
        self.static_selection = VariableSelection(
            c.n_static_reals, d, h, c.dropout, n_categorical=1
        )
        self.hist_selection = VariableSelection(c.n_hist, d, h, c.dropout, d_context=h)
        self.future_selection = VariableSelection(c.n_future, d, h, c.dropout, d_context=h)

        self.context_selection = GRN(h, h, h, c.dropout)
        self.context_enrichment = GRN(h, h, h, c.dropout)
        self.context_state_h = GRN(h, h, h, c.dropout)
        self.context_state_c = GRN(h, h, h, c.dropout)

        lstm_dropout = c.dropout if c.lstm_layers > 1 else 0.0
        self.encoder = nn.LSTM(h, h, c.lstm_layers, batch_first=True, dropout=lstm_dropout)
        self.decoder = nn.LSTM(h, h, c.lstm_layers, batch_first=True, dropout=lstm_dropout)
        self.lstm_gate = GateAddNorm(h, h, c.dropout)
        self.enrichment = GRN(h, h, h, c.dropout, d_context=h)
        self.attention = InterpretableAttention(h, c.heads, c.dropout)
        self.attention_gate = GateAddNorm(h, h, c.dropout)
        self.feed_forward = GRN(h, h, h, c.dropout)
        self.output_gate = GateAddNorm(h, h, 0.0)
        self.head = QuantileHead(h, c.quantiles, c.zero_median)

    def static_context(self, symbol: Tensor, static_reals: Tensor) -> StaticContext:
        """symbol `(B,)` int64 embedding rows, static_reals `(B, n_static - 1)`."""
        symbol_vec = self.symbol_embedding(symbol)[:, None, None, :]
        zeta, weights = self.static_selection(static_reals.unsqueeze(1), categorical=symbol_vec)
        zeta, weights = zeta[:, 0], weights[:, 0]
        return StaticContext(
            self.context_selection(zeta),
            self.context_enrichment(zeta),
            self.context_state_h(zeta),
            self.context_state_c(zeta),
            weights,
        )

    def encode_history(self, x_hist: Tensor, selection: Tensor) -> tuple[Tensor, Tensor]:
        """x_hist `(B, T, n_hist)`, selection context `(B, hidden)` -> encodings `(B, T, hidden)`
        and selection weights `(B, T, n_hist)`. Each step depends only on its own features."""
        return self.hist_selection(x_hist, selection)

    def forward_encoded(
        self, encoded: Tensor, static: StaticContext, x_future: Tensor
    ) -> TFTOutput:
        """encoded `(B, lookback, hidden)` (from `encode_history`), x_future `(B, horizon,
        n_future)`."""
        c = self.config
        future, future_weights = self.future_selection(x_future, static.selection)

        state = (
            static.state_h.unsqueeze(0).expand(c.lstm_layers, -1, -1).contiguous(),
            static.state_c.unsqueeze(0).expand(c.lstm_layers, -1, -1).contiguous(),
        )
        past_out, state = self.encoder(encoded, state)
        future_out, _ = self.decoder(future, state)
        selected = torch.cat([encoded, future], dim=1)
        temporal = self.lstm_gate(torch.cat([past_out, future_out], dim=1), selected)

        enriched = self.enrichment(temporal, static.enrichment.unsqueeze(1))
        n_past, n_fut = encoded.shape[1], x_future.shape[1]
        # Decoder step i sits at position n_past + i and may see every position up to itself.
        mask = torch.ones(n_fut, n_past + n_fut, dtype=torch.bool, device=encoded.device)
        mask = mask.tril(diagonal=n_past)
        attended, attention = self.attention(enriched[:, n_past:], enriched, mask)
        attended = self.attention_gate(attended, enriched[:, n_past:])

        decoded = self.output_gate(self.feed_forward(attended), temporal[:, n_past:])
        return TFTOutput(self.head(decoded), attention, future_weights, static.weights)

    def forward(
        self, symbol: Tensor, static_reals: Tensor, x_hist: Tensor, x_future: Tensor
    ) -> TFTOutput:
        static = self.static_context(symbol, static_reals)
        encoded, hist_weights = self.encode_history(x_hist, static.selection)
        return self.forward_encoded(encoded, static, x_future)._replace(hist_weights=hist_weights)

    def forward_shared(
        self,
        symbol: Tensor,
        static_reals: Tensor,
        rows: Tensor,
        index: Tensor,
        row_window: Tensor,
        x_future: Tensor,
    ) -> TFTOutput:
        """`forward` for overlapping windows given as their distinct feature rows: each row is
        encoded once. rows `(U, n_hist)`; index `(B, lookback)` picks each window's rows;
        row_window `(U,)` names a window holding each row (for its static context)."""
        static = self.static_context(symbol, static_reals)
        encoded, weights = self.encode_history(rows.unsqueeze(1), static.selection[row_window])
        out = self.forward_encoded(encoded[:, 0][index], static, x_future)
        return out._replace(hist_weights=weights[:, 0][index])

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
