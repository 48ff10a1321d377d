"""model.carry: `barcast train` tells a stream checkpoint whose forecasts depend on state older
than its calibration streamed from one that does not, and records the check."""

from __future__ import annotations

import logging

import pytest
import torch

from model.carry import TOLERANCE, carry_check
from tests.checkpoints import untrained_model
from tests.model.test_stream import STREAM, stream_data


@pytest.mark.parametrize("memory", [False, True])
def test_forecasts_that_depend_on_older_state_are_flagged(
    memory: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """An encoder LSTM that forgets at every step (forget gates shut, no recurrent weights)
    forecasts the same whatever carried before its window; one that never forgets does not."""
    data, ends = stream_data(n_bars=900)
    torch.manual_seed(0)
    model = untrained_model(STREAM)
    forget = slice(STREAM.hidden, 2 * STREAM.hidden)  # gates i, f, g, o
    with torch.no_grad():
        for name, weights in model.encoder.named_parameters():
            if name.startswith("bias_ih"):
                weights[forget] = 30.0 if memory else -30.0
            elif name.startswith("weight_hh") and not memory:
                weights.zero_()
    with caplog.at_level(logging.WARNING, "barcast.train"):
        check = carry_check(model, data, ends, 64, torch.device("cpu"))
    assert check["windows"] > 100 and check["long_carry"] > check["burn_in"]
    assert (check["max_difference_of_width"] > TOLERANCE) == memory
    assert ("depend on state older" in caplog.text) == memory
    same_pinball = check["pinball"] == pytest.approx(check["pinball_long_carry"], rel=1e-9)
    assert same_pinball != memory
