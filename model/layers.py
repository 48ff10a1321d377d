"""TFT building blocks: gates, gated residual networks, variable selection, attention, head.

Variable selection keeps the variable axis first, `(V, d, N)`, so every per-variable layer is one
batched matmul over all V variables (`torch.baddbmm` on `(V, out, in)` weights): no Python loop
over the engine's features, which is what makes pytorch-forecasting's TFT slow.
"""

from __future__ import annotations

import math
from statistics import NormalDist

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


def _batched_weight(*shape: int, fan_in: int) -> nn.Parameter:
    # nn.Linear's default init, once per variable.
    bound = 1.0 / math.sqrt(fan_in)
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


class VariableGRN(nn.Module):
    """One GRN per real-valued variable, from its scalar value to `dim`: `(N, V)` -> `(V, dim, N)`.

    All V variables run at once through batched `(V, out, in)` weights, feature-major (the N
    rows innermost), so every elementwise step is a long contiguous vector op. A real variable's
    TFT embedding is linear in its value, so the GRN's first layer on it is one more linear map
    of the scalar (`w_in`) and the residual is the embedding itself (`w_skip`). The GRN's second
    linear layer and the GLU's are merged (a linear map of a linear map); the LayerNorm has no
    affine, as the linear `VariableSelection.combine` that follows absorbs it.

    The residual's bias starts random like the first layer's: a LayerNorm of `x * w_skip` alone
    is the same vector for every positive x (and its negative for every negative one), so with
    a zero bias a variable's embedding would start blind to the size of its value, which is
    what a volatility input carries.
    """

    def __init__(self, n_vars: int, dim: int, dropout: float) -> None:
        super().__init__()
        self.dim = dim
        self.w_in = _batched_weight(n_vars, dim, 1, fan_in=1)
        self.b_in = _batched_weight(n_vars, dim, 1, fan_in=1)
        self.w_skip = _batched_weight(n_vars, dim, 1, fan_in=1)
        self.b_skip = _batched_weight(n_vars, dim, 1, fan_in=1)
        self.w_glu = _batched_weight(n_vars, 2 * dim, dim, fan_in=dim)  # rows: value, gate
        self.b_glu = nn.Parameter(torch.zeros(n_vars, 2 * dim, 1))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = x.t().contiguous().unsqueeze(1)
        h = self.dropout(F.elu(torch.addcmul(self.b_in, x, self.w_in)))
        gate = torch.baddbmm(self.b_glu, self.w_glu, h)
        d = self.dim
        z = torch.addcmul(self.b_skip, x, self.w_skip) + gate[:, :d] * torch.sigmoid(gate[:, d:])
        centered = z - z.mean(dim=1, keepdim=True)
        return centered * torch.rsqrt(centered.square().mean(dim=1, keepdim=True) + 1e-5)


class VariableSelection(nn.Module):
    """TFT variable selection over real-valued variables (and optional categorical embeddings).

    Each real variable goes through its own `VariableGRN`; a categorical variable is represented
    by its embedding (any function of a category is an embedding lookup). The softmax selection
    weights come from a GRN over the flat inputs: the raw real values (their TFT embeddings are
    linear, so a linear layer over the concatenated embeddings is a linear layer over the raw
    values, `var_dim` times cheaper) and the categorical embeddings. Each variable's projection
    to `hidden` is linear, so it runs after the weighting as one `(V * var_dim, hidden)` matmul.
    """

    # Variable-rows per block on CPU (256 rows of 227 variables): the (V, var_dim, rows)
    # intermediates then stay in cache, which is several times faster than streaming
    # whole-batch tensors through memory. A selection over few variables is split far less.
    CPU_BLOCK_VALUES = 256 * 227

    def __init__(
        self,
        n_reals: int,
        var_dim: int,
        hidden: int,
        dropout: float,
        d_context: int = 0,
        n_categorical: int = 0,
    ) -> None:
        super().__init__()
        self.n_vars = n_categorical + n_reals
        self.real_grn = VariableGRN(n_reals, var_dim, dropout)
        n_flat = n_reals + n_categorical * var_dim
        self.weights_grn = GRN(n_flat, hidden, self.n_vars, dropout, d_context)
        self.combine = nn.Linear(self.n_vars * var_dim, hidden)

    def forward(
        self, reals: Tensor, context: Tensor | None = None, categorical: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """reals `(B, T, n_reals)`, context `(B, d_context)`, categorical `(B, T, n_categorical,
        var_dim)` -> output `(B, T, hidden)` and selection weights `(B, T, n_vars)`."""
        b, t, _ = reals.shape
        block = b if reals.is_cuda else max(1, self.CPU_BLOCK_VALUES // (self.n_vars * t))
        parts = [
            self._select(
                reals[i : i + block],
                None if context is None else context[i : i + block],
                None if categorical is None else categorical[i : i + block],
            )
            for i in range(0, b, block)
        ]
        if len(parts) == 1:
            return parts[0]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    def _select(
        self, reals: Tensor, context: Tensor | None, categorical: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        b, t, n_reals = reals.shape
        n = b * t
        transformed = self.real_grn(reals.reshape(n, n_reals))
        flat = reals
        if categorical is not None:
            embedded = categorical.reshape(n, -1, self.real_grn.dim).permute(1, 2, 0)
            transformed = torch.cat([embedded, transformed])
            flat = torch.cat([reals, categorical.flatten(2)], dim=-1)
        weights = torch.softmax(
            self.weights_grn(flat, None if context is None else context.unsqueeze(1)), dim=-1
        )
        weighted = transformed * weights.reshape(n, self.n_vars).t().contiguous().unsqueeze(1)
        out = self.combine(weighted.reshape(-1, n).t())
        return out.reshape(b, t, -1), weights


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
        return self.attend(queries, *self.project(keys), mask)

    def project(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """The keys `(B, S, H)` and values `(B, S, d_head)` of positions `(B, S, H)`: each
        position's own, so a stream computes a past position's once, when its bar arrives."""
        return self.key(positions), self.value(positions)

    def attend(
        self, queries: Tensor, keys: Tensor, values: Tensor, mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        """`forward` from projected keys and values (`project`)."""
        b, n_q, _ = queries.shape
        n_s = keys.shape[1]
        q = self.query(queries).view(b, n_q, self.heads, self.d_head).transpose(1, 2)
        k = keys.view(b, n_s, self.heads, self.d_head).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.d_head)
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        mixed = self.dropout(weights).mean(dim=1) @ values
        return self.out(mixed), weights


class QuantileHead(nn.Module):
    """Quantiles that cannot cross: the median plus cumulative softplus gaps outward from it,
    in the units of the window's volatility scale (`model.volatility.VolatilityScale`).

    It starts as the standard normal's quantiles whatever its input (zero weights, biases at
    those gaps), so training begins from the volatility scale's own Gaussian forecast and
    learns departures from it, instead of first having to find the scale of returns. With
    `zero_median` the median is 0: a learned median of minute returns fitted noise and cost
    test pinball in every run of benchmarks/results/model_experiments.json.
    """

    def __init__(self, hidden: int, quantiles: tuple[float, ...], zero_median: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden, len(quantiles))
        self.median = m = quantiles.index(0.5)
        self.zero_median = zero_median
        z = [NormalDist().inv_cdf(q) for q in quantiles]
        gaps = [abs(z[j] - z[j + 1 if j < m else j - 1]) for j in range(len(z))]
        bias = [0.0 if j == m else math.log(math.expm1(g)) for j, g in enumerate(gaps)]
        with torch.no_grad():
            self.proj.weight.zero_()
            self.proj.bias.copy_(torch.tensor(bias))

    def forward(self, x: Tensor) -> Tensor:
        raw = self.proj(x)
        m = self.median
        median = raw[..., m : m + 1] * (0.0 if self.zero_median else 1.0)
        gaps = F.softplus(raw)
        upper = median + gaps[..., m + 1 :].cumsum(-1)
        lower = median - gaps[..., :m].flip(-1).cumsum(-1).flip(-1)
        return torch.cat([lower, median, upper], dim=-1)
