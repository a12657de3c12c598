"""Rare tokens: are the offending batch's loss and gradient concentrated on tokens far rarer
than those of the control batches?

On the model state the run had before the offending step (fp32 master weights), each position
of a batch gets its loss and a training frequency f = min(p(input), p(target)) (add-one
smoothed unigram probabilities from `token_counts`). A position is *rare* when f is below the
1st percentile of the control batches' positions. Per batch:

- rare_frac: share of rare positions; rare_loss_share: their share of the summed loss;
- rare_grad_share: |g_rare| / (|g_rare| + |g_common|), the gradient norms of the rare and the
  common positions' parts of the loss (one backward each);
- wlog10_freq: loss-weighted mean log10 f, i.e. how rare the tokens that carry the loss are.

- common_loss: mean loss of the common (not rare) positions; `common_alone` = the offending
  batch's common_loss minus the controls', as a share of the whole batch's loss excess over
  the controls: how much of the spike the batch would still show without its rare tokens
  (undefined with fewer than 16 common positions).

Rule: with d = wlog10_freq(controls) - wlog10_freq(offending) in decades, confirmed when
d >= 1 (the loss sits on tokens at least 10x rarer), rare_loss_share >= 0.5 and rare_grad_share
>= 0.5 (rare tokens carry most of the loss and drive most of the gradient), the common tokens
alone show <= 1/4 of the excess (a garbage batch, whose common tokens are as badly predicted,
is not a rare-token batch), and the batch's loss excess over the controls is at least half the
logged spike; refuted when d < 0.5, rare_grad_share < 0.25 or the common tokens alone show
>= 1/2 of the excess; inconclusive otherwise.

Refuted on the data alone (`state_free`): the batch holds no more rare positions than the
controls do, within Poisson noise (k <= m + 2 sqrt(m), m = the controls' rare rate x the
batch's positions). Then no model state can make it a rare-token batch: for rare positions
at a rate r to carry half the loss, each must cost (1 - r) / r times a common one, ~50x at
2%, far beyond any model. This verdict reads only the token ids, so it stands when the
replayed state is not the run's (runner.downgrade keeps it): a far too high LR drifts the
replay off the log, yet an ordinary batch is still ordinary.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

from forensics.replay.freq import Freq, train_freq
from forensics.replay.measure import Batch, as_dtype, group_grad_norms, token_losses
from forensics.replay.plan import BIG, excess
from forensics.replay.probes.base import Session, median
from forensics.replay.result import CONFIRMED, INCONCLUSIVE, REFUTED, ReplayResult
from forensics.replay.state import StateUnavailable
from forensics.sim.model import GPT

PROBE = HYPOTHESIS = "rare_tokens"
RARE_PCT = 1.0
HIST_TOP = 40
MIN_COMMON = 16  # common positions needed to measure their own loss


def run(s: Session) -> ReplayResult:
    t0 = time.perf_counter()
    got = s.offending(PROBE, HYPOTHESIS)
    if isinstance(got, ReplayResult):
        return tokens_only(s, got)
    state, off = got
    ctrls = s.control_batches()
    recs = s.data.records[s.plan.offending]
    freq = train_freq(s.data, recs[0].source)
    if freq is None or not ctrls:
        why = "no token counts and no readable shard" if freq is None else "no control batch"
        return s.result(PROBE, HYPOTHESIS, INCONCLUSIVE, {}, f"not run: {why}")
    model = as_dtype(state.model, torch.float32)
    logged_ex = excess(s.data.value("loss", s.plan.offending), s.plan.trend)
    verdict, detail, numbers = evaluate(model, off, ctrls, freq, logged_ex)
    numbers = {"step": s.plan.offending, "freq_source": freq.source} | numbers
    res = s.result(PROBE, HYPOTHESIS, verdict, numbers, detail)
    res.wall_s = time.perf_counter() - t0
    return res


def tokens_only(s: Session, no_state: ReplayResult) -> ReplayResult:
    """Without a model state the batch's tokens can still refute (module doc); otherwise the
    row saying why the probe could not run."""
    recs = s.data.records.get(s.plan.offending)
    freq = train_freq(s.data, recs[0].source) if recs else None
    ctrls = s.control_batches()
    try:
        off = s.batch(s.plan.offending)
    except StateUnavailable:
        return no_state
    if freq is None or not ctrls:
        return no_state
    # one vocabulary for every batch, so that the smoothed probabilities compare
    vocab = max([freq.counts.size] + [int(x.max()) + 1 for b in (off, *ctrls) for x, _, _ in b])
    ctrl_f = [position_freq(b, freq, vocab) for b in ctrls]
    tau = float(np.percentile(np.concatenate(ctrl_f), RARE_PCT))
    off_f = position_freq(off, freq, vocab)
    pooled = float(np.mean([(f < tau).mean() for f in ctrl_f]))
    frac = float((off_f < tau).mean())
    plain = no_rare_excess(frac, pooled, off_f.size)
    if plain is None:
        return no_state
    numbers = {"step": s.plan.offending, "freq_source": freq.source, "state_free": True,
               "rare_frac": frac, "control_rare_frac": pooled,
               "rare_threshold_freq": tau}  # fmt: skip
    detail = f"{plain}; read from the tokens alone ({no_state.detail.removeprefix('not run: ')})"
    return s.result(PROBE, HYPOTHESIS, REFUTED, numbers, detail)


def evaluate(
    model: GPT, off: Batch, ctrls: list[Batch], freq: Freq, logged_excess: float
) -> tuple[str, str, dict[str, Any]]:
    """Verdict, detail and numbers for `off` against `ctrls` on `model` (see module doc).

    `logged_excess`: the logged loss minus the pre-spike trend at the offending step.
    """
    vocab = model.cfg.vocab_size
    ctrl_f = np.concatenate([position_freq(b, freq, vocab) for b in ctrls])
    tau = float(np.percentile(ctrl_f, RARE_PCT))
    o = batch_stats(model, off, freq, tau)
    cs = [batch_stats(model, b, freq, tau) for b in ctrls]
    c = {k: median([x[k] for x in cs]) for k in o}
    d = c["wlog10_freq"] - o["wlog10_freq"]
    # The batch must carry at least half the logged spike (a NaN spike, BIG, cannot be compared;
    # without a logged excess there is nothing to explain).
    explains = logged_excess <= 0 or logged_excess >= BIG
    explains = explains or (o["loss"] - c["loss"]) >= 0.5 * logged_excess
    # Without its rare tokens, would the batch still spike? The common positions' own excess
    # over the controls' common positions, as a share of the whole batch's excess.
    batch_excess = o["loss"] - c["loss"]
    alone = (o["common_loss"] - c["common_loss"]) / batch_excess if batch_excess > 0 else math.nan
    numbers: dict[str, Any] = {"rare_threshold_freq": tau}
    numbers |= dict(o) | {f"control_{k}": v for k, v in c.items()}
    numbers |= {"rarity_decades": d, "logged_excess": logged_excess, "common_alone": alone}
    numbers["token_histogram"] = histogram(off, freq, vocab)
    verdict, detail = decide(o, d, explains, alone)
    if verdict != CONFIRMED:
        pooled = float(np.mean([x["rare_frac"] for x in cs]))  # the median may sit at 0
        plain = no_rare_excess(o["rare_frac"], pooled, o["positions"])
        if plain:
            verdict, detail, numbers["state_free"] = REFUTED, f"{plain}; {detail}", True
    return verdict, detail, numbers


def no_rare_excess(frac: float, control_frac: float, positions: float) -> str | None:
    """Why the batch is no rare-token batch whatever the model state (module doc), or None
    when it holds more rare positions than the controls' rate explains."""
    k, m = round(frac * positions), control_frac * positions
    if not math.isfinite(m) or k > m + 2.0 * math.sqrt(m):
        return None
    return (
        f"the batch holds {k} rare-token positions of {positions:.0f}, no more than the "
        f"{m:.1f} the ordinary batches' rate gives (within noise)"
    )


def decide(o: dict[str, float], d: float, explains: bool, alone: float) -> tuple[str, str]:
    share, lshare = o["rare_grad_share"], o["rare_loss_share"]
    facts = (
        f"loss-carrying tokens {_rarer(d)} than in controls, rare positions hold "
        f"{lshare:.0%} of the loss and {share:.0%} of the gradient"
    )
    if math.isfinite(alone):
        facts += f"; the common tokens alone show {alone:.0%} of the batch's excess"
    rare_only = not math.isfinite(alone) or alone <= 0.25
    if d >= 1.0 and lshare >= 0.5 and share >= 0.5 and explains and rare_only:
        return CONFIRMED, facts
    if d < 0.5 or share < 0.25 or (math.isfinite(alone) and alone >= 0.5):
        return REFUTED, facts
    return INCONCLUSIVE, facts + ("" if explains else "; the batch does not explain the spike")


def _rarer(d: float) -> str:
    """`d` decades rarer, said the right way round when the tokens are more common (a batch
    of one frequent token repeated read "-0.51 decades rarer")."""
    return f"{d:.2f} decades rarer" if d >= 0 else f"{-d:.2f} decades more common"


def position_freq(batch: Batch, freq: Freq, vocab: int) -> np.ndarray:
    """min(p(input), p(target)) of every position, flattened like token_losses."""
    out = []
    for x, y, _ in batch:
        xi, yi = x.flatten().cpu().numpy(), y.flatten().cpu().numpy()
        out.append(np.minimum(freq.prob(xi, vocab), freq.prob(yi, vocab)))
    return np.concatenate(out)


def batch_stats(model: GPT, batch: Batch, freq: Freq, tau: float) -> dict[str, float]:
    f = position_freq(batch, freq, model.cfg.vocab_size)
    loss = token_losses(model, batch).numpy().astype(np.float64)
    loss = np.where(np.isfinite(loss), loss, 0.0)
    rare = f < tau
    masks = [torch.from_numpy(rare), torch.from_numpy(~rare)]
    g_rare, g_common = group_grad_norms(model, batch, masks)
    total = float(loss.sum())
    common = loss[~rare]
    return {
        "positions": float(rare.size),
        "loss": float(loss.mean()),
        "common_loss": float(common.mean()) if common.size >= MIN_COMMON else math.nan,
        "rare_frac": float(rare.mean()),
        "rare_loss_share": float(loss[rare].sum() / total) if total > 0 else 0.0,
        "rare_grad_share": _share(g_rare, g_common),
        "wlog10_freq": float((loss * np.log10(f)).sum() / total) if total > 0 else math.nan,
    }


def _share(a: float, b: float) -> float:
    if not (math.isfinite(a) and math.isfinite(b)) or a + b == 0:
        return math.nan if a + b != 0 else 0.0
    return a / (a + b)


def histogram(batch: Batch, freq: Freq, vocab: int) -> dict[str, Any]:
    """The batch's tokens most over-represented against their training frequency."""
    ids = np.concatenate([x.flatten().cpu().numpy() for x, _, _ in batch])
    uniq, counts = np.unique(ids, return_counts=True)
    p = freq.prob(uniq, vocab)
    order = np.argsort(-(counts / (p * ids.size)), kind="stable")[:HIST_TOP]
    return {
        "token_ids": uniq[order].tolist(),
        "counts": counts[order].tolist(),
        "train_freq": p[order].tolist(),
        "batch_tokens": int(ids.size),
    }
