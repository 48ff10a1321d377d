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
        past_out, state = self.encoder(encoded, self.initial_state(static))
        keys, values = self.remember(past_out, encoded, static.enrichment)
        return self.decode(state, keys, values, static, x_future)

    def initial_state(self, static: StaticContext) -> tuple[Tensor, Tensor]:
        """The encoder LSTM's state before a symbol's first bar: `(lstm_layers, B, hidden)`."""
        layers = self.config.lstm_layers
        return (
            static.state_h.unsqueeze(0).expand(layers, -1, -1).contiguous(),
            static.state_c.unsqueeze(0).expand(layers, -1, -1).contiguous(),
        )

    def step(
        self, encoded: Tensor, state: tuple[Tensor, Tensor], enrichment: Tensor
    ) -> tuple[tuple[Tensor, Tensor], Tensor, Tensor]:
        """One bar through the encoder from `state`: the next state, and the bar's attention
        key `(B, 1, hidden)` and value `(B, 1, d_head)`. encoded `(B, 1, hidden)`."""
        past_out, state = self.encoder(encoded, state)
        return (state, *self.remember(past_out, encoded, enrichment))

    def remember(
        self, past_out: Tensor, encoded: Tensor, enrichment: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Past positions' attention keys and values `(B, T, .)` from their encoder outputs and
        encodings `(B, T, hidden)`: each position's depends on its own only, so a streaming
        encoder computes them once, when the position's bar arrives."""
        temporal = self.lstm_gate(past_out, encoded)
        return self.attention.project(self.enrichment(temporal, enrichment.unsqueeze(1)))

    def decode(
        self,
        state: tuple[Tensor, Tensor],
        keys: Tensor,
        values: Tensor,
        static: StaticContext,
        x_future: Tensor,
    ) -> TFTOutput:
        """The forecast from the encoder's `state` after the newest bar and the past positions'
        keys and values (`remember`, oldest first): the decoder LSTM over the known-future
        inputs, attention over past and future, the head."""
        future, future_weights = self.future_selection(x_future, static.selection)
        future_out, _ = self.decoder(future, state)
        temporal = self.lstm_gate(future_out, future)
        enriched = self.enrichment(temporal, static.enrichment.unsqueeze(1))
        future_keys, future_values = self.attention.project(enriched)
        n_past, n_fut = keys.shape[1], x_future.shape[1]
        # Decoder step i sits at position n_past + i and may see every position up to itself.
        mask = torch.ones(n_fut, n_past + n_fut, dtype=torch.bool, device=keys.device)
        mask = mask.tril(diagonal=n_past)
        attended, attention = self.attention.attend(
            enriched,
            torch.cat([keys, future_keys], dim=1),
            torch.cat([values, future_values], dim=1),
            mask,
        )
        attended = self.attention_gate(attended, enriched)
        decoded = self.output_gate(self.feed_forward(attended), temporal)
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
