"""Training refuses a split that would leave a product untrained (model/guards.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from model.covariates import NS_PER_MIN
from model.dataset import panel_from_arrays
from model.guards import TrainingError
from model.synthetic import synthetic_panel
from model.train import split_windows
from tests.model.test_train import QUIET, TINY


def test_a_product_whose_bars_all_come_after_the_training_split_is_refused() -> None:
    """Fractions cut the pooled bars at times: a product of a later period (6E's 2024 beside
    ES's 2020-21) would fall whole in validation and calibration, its model never trained on it."""
    early = synthetic_panel(n_bars=3000)
    late = (early.ts + 4000 * NS_PER_MIN, early.close, early.features, early.warm)
    rows = [(early.ts, early.close, early.features, early.warm), late]
    panel = panel_from_arrays(["ESH4", "6EH4"], rows, 10, feature_names=early.feature_names)
    cut_in_es = replace(QUIET, val_fraction=0.3, calib_fraction=0.25)
    with pytest.raises(TrainingError, match="6E: no training window"):
        split_windows(panel, TINY, cut_in_es)
    split_windows(panel, TINY, replace(QUIET, val_fraction=0.2, calib_fraction=0.1))  # both train
    # A product's next contract after the cut trains as the product: the model's embedding
    contracts = panel_from_arrays(["ESH4", "ESM4"], rows, 10, feature_names=early.feature_names)
    split_windows(contracts, TINY, cut_in_es)
