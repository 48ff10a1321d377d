"""Every forecaster `barcast evaluate` scores, calibrated the same way (`model.calibration`) on
the same calibration windows: the TFT (its interval scale fitted here, not the checkpoint's),
the TFT's volatility scale alone, persistence, rolling quantiles, each EWMA with its half-lives
and blend chosen there, and the intraday HARs (`model.har`) fitted there; where the validation
windows are given, the blend is also chosen by the TFT scale's own rule; for a checkpoint trained
with the release calendar, the time-of-day EWMA and HARs are also offered with their variance at
known release minutes scaled by a factor chosen there (`offer_releases`), so the baselines know
what the TFT knows. The calibration windows are those of the calibration period where every
forecaster is defined (enough history for the slowest), so no forecaster is calibrated on windows
another could not be."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

from model import baselines, har
from model.calibration import apply_interval_scale, fit_interval_scale
from model.checkpoint import CheckpointMeta
from model.dataset import Panel, window_rows
from model.metrics import pinball_per_window
from model.releases import release_calendar
from model.serving.baselines import TOD_EWMA, VOLATILITY_SCALE
from model.volatility import TimeOfDayProfile, gaussian_misfit, per_window

HALFLIVES = (10, 20, 30, 60, 120, 240)  # bars; each EWMA baseline keeps its best on calibration
BLEND_WEIGHTS = (0.2, 0.4, 0.6, 0.8)  # the time-of-day EWMA's below 1 (baselines.profile_blend)
HARS = {"har_tod_gaussian": False, "har_tod_ewma_gaussian": True}  # with time-of-day EWMAs?
RELEASE_BASELINES = ("tod_ewma_gaussian", *HARS)  # those given the release calendar
RELEASE_FACTORS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)  # a release minute's variance multiplier


def calibrated_forecasts(
    panel: Panel,
    ends: np.ndarray,
    fit_ends: np.ndarray,
    meta: CheckpointMeta,
    window: int,
    tft: np.ndarray | None = None,
    select_ends: np.ndarray | None = None,
    profiles: dict[str, TimeOfDayProfile] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]], np.ndarray]:
    """Every forecaster's calibrated quantiles on `ends`, what was fitted for each, and the
    calibration windows used (those of `fit_ends` where every forecaster is defined). `tft`:
    the TFT's quantiles before interval calibration on `fit_ends`, then on `ends`. The
    time-of-day baselines try each of `profiles` (default: the checkpoint's), keeping the best
    on the calibration windows. With `select_ends` (the checkpoint's validation windows), the
    time-of-day x plain EWMA is also scored with its blend chosen by the rule the TFT's scale
    chooses its own by: Gaussian likelihood there (`tod_ewma_gaussian_likelihood`, from the
    baseline's own candidates), so neither wins by its selection rule alone."""
    quantiles = meta.config.quantiles
    profiles = profiles or {"checkpoint": meta.volatility.profile}
    select_ends = np.empty(0, dtype=np.int64) if select_ends is None else select_ends
    rows = np.concatenate([fit_ends, ends])
    raw = {
        "persistence": baselines.persistence(meta.persistence_quantiles, len(rows)),
        "rolling_quantiles": baselines.rolling_quantiles(panel, rows, quantiles, window),
        "volatility_scale_gaussian": baselines.gaussian(scale_alone(panel, rows, meta), quantiles),
    } | ({"tft": tft} if tft is not None else {})
    common = all_defined(panel, rows[: len(fit_ends)], [q[: len(fit_ends)] for q in raw.values()])
    if not common.any():
        raise ValueError(
            f"none of the {len(fit_ends)} calibration windows has every forecaster defined: "
            f"the slowest needs {max(window // 4, har.MIN_HISTORY)} bars of the symbol's history "
            "first; give data starting earlier"
        )
    keep = np.concatenate([np.flatnonzero(common), np.arange(len(fit_ends), len(rows))])
    fit_ends = fit_ends[common]
    best = Calibrated(panel.targets[fit_ends], quantiles)
    for name, q in raw.items():
        best.offer(name, {}, q[keep])
    for label, profile in profiles.items():
        offer_hars(best, panel, fit_ends, ends, profile, {"profile": label})
        offer_ewmas(best, panel, fit_ends, ends, select_ends, profile, {"profile": label})
    calendar = release_calendar(meta.config.releases)
    if calendar is not None:
        rows = np.concatenate([fit_ends, ends])
        offer_releases(best, calendar.at_minutes(panel.ts[rows], panel.targets.shape[1]))
    forecasts, fitted = best.results(quantiles.index(0.5))
    return forecasts, fitted, fit_ends


def all_defined(panel: Panel, fit_ends: np.ndarray, fixed: list[np.ndarray]) -> np.ndarray:
    """(n,) whether every forecaster is defined on each calibration window: the `fixed` ones'
    quantiles there, the HARs' components and the slowest EWMA (when it is, all are), all of
    which need only history, whatever profile divides the returns."""
    flat = TimeOfDayProfile.flat()
    needed = [*fixed, baselines.ewma_sigma(panel, fit_ends, flat, max(HALFLIVES))]
    needed += [har.components(panel, fit_ends, flat, e)[1] for e in HARS.values()]
    return np.all([np.isfinite(v).reshape(len(fit_ends), -1).all(axis=1) for v in needed], 0)


def offer_hars(
    best: Calibrated,
    panel: Panel,
    fit_ends: np.ndarray,
    ends: np.ndarray,
    profile: TimeOfDayProfile,
    label: dict[str, str],
) -> None:
    """Each HAR, fitted on the calibration windows, to `best`."""
    rows, n_fit = np.concatenate([fit_ends, ends]), len(fit_ends)
    forward = har.forward_square(panel, rows, profile, panel.targets.shape[1])
    for name, tod_ewmas in HARS.items():
        names, values = har.components(panel, rows, profile, tod_ewmas)
        model = har.HAR.fit(names, values[:n_fit], forward[:n_fit], panel.targets[fit_ends])
        sigma = model.sigma(values, forward)
        best.offer(name, model.to_dict() | label, baselines.gaussian(sigma, best.quantiles))


def fit_served(
    panel: Panel, fit_ends: np.ndarray, meta: CheckpointMeta
) -> tuple[dict[str, dict[str, Any]], int]:
    """The worker's shadow baselines (model.serving.baselines) calibrated as
    `calibrated_forecasts` calibrates them, on the calibration windows `fit_ends` where both are
    defined: the checkpoint's volatility scale alone, and the time-of-day EWMA blend with its
    half-lives and weight chosen there. Each one's fit as `evaluate` reports it, and how many
    windows it was fitted on."""
    quantiles, profile = meta.config.quantiles, meta.volatility.profile
    scale = scale_alone(panel, fit_ends, meta)
    slowest = baselines.ewma_sigma(panel, fit_ends, profile, max(HALFLIVES))
    defined = np.isfinite(scale).all(axis=1) & np.isfinite(slowest).all(axis=1)
    if not defined.any():
        raise ValueError(
            f"none of the {len(fit_ends)} calibration windows has {max(HALFLIVES)} returns of "
            "history before it: the shadow baselines cannot be calibrated; give more data"
        )
    ends = fit_ends[defined]
    best = Calibrated(panel.targets[ends], quantiles)
    best.offer(VOLATILITY_SCALE, {}, baselines.gaussian(scale[defined], quantiles))
    for choice, sigma in volatility_candidates(panel, ends, profile):
        if choice["profile_weight"] > 0:  # the time-of-day family
            best.offer(TOD_EWMA, choice, baselines.gaussian(sigma, quantiles))
    return best.results(quantiles.index(0.5))[1], len(ends)


def offer_ewmas(
    best: Calibrated,
    panel: Panel,
    fit_ends: np.ndarray,
    ends: np.ndarray,
    select_ends: np.ndarray,
    profile: TimeOfDayProfile,
    label: dict[str, str],
) -> None:
    """Every EWMA candidate to `best`, and the likeliest blend on `select_ends` if any; the
    time-of-day ones' settings with `label` (the profile's)."""
    quantiles = best.quantiles
    n_fit = len(fit_ends)  # calibrated, then scored
    likeliest = likeliest_blend(panel, select_ends, profile)
    for choice, sigma in volatility_candidates(panel, np.concatenate([fit_ends, ends]), profile):
        family = "ewma" if choice["profile_weight"] == 0 else "tod_ewma"
        chosen = family == "tod_ewma" and choice == likeliest
        choice = choice if family == "ewma" else choice | label  # a plain EWMA has no profile
        gaussian = baselines.gaussian(sigma, quantiles)
        best.offer(f"{family}_gaussian", choice, gaussian)
        best.offer(
            f"{family}_empirical",
            choice,
            baselines.standardized_residuals(sigma, sigma[:n_fit], best.y_fit, quantiles),
        )
        if chosen:
            best.offer("tod_ewma_gaussian_likelihood", choice, gaussian)


def likeliest_blend(
    panel: Panel, select_ends: np.ndarray, profile: TimeOfDayProfile
) -> dict[str, float] | None:
    """The time-of-day candidate the TFT's scale's rule prefers: the least Gaussian misfit on
    `select_ends`, every candidate judged on the same windows, those where all are defined (a
    long half-life's first windows are not; None if no window is). Two passes, one candidate
    at a time: all of them at once would hold every candidate's volatilities."""
    if not len(select_ends):
        return None
    defined = np.ones(len(select_ends), dtype=bool)
    for _, sigma in _time_of_day(panel, select_ends, profile):
        defined &= np.isfinite(sigma).all(axis=1) & (sigma > 0).all(axis=1)
    if not defined.any():
        return None
    ends = select_ends[defined]
    likeliest: tuple[float, dict[str, float]] | None = None
    for choice, sigma in _time_of_day(panel, ends, profile):
        misfit = gaussian_misfit(sigma, panel.targets[ends])
        if likeliest is None or misfit < likeliest[0]:
            likeliest = (misfit, choice)
    return None if likeliest is None else likeliest[1]


def _time_of_day(
    panel: Panel, ends: np.ndarray, profile: TimeOfDayProfile
) -> Iterator[tuple[dict[str, float], np.ndarray]]:
    return (c for c in volatility_candidates(panel, ends, profile) if c[0]["profile_weight"] > 0)


def offer_releases(best: Calibrated, at: np.ndarray) -> None:
    """Each of `RELEASE_BASELINES`' best, its variance at the release minutes `at` `(n, H)` (of
    the calibration windows, then the scored ones) scaled by each of `RELEASE_FACTORS`, as
    `NAME_releases`; a factor of 1 is the baseline itself, so the calendar can only help it on
    the calibration windows."""
    for name in RELEASE_BASELINES:
        choice, q = best.candidate(name)
        for factor in RELEASE_FACTORS:
            scaled = baselines.release_scaled(q, at, factor)
            best.offer(f"{name}_releases", choice | {"release_factor": factor}, scaled)


class Calibrated:
    """Each baseline's best candidate so far by calibrated pinball on the calibration windows
    (the first of equals), calibrated as it is offered: only the best is kept in memory."""

    def __init__(self, y_fit: np.ndarray, quantiles: tuple[float, ...]) -> None:
        self.y_fit, self.quantiles = y_fit, quantiles
        self.best: dict[str, tuple[float, dict[str, Any], np.ndarray, np.ndarray]] = {}

    def offer(self, name: str, choice: dict[str, Any], q: np.ndarray) -> None:
        """`q`: the candidate's quantiles on the calibration windows, then the scored ones."""
        n_fit = len(self.y_fit)
        scale, fit_loss = calibrate(q[:n_fit], self.y_fit, self.quantiles)
        if name not in self.best or fit_loss < self.best[name][0]:
            self.best[name] = (fit_loss, choice, scale, q)

    def candidate(self, name: str) -> tuple[dict[str, Any], np.ndarray]:
        """The best candidate of `name` so far: its settings and uncalibrated quantiles."""
        _, choice, _, q = self.best[name]
        return choice, q

    def results(self, median: int) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
        out, fitted = {}, {}
        n_fit = len(self.y_fit)
        for name, (fit_loss, choice, scale, q) in self.best.items():
            out[name] = apply_interval_scale(q[n_fit:], scale, median)
            fitted[name] = {
                "interval_scale": scale.tolist(),
                "calibration_pinball": fit_loss,
            } | choice
        return out, fitted


def scale_alone(panel: Panel, ends: np.ndarray, meta: CheckpointMeta) -> np.ndarray:
    """`(n, H)` the checkpoint's own volatility scale on windows `ends`, without the network:
    what the TFT adds is measured against it on every run. A chunk of windows at a time."""
    volatility, config = meta.volatility, meta.config
    rows = window_rows(panel.features[:, list(volatility.columns)], config.lookback)
    return per_window(
        ends, lambda chunk: volatility.scale(panel.ts[chunk], rows[chunk], config.horizon)
    )


def volatility_candidates(
    panel: Panel, ends: np.ndarray, profile: TimeOfDayProfile
) -> Iterator[tuple[dict[str, float], np.ndarray]]:
    """Every EWMA volatility `(n, H)` the calibration chooses from, with its settings: the plain
    EWMA at each half-life (profile weight 0), and the time-of-day EWMA at each half-life
    geometrically blended with the plain EWMA at each half-life of its own (a slow level and
    a fast daily shape, or the reverse: the calibration split says which)."""
    flat = {h: baselines.ewma_sigma(panel, ends, TimeOfDayProfile.flat(), h) for h in HALFLIVES}
    tod = {h: baselines.ewma_sigma(panel, ends, profile, h) for h in HALFLIVES}
    for halflife in HALFLIVES:
        yield {"halflife_bars": halflife, "profile_weight": 0.0}, flat[halflife]
        yield {"halflife_bars": halflife, "profile_weight": 1.0}, tod[halflife]
        for flat_halflife, weight in itertools.product(HALFLIVES, BLEND_WEIGHTS):
            choice = {
                "halflife_bars": halflife,
                "flat_halflife_bars": flat_halflife,
                "profile_weight": weight,
            }
            yield choice, baselines.profile_blend(flat[flat_halflife], tod[halflife], weight)


def calibrate(
    q: np.ndarray, y: np.ndarray, quantiles: tuple[float, ...]
) -> tuple[np.ndarray, float]:
    """Interval scale fitted on the calibration windows, and the calibrated mean pinball there
    (bp). Every forecaster is calibrated on all of them, so each must be defined there."""
    if not np.isfinite(q).all():
        raise ValueError("a forecaster is undefined on a calibration window it must calibrate on")
    scale = fit_interval_scale(q, y, quantiles)
    calibrated = apply_interval_scale(q, scale, quantiles.index(0.5))
    return scale, float(pinball_per_window(y, calibrated, quantiles).mean() * 1e4)
