"""Per-bar quantities every group shares: log prices, returns, true range, ATR, EWMA variance,
exchange clock and session, plus the price rolling block (ring of per-bar records + window sums).

`begin` runs first for every bar (synthetic or not) and fills `ctx`; the groups then read `ctx`
and the block; `finish` runs last and turns "this bar" into "the previous bar".
"""

from __future__ import annotations

import math

import numpy as np

from features import calendar
from features.primitives import (
    MASK,
    RING,
    W20,
    W60,
    WINDOWS,
    Layout,
    fill_means,
    get_i64,
    kernel,
    put_i64,
    rare,
    resync_sums,
    roll_means,
    slot,
)
from features.vectors import ratios4, whole_vectors

ATR_PERIOD = 14
EWMA_FAST = 0.94  # RiskMetrics decay for one-minute variance (CUSUM threshold, regime flatness)
# Half-life ~230 bars: the slow level a time-of-day volatility forecast starts from
# (model.volatility.VolatilityScale); a 69-bar one left the TFT's scale behind the baselines.
EWMA_SLOW = 0.997
SQRT2 = math.sqrt(2.0)
CS_DEN = 3.0 - 2.0 * SQRT2  # Corwin–Schultz: α = (√(2β) - √β) / DEN - √(γ / DEN)
CS_BETA = (SQRT2 - 1.0) / CS_DEN
CS_GAMMA = 1.0 / math.sqrt(CS_DEN)
GK_OC = 2.0 * math.log(2.0) - 1.0  # Garman–Klass weight of the open-close term

# ctx: this bar's shared quantities (one float64 vector, rewritten for every bar)
X_T, X_O, X_H, X_L, X_C, X_V, X_SYN = 0, 1, 2, 3, 4, 5, 6
X_LO, X_LH, X_LL, X_LC, X_R = 7, 8, 9, 10, 11
X_PC, X_PH, X_PL, X_PLC = 12, 13, 14, 15
X_TR, X_ATR, X_EVF_PREV, X_EVF, X_EVS = 16, 17, 18, 19, 20
X_TOD, X_DST, X_SESSION, X_SESSION_MIN, X_NEW_SESSION, X_GAP_MIN = 21, 22, 23, 24, 25, 26
X_LV, X_ATR_REL = 27, 28
N_SCALARS = 29

# Price record fields (F_*): each bar writes one record. Window w sums the first NF[w] fields
# (rounded up to whole vectors, see vectors.whole_vectors):
# W5 r, r2; W10 + ar; W14 up to vim; W60 up to r5sq; W20 up to doji. lc and c sit early so the
# lagged reads (ROC, SMA) share cache lines with the sums' reads; lh, ll feed only the channels.
FIELDS = (
    "r", "r2", "ar", "lc", "c", "oc", "bop", "tr", "vip", "vim",
    "x", "x2", "r3", "r4", "rr1", "rr2", "rr5", "rng", "rng2", "gk", "rs", "oc2", "on", "on2",
    "aon", "gap", "clv", "abody", "cs", "arp", "zero", "same", "syn", "r5sq",
    "up", "rev", "up2", "arr1", "rrng1", "uw", "lw", "ch", "cl", "doji",
    "lh", "ll",
)  # fmt: skip
(F_R, F_R2, F_AR, F_LC, F_C, F_OC, F_BOP, F_TR, F_VIP, F_VIM,
 F_X, F_X2, F_R3, F_R4, F_RR1, F_RR2, F_RR5, F_RNG, F_RNG2, F_GK, F_RS, F_OC2, F_ON, F_ON2,
 F_AON, F_GAP, F_CLV, F_ABODY, F_CS, F_ARP, F_ZERO, F_SAME, F_SYN, F_R5SQ,
 F_UP, F_REV, F_UP2, F_ARR1, F_RRNG1, F_UW, F_LW, F_CH, F_CL, F_DOJI,
 F_LH, F_LL) = range(len(FIELDS))  # fmt: skip
NF = whole_vectors(F_R2 + 1, F_AR + 1, F_VIM + 1, F_DOJI + 1, F_R5SQ + 1)
KP = len(FIELDS)
XM = N_SCALARS  # ctx[XM + w*KP + f]: mean of price field f over window w (see mp)

LAYOUT = Layout("core")
N = LAYOUT.add("bars")
TS = LAYOUT.add("ts", 2)
PC, PH, PL, PLC, PLH, PLL = (LAYOUT.add(n) for n in ("pc", "ph", "pl", "plc", "plh", "pll"))
ANCHOR = LAYOUT.add("anchor")
TR_SUM, ATR = LAYOUT.add("tr_sum"), LAYOUT.add("atr")
EVF, EVS = LAYOUT.add("ewma_var_fast", 2), LAYOUT.add("ewma_var_slow", 2)  # (sum, weight)
SESSION = LAYOUT.add("session")
YEAR_FROM, YEAR_TO, DST_FROM, DST_TO = (LAYOUT.add(n) for n in ("yf", "yt", "df", "dt"))
LINREG = LAYOUT.add("linreg_weighted_sums", 2)  # Σ j·x over 20 and 60 bars (j = 1 oldest)
RING_P, SUMS_P = LAYOUT.rolling("price", KP)
SIZE = LAYOUT.size
LINREG_WINDOWS = (W20, W60)


@kernel
def central_clock(cs: np.ndarray, utc_min: int) -> tuple[int, bool]:
    """US/Central minute, with the year's DST bounds cached so most bars skip the calendar."""
    if rare(not (cs[YEAR_FROM] <= utc_min < cs[YEAR_TO])):
        y = calendar.civil_from_days(utc_min // calendar.MIN_PER_DAY)[0]
        cs[YEAR_FROM] = calendar.days_from_civil(y, 1, 1) * calendar.MIN_PER_DAY
        cs[YEAR_TO] = calendar.days_from_civil(y + 1, 1, 1) * calendar.MIN_PER_DAY
        cs[DST_FROM], cs[DST_TO] = calendar.dst_bounds_min(y)
    dst = cs[DST_FROM] <= utc_min < cs[DST_TO]
    return utc_min - (5 if dst else 6) * 60, dst


@kernel
def begin(
    cs: np.ndarray,
    ts: int,
    o: float,
    h: float,
    lo_: float,
    c: float,
    v: float,
    syn: bool,
    ctx: np.ndarray,
) -> None:
    t = int(cs[N])
    # One-minute prices repeat (O = previous C, H and L at O or C or the previous H, L): reuse
    # a log wherever the price is the same number, which gives the same bits as taking it
    # again. The first bar has no previous prices: NaN equals none.
    if rare(t == 0):
        pc = ph = pl = plc = plh = pll = np.nan
    else:
        pc, ph, pl = cs[PC], cs[PH], cs[PL]
        plc, plh, pll = cs[PLC], cs[PLH], cs[PLL]
    lc = log_of(c, pc, plc, ph, plh, pl, pll, np.nan, np.nan)
    lo = log_of(o, pc, plc, c, lc, ph, plh, pl, pll)
    lh = log_of(h, c, lc, o, lo, ph, plh, pl, pll)
    ll = log_of(lo_, c, lc, o, lo, pl, pll, ph, plh)
    if rare(t == 0):
        pc, ph, pl, plc, plh, pll = c, h, lo_, lc, lh, ll
        cs[ANCHOR] = lc
    r = lc - plc
    ctx[X_T], ctx[X_O], ctx[X_H], ctx[X_L], ctx[X_C], ctx[X_V] = t, o, h, lo_, c, v
    ctx[X_SYN] = 1.0 if syn else 0.0
    ctx[X_LV] = math.log1p(v)
    ctx[X_LO], ctx[X_LH], ctx[X_LL], ctx[X_LC], ctx[X_R] = lo, lh, ll, lc, r
    ctx[X_PC], ctx[X_PH], ctx[X_PL], ctx[X_PLC] = pc, ph, pl, plc
    # The record goes out first, the window sums read it back last: the work between lets its
    # scalar stores reach the cache before the sums' vector loads need them.
    write_record(cs, t, ctx, plh, pll)
    tr = true_range_atr(cs, t, h, lo_, pc)
    ewma_variances(cs, t, r, c, t > 0 and ts - get_i64(cs, TS) == calendar.NS_PER_MIN, ctx)
    ctx[X_TR], ctx[X_ATR] = tr, cs[ATR]
    exchange_clock(cs, t, ts, ctx)

    update_linreg(cs, t)
    if rare((t & MASK) == MASK):  # once per ring cycle: re-anchor x = lc - anchor, recount exactly
        reanchor(cs, t, lc)
        fill_means(cs, SUMS_P, KP, NF, t, ctx, XM)
    else:
        roll_means(cs, RING_P, SUMS_P, KP, NF, t, ctx, XM)


@kernel
def true_range_atr(cs: np.ndarray, t: int, h: float, lo_: float, pc: float) -> float:
    """True range (raw, TA-Lib's definition), folded into Wilder's ATR seeded by the mean of
    14 TRs."""
    tr = max(h - lo_, abs(h - pc), abs(lo_ - pc)) if t > 0 else h - lo_
    if rare(0 < t <= ATR_PERIOD):
        if t < ATR_PERIOD:
            cs[TR_SUM] += tr
        else:
            cs[ATR] = (cs[TR_SUM] + tr) / ATR_PERIOD
    else:
        cs[ATR] = (cs[ATR] * (ATR_PERIOD - 1) + tr) / ATR_PERIOD
    return tr


@kernel
def ewma_variances(
    cs: np.ndarray, t: int, r: float, c: float, contiguous: bool, ctx: np.ndarray
) -> None:
    """The EWMA variances before and after this bar, and ATR / C (after true_range_atr).

    The first bar has no return: the variances start with the second (their weights are 0
    until then, and ratios4 reads 0/0 as 0). The slow one folds only returns of consecutive
    minutes: it is the level the TFT's volatility scale starts from, and a session break's
    jump is not a one-minute move (the volatility baselines leave it out too,
    `model.volatility.contiguous_returns`). One packed division for the four estimates."""
    before = (cs[EVF], cs[EVF + 1])
    if t > 0:
        ewma_fold(cs, EVF, r, EWMA_FAST)
    if contiguous:
        ewma_fold(cs, EVS, r, EWMA_SLOW)
    ctx[X_EVF_PREV], ctx[X_EVF], ctx[X_EVS], ctx[X_ATR_REL] = ratios4(
        (before[0], cs[EVF], cs[EVS], cs[ATR]), (before[1], cs[EVF + 1], cs[EVS + 1], c)
    )


@kernel
def exchange_clock(cs: np.ndarray, t: int, ts: int, ctx: np.ndarray) -> None:
    """Time of day, DST, session and its minute, session change and the gap since the last
    bar, from ts_event; keeps this bar's ts_event and session for the next."""
    utc_min = ts // calendar.NS_PER_MIN
    local, dst = central_clock(cs, utc_min)
    session, session_min = calendar.session_of(local)
    ctx[X_TOD] = local % calendar.MIN_PER_DAY
    ctx[X_DST] = 1.0 if dst else 0.0
    ctx[X_SESSION], ctx[X_SESSION_MIN] = session, session_min
    ctx[X_NEW_SESSION] = 1.0 if t == 0 or session != cs[SESSION] else 0.0
    ctx[X_GAP_MIN] = (ts - get_i64(cs, TS)) / calendar.NS_PER_MIN if t > 0 else 1.0
    put_i64(cs, TS, ts)
    cs[SESSION] = session


@kernel
def log_of(
    x: float, a: float, la: float, b: float, lb: float, c: float, lc: float, d: float, ld: float
) -> float:
    """log(x), or the log already taken of an equal price a, b, c or d."""
    if x == a:
        return la
    if x == b:
        return lb
    if x == c:
        return lc
    if x == d:
        return ld
    return math.log(x)


@kernel
def mp(ctx: np.ndarray, w: int, f: int) -> float:
    """Mean of price field f over window w at this bar."""
    return ctx[XM + w * KP + f]


@kernel
def varp(ctx: np.ndarray, w: int, f: int, f2: int) -> float:
    """Population variance over window w from the means of x (field f) and x² (f2), >= 0."""
    m = ctx[XM + w * KP + f]
    return max(ctx[XM + w * KP + f2] - m * m, 0.0)


@kernel
def ewma_fold(cs: np.ndarray, off: int, r: float, lam: float) -> None:
    """Fold r² into an EWMA of r² kept with its weight 1 - lam^n, so sum / weight is unbiased
    from the first bar (no zero seed to wash out)."""
    cs[off] = lam * cs[off] + (1.0 - lam) * (r * r)
    cs[off + 1] = lam * cs[off + 1] + (1.0 - lam)


@kernel
def ewma_var(cs: np.ndarray, off: int, r: float, lam: float) -> float:
    """ewma_fold, returning the estimate before this bar."""
    before = cs[off] / cs[off + 1] if cs[off + 1] > 0.0 else 0.0
    ewma_fold(cs, off, r, lam)
    return before


@kernel
def write_record(cs: np.ndarray, t: int, ctx: np.ndarray, plh: float, pll: float) -> None:
    o, h, lo_, c = ctx[X_O], ctx[X_H], ctx[X_L], ctx[X_C]
    lo, lh, ll, lc, r, plc = ctx[X_LO], ctx[X_LH], ctx[X_LL], ctx[X_LC], ctx[X_R], ctx[X_PLC]
    rec = slot(RING_P, KP, t, 0)
    prev = slot(RING_P, KP, t, 1)
    r1 = cs[prev + F_R] if t >= 1 else 0.0
    r2 = cs[slot(RING_P, KP, t, 2) + F_R] if t >= 2 else 0.0
    r5 = cs[slot(RING_P, KP, t, 5) + F_R] if t >= 5 else 0.0
    lc5 = cs[slot(RING_P, KP, t, 5) + F_LC] if t >= 5 else cs[ANCHOR]
    rng = lh - ll
    oc = lc - lo
    on = lo - plc
    span = h - lo_
    cs[rec + F_C], cs[rec + F_LH], cs[rec + F_LL], cs[rec + F_LC] = c, lh, ll, lc
    x = lc - cs[ANCHOR]
    cs[rec + F_X], cs[rec + F_X2] = x, x * x
    cs[rec + F_R], cs[rec + F_R2] = r, r * r
    cs[rec + F_R3], cs[rec + F_R4] = r * r * r, (r * r) * (r * r)
    cs[rec + F_AR] = abs(r)
    cs[rec + F_RR1], cs[rec + F_RR2], cs[rec + F_RR5] = r * r1, r * r2, r * r5
    cs[rec + F_UP] = 1.0 if r > 0.0 else 0.0
    cs[rec + F_ZERO] = 1.0 if r == 0.0 else 0.0
    cs[rec + F_REV] = 1.0 if r * r1 < 0.0 else 0.0
    cs[rec + F_SAME] = 1.0 if r * r1 > 0.0 else 0.0
    cs[rec + F_UP2] = r * r if r > 0.0 else 0.0
    cs[rec + F_ARR1] = abs(r) * abs(r1)
    cs[rec + F_RNG], cs[rec + F_RNG2] = rng, rng * rng
    cs[rec + F_RRNG1] = rng * cs[prev + F_RNG] if t >= 1 else rng * rng
    cs[rec + F_GK] = 0.5 * (rng * rng) - GK_OC * (oc * oc)
    cs[rec + F_RS] = (lh - lc) * (lh - lo) + (ll - lc) * (ll - lo)
    cs[rec + F_OC], cs[rec + F_OC2] = oc, oc * oc
    cs[rec + F_ON], cs[rec + F_ON2], cs[rec + F_AON] = on, on * on, abs(on)
    cs[rec + F_GAP] = 1.0 if t > 0 and o != ctx[X_PC] else 0.0
    den = span if span > 0.0 else 0.0  # ratios4 reads x / 0 as 0
    cs[rec + F_CLV], cs[rec + F_BOP], _, _ = ratios4(
        ((c - lo_) - (h - c), c - o, 0.0, 0.0), (den, den, 0.0, 0.0)
    )
    cs[rec + F_DOJI] = 1.0 if abs(c - o) <= 0.1 * span else 0.0
    cs[rec + F_ABODY] = abs(oc)
    cs[rec + F_UW], cs[rec + F_LW] = lh - max(lo, lc), min(lo, lc) - ll
    cs[rec + F_CH], cs[rec + F_CL] = lh - lc, lc - ll
    cs[rec + F_TR] = max(lh, plc) - min(ll, plc)
    cs[rec + F_VIP], cs[rec + F_VIM] = abs(lh - pll), abs(ll - plh)
    cs[rec + F_CS] = corwin_schultz(lh, ll, plh, pll)
    eta, peta = 0.5 * (lh + ll), 0.5 * (plh + pll)
    cs[rec + F_ARP] = 4.0 * (plc - peta) * (plc - eta)
    cs[rec + F_R5SQ] = (lc - lc5) * (lc - lc5)
    cs[rec + F_SYN] = ctx[X_SYN]


@kernel
def corwin_schultz(lh: float, ll: float, plh: float, pll: float) -> float:
    """Two-bar Corwin–Schultz (2012) spread from log highs/lows; negative estimates read 0."""
    beta = (lh - ll) * (lh - ll) + (plh - pll) * (plh - pll)
    span = max(lh, plh) - min(ll, pll)  # sqrt(gamma)
    alpha = CS_BETA * math.sqrt(beta) - CS_GAMMA * span
    e = math.exp(alpha)
    return max(2.0 * (e - 1.0) / (1.0 + e), 0.0)


@kernel
def update_linreg(cs: np.ndarray, t: int) -> None:
    """Σ j·x_j with j = 1 for the oldest bar: each shift lowers every weight by one."""
    x = cs[slot(RING_P, KP, t, 0) + F_X]
    for i in range(len(LINREG_WINDOWS)):
        w = LINREG_WINDOWS[i]
        win = WINDOWS[w]
        if t >= win:
            cs[LINREG + i] += win * x - cs[SUMS_P + w * KP + F_X]
        else:
            cs[LINREG + i] += (t + 1) * x


@kernel
def reanchor(cs: np.ndarray, t: int, lc: float) -> None:
    cs[ANCHOR] = lc
    for lag in range(min(RING, t + 1)):
        rec = slot(RING_P, KP, t, lag)
        x = cs[rec + F_LC] - lc
        cs[rec + F_X], cs[rec + F_X2] = x, x * x
    resync_sums(cs, RING_P, SUMS_P, KP, NF, t)
    for i in range(len(LINREG_WINDOWS)):
        win = WINDOWS[LINREG_WINDOWS[i]]
        n = min(win, t + 1)
        total = 0.0
        for lag in range(n):
            total += (n - lag) * cs[slot(RING_P, KP, t, lag) + F_X]
        cs[LINREG + i] = total


@kernel
def finish(cs: np.ndarray, ctx: np.ndarray) -> None:
    cs[PC], cs[PH], cs[PL] = ctx[X_C], ctx[X_H], ctx[X_L]
    cs[PLC], cs[PLH], cs[PLL] = ctx[X_LC], ctx[X_LH], ctx[X_LL]
    cs[N] += 1.0
