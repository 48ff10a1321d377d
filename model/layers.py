"""TFT building blocks: gates, gated residual networks, variable selection, attention, head.

Variable selection keeps the variable axis first, `(V, N, d)`, so every per-variable layer is one
batched matmul over all V variables (`torch.baddbmm` on `(V, in, out)` weights): no Python loop
over the 225 features, which is what makes pytorch-forecasting's TFT slow.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class GateAddNorm(nn.Module):
    """LayerNorm(skip + GLU(dropout(x))): the gated skip connection used all over the TFT."""

    def __init__(self, d_in: int, d_out: int, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.glu = nn.Linear(d_in, 2 * d_out)
        self.norm = nn.LayerNorm(d_out)

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        return self.norm(skip + F.glu(self.glu(self.dropout(x)), dim=-1))


class GRN(nn.Module):
    """Gated residual network (Lim et al. 2021, eq. 2-5) with an optional context input.

    The context may broadcast against x (e.g. a per-symbol context `(B, 1, C)` for `(B, T, D)`).
    """

    def __init__(
        self, d_in: int, d_hidden: int, d_out: int, dropout: float, d_context: int = 0
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.context = nn.Linear(d_context, d_hidden, bias=False) if d_context else None
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.skip = nn.Linear(d_in, d_out) if d_in != d_out else None
        self.gate = GateAddNorm(d_hidden, d_out, dropout)

    def forward(self, x: Tensor, context: Tensor | None = None) -> Tensor:
        h = self.fc1(x)
        if self.context is not None and context is not None:
            h = h + self.context(context)
        h = self.fc2(F.elu(h))
        return self.gate(h, x if self.skip is None else self.skip(x))


def _batched_weight(n_vars: int, d_in: int, d_out: int) -> nn.Parameter:
    # nn.Linear's default init, once per variable.
    bound = 1.0 / math.sqrt(d_in)
    return nn.Parameter(torch.empty(n_vars, d_in, d_out).uniform_(-bound, bound))


class ScalarEmbedding(nn.Module):
    """Embeds each real-valued variable with its own linear map R -> R^d: `(N, V)` -> `(V, N, d)`."""

    def __init__(self, n_vars: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_vars, 1, dim))
        self.bias = nn.Parameter(torch.zeros(n_vars, 1, dim))

    def forward(self, x: Tensor) -> Tensor:
        return torch.addcmul(self.bias, x.t().contiguous().unsqueeze(-1), self.weight)


class VariableGRN(nn.Module):
    """One GRN per variable (no weight sharing), all variables in one batched matmul each."""

    def __init__(self, n_vars: int, dim: int, dropout: float) -> None:
        super().__init__()
        self.dim = dim
        self.w1 = _batched_weight(n_vars, dim, dim)
        self.b1 = nn.Parameter(torch.zeros(n_vars, 1, dim))
        self.w2 = _batched_weight(n_vars, dim, dim)
        self.b2 = nn.Parameter(torch.zeros(n_vars, 1, dim))
        self.w_glu = _batched_weight(n_vars, dim, 2 * dim)
        self.b_glu = nn.Parameter(torch.zeros(n_vars, 1, 2 * dim))
        self.norm_weight = nn.Parameter(torch.ones(n_vars, 1, dim))
        self.norm_bias = nn.Parameter(torch.zeros(n_vars, 1, dim))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        """`(V, N, d)` -> `(V, N, d)`."""
        h = F.elu(torch.baddbmm(self.b1, x, self.w1))
        h = torch.baddbmm(self.b2, h, self.w2)
        gated = F.glu(torch.baddbmm(self.b_glu, self.dropout(h), self.w_glu), dim=-1)
        normed = F.layer_norm(x + gated, (self.dim,))
        return torch.addcmul(self.norm_bias, normed, self.norm_weight)


class VariableSelection(nn.Module):
    """TFT variable selection network over V variables, batched over the variable axis.

    Selection weights come from a GRN over the flattened inputs. For real-valued variables the
    flat input is the raw values: their TFT embeddings are linear, so a linear layer over the
    concatenated embeddings is exactly a linear layer over the raw values, 16x cheaper.
    Each variable's GRN works at width `var_dim`; its output projection to `hidden` is linear,
    so it is applied after the weighting as one `(V*var_dim, hidden)` matmul.
    """

    def __init__(
        self, n_vars: int, var_dim: int, flat_dim: int, hidden: int, dropout: float,
        d_context: int = 0,
    ) -> None:
        super().__init__()
        self.weights_grn = GRN(flat_dim, hidden, n_vars, dropout, d_context)
        self.variable_grn = VariableGRN(n_vars, var_dim, dropout)
        self.combine = nn.Linear(n_vars * var_dim, hidden)

    def forward(
        self, embedded: Tensor, flat: Tensor, context: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """embedded `(V, N, d)`, flat `(..., F)` with N = prod(...) -> `(..., hidden)`, `(..., V)`."""
        weights = torch.softmax(self.weights_grn(flat, context), dim=-1)
        n_vars, n, dim = embedded.shape
        transformed = self.variable_grn(embedded)
        weighted = transformed * weights.reshape(n, n_vars).t().unsqueeze(-1)
        out = self.combine(weighted.transpose(0, 1).reshape(n, n_vars * dim))
        return out.reshape(*flat.shape[:-1], -1), weights


class InterpretableAttention(nn.Module):
    """Interpretable multi-head attention: per-head queries/keys, one value projection shared
    by all heads, so the head-averaged weights say which past steps the forecast used."""

    def __init__(self, hidden: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.d_head = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, self.d_head)
        self.out = nn.Linear(self.d_head, hidden)
        self.dropout = nn.Dropout(dropout)

    def forward(self, queries: Tensor, keys: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """queries `(B, Q, H)`, keys `(B, S, H)`, mask `(Q, S)` True where attending is allowed.

        Returns the output `(B, Q, H)` and the weights `(B, heads, Q, S)`.
        """
        b, n_q, _ = queries.shape
        n_s = keys.shape[1]
        q = self.query(queries).view(b, n_q, self.heads, self.d_head).transpose(1, 2)
        k = self.key(keys).view(b, n_s, self.heads, self.d_head).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.d_head)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        mixed = self.dropout(weights).mean(dim=1) @ self.value(keys)
        return self.out(mixed), weights


class QuantileHead(nn.Module):
    """Quantiles that cannot cross: the median plus cumulative softplus gaps outward from it."""

    def __init__(self, hidden: int, quantiles: tuple[float, ...]) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden, len(quantiles))
        self.median = quantiles.index(0.5)

    def forward(self, x: Tensor) -> Tensor:
        raw = self.proj(x)
        m = self.median
        median = raw[..., m : m + 1]
        gaps = F.softplus(raw)
        upper = median + gaps[..., m + 1 :].cumsum(-1)
        lower = median - gaps[..., :m].flip(-1).cumsum(-1).flip(-1)
        return torch.cat([lower, median, upper], dim=-1)
