"""The tensor work of stepping a batch's streams (model.serving.streaming.advance), one call.

Scripted around the traced encode and step programs (model.serving.programs), a batch's steps
are one call from Python, which gives the GIL up once: each op that Python calls, and each
tensor it frees, gives it up too, and in a burst each must then win it back from the event
loop, busy with the very bars being forecast. What to step is worked out in Python (`Plan`);
the same ops run here in the same order, so forecasts are the same bits either way. Eager (on
CUDA, or bf16) it runs as plain Python.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn


class Plan(NamedTuple):
    """Which rows of which symbols a batch steps, as plain ints (`StreamSteps.forward`)."""

    contexts: list[int]  # per symbol: a request of it, whose static context it starts from
    rows: list[int]  # per row to encode, its symbol
    have: list[int]  # the symbols with a stored stream, in the order of `stored`
    # per step: its rows' symbols, their indices among the encoded rows, whether each starts
    # its stream again, the ring slots they fill, and of those followed by a forecast: the
    # symbol, the request and the row
    steps: list[list[list[int]]]
    stepped: list[int]  # the symbols stepped, whose streams are copied out
    requests: int


class StreamSteps(nn.Module):
    """`encode` the new rows, step every symbol's stream over them with `step`, and gather
    each request's carried state (keys, values, h, c) as of its row; the streams stepped come
    back as copies owning their memory, so that a stream does not keep the batch alive."""

    def __init__(
        self,
        encode: nn.Module,
        step: nn.Module,
        layers: int,
        hidden: int,
        lookback: int,
        d_head: int,
    ) -> None:
        super().__init__()
        self.encode, self.step = encode, step
        self.layers, self.hidden, self.lookback, self.d_head = layers, hidden, lookback, d_head

    def forward(
        self,
        x: Tensor,
        static: list[Tensor],
        stored: list[Tensor],
        plan: tuple[list[int], list[int], list[int], list[list[list[int]]], list[int], int],
    ) -> tuple[list[Tensor], list[Tensor]]:
        """`x` the new rows normalized `(rows, 1, n_hist)`, `static` the requests' selection,
        enrichment and initial h and c contexts, `stored` the streams of `Plan.have`: each
        request's keys, values, h and c, and the copies of the streams stepped."""
        contexts, rows, have, steps, stepped, n = plan
        selection, enrichment, state_h, state_c = static
        at_first = torch.tensor(contexts, dtype=torch.long)
        initial_h, initial_c = state_h[at_first], state_c[at_first]
        enrichment = enrichment[at_first]
        selected = selection[at_first][torch.tensor(rows, dtype=torch.long)]
        encoded = self.encode([x, selected])[0]
        carried = self._stacked(initial_h, initial_c, stored, have)
        h, c, keys, values = self._parts(carried)
        # (TorchScript has no unpacking in a list display)
        out = [
            keys.new_empty([n] + list(keys.shape[1:])),  # noqa: RUF005
            values.new_empty([n] + list(values.shape[1:])),  # noqa: RUF005
            h.new_empty([n] + list(h.shape[1:])),  # noqa: RUF005
            c.new_empty([n] + list(c.shape[1:])),  # noqa: RUF005
        ]
        ring = torch.arange(self.lookback)
        for now in steps:
            at = torch.tensor(now[0], dtype=torch.long)
            restart = torch.tensor(now[2], dtype=torch.bool)[:, None, None]
            h_in = torch.where(restart, initial_h[at, None], h[at])
            c_in = torch.where(restart, initial_c[at, None], c[at])
            flat_at = torch.tensor(now[1], dtype=torch.long)
            stepped_out = self.step([encoded[flat_at], h_in, c_in, enrichment[at]])
            h[at] = stepped_out[0]
            c[at] = stepped_out[1]
            slots = torch.tensor(now[3], dtype=torch.long)
            keys[at, slots] = stepped_out[2][:, 0]
            values[at, slots] = stepped_out[3][:, 0]
            if len(now[4]) > 0:  # their windows, as of this step: oldest slot first
                s = torch.tensor(now[4], dtype=torch.long)
                j = torch.tensor(now[5], dtype=torch.long)
                order = (torch.tensor(now[6], dtype=torch.long)[:, None] + ring) % self.lookback
                out[0][j] = keys[s[:, None], order]
                out[1][j] = values[s[:, None], order]
                out[2][j] = h[s]
                out[3][j] = c[s]
        return out, [carried[i].clone() for i in stepped]

    def _stacked(
        self, initial_h: Tensor, initial_c: Tensor, stored: list[Tensor], have: list[int]
    ) -> Tensor:
        """The symbols' carried states stacked `(S, size)`; a symbol without a stored one in
        its static state with an empty ring."""
        n = self.layers * self.hidden
        size = 2 * n + self.lookback * (self.hidden + self.d_head)
        carried = initial_h.new_zeros([initial_h.size(0), size])
        carried[:, :n] = initial_h.repeat(1, self.layers)
        carried[:, n : 2 * n] = initial_c.repeat(1, self.layers)
        if len(have) > 0:
            carried[torch.tensor(have, dtype=torch.long)] = torch.stack(stored).to(carried.dtype)
        return carried

    def _parts(self, carried: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Views of stacked carried states: h, c `(S, layers, hidden)`, and the ring's keys
        `(S, lookback, hidden)` and values `(S, lookback, d_head)`."""
        n, s = self.layers * self.hidden, carried.size(0)
        ring = carried[:, 2 * n :].view(s, self.lookback, self.hidden + self.d_head)
        h = carried[:, :n].view(s, self.layers, self.hidden)
        c = carried[:, n : 2 * n].view(s, self.layers, self.hidden)
        return h, c, ring[:, :, : self.hidden], ring[:, :, self.hidden :]
