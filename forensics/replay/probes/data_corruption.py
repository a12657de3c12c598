"""Data corruption: are the batches of the incident malformed, compared with their neighbours?

Examines the offending batch, every batch the run trained on from the incident's onset up to
it, and the atypical steps right before the onset (plan.py; at most 64 batches in all): a run
of degenerate batches does its damage before the spike it causes, even before the onset. Needs
only the batches and the control batches (no checkpoint, no model), so it runs even when the
training state cannot be rebuilt. Statistics per batch:

- invalid_ids: token ids outside [0, vocab_size) (a wrong tokenizer or a corrupted shard);
- shape: batch_size x seq_len against the controls;
- entropy_bits: unigram entropy of the batch's tokens (a degenerate batch collapses it);
- repeat_frac: share of positions that repeat the previous token;
- dup_4gram_frac: share of 4-grams that already occurred earlier in the batch (copied text);
- bigram_support: share of the batch's adjacent pairs of common tokens that also occur in a
  sample of the training shard (scrambled or random tokens destroy it). Pairs involving a rare
  token are left out so that a batch of rare but valid tokens is not called corrupt; with
  fewer than MIN_PAIRS common pairs the statistic is not used. The sample holds the run's
  own batches (all of them in a run shorter than the sample), so a batch's own pairs are
  taken out of it before its support is measured: every batch would otherwise support
  itself, and a batch of random ids would score 1.0 (leave-one-batch-out, `Known.support`).
  When the controls' own support is below MIN_CONTROL_SUPPORT, the sample is too small (or
  the data too random) for the pairs to mean anything, and the statistic is not used.

Rule, per batch: confirmed when any statistic is far from the controls (invalid ids; a
different shape; entropy ratio <= 1/2; repeats or duplicated 4-grams >= 1/2 of the batch and
>= 3x the controls; bigram support <= 1/2 of the controls'); refuted when every one is close
(no invalid id, same shape, entropy ratio in [0.8, 1.25], repeats and duplicates <= 1.5x
controls + 0.05, bigram support >= 0.8x controls); inconclusive in between. The probe is
confirmed when any examined batch is, refuted when all are, inconclusive otherwise; its
numbers are those of the first corrupt batch (else of the offending one) with the corrupt steps.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from forensics.errors import ReplayError
from forensics.replay.freq import TRAIN_SAMPLE, train_freq
from forensics.replay.plan import fmt_steps
from forensics.replay.probes.base import Session, median, ratio
from forensics.replay.result import CONFIRMED, INCONCLUSIVE, REFUTED, ReplayResult
from forensics.replay.sources import read_tokens
from forensics.replay.state import StateUnavailable, batch_records, shard_of
from forensics.sim.data import BatchRecord

PROBE = HYPOTHESIS = "data_corruption"
MIN_PAIRS = 50
MIN_CONTROL_SUPPORT = 0.25  # below it, unseen pairs are the norm: no signal
MAX_EXAMINED = 64  # batches examined, ending at the offending step


def run(s: Session) -> ReplayResult:
    t0 = time.perf_counter()
    try:
        off_recs = batch_records(s.data, s.plan.offending)
        off = tokens_of(off_recs)
    except (StateUnavailable, OSError, ValueError) as exc:
        return s.result(PROBE, HYPOTHESIS, INCONCLUSIVE, {}, f"offending batch unreadable: {exc}")
    controls = _controls(s)
    if not controls:
        return s.result(PROBE, HYPOTHESIS, INCONCLUSIVE, {}, "no readable control batch")
    vocab = vocab_size(s)
    freq = train_freq(s.data, controls[0][0][0].source)
    rare = freq.rare_ids() if freq is not None else np.zeros(0, dtype=np.int64)
    known = known_bigrams(controls[0][0], vocab)

    def stats(tokens: np.ndarray, recs: list[BatchRecord]) -> dict[str, Any]:
        own = known.own_pairs(recs) if known is not None else None
        return batch_stats(tokens, recs, vocab, rare, known, own)

    cs = [stats(t, r) for r, t in controls]
    examined = {s.plan.offending: stats(off, off_recs)}
    for step in examined_steps(s):
        try:
            recs = batch_records(s.data, step)
            examined[step] = stats(tokens_of(recs), recs)
        except (StateUnavailable, OSError, ValueError):
            continue
    res = judge(s, examined, cs, [r[0].step for r, _ in controls])
    res.wall_s = time.perf_counter() - t0
    return res


def examined_steps(s: Session) -> list[int]:
    """The steps the run trained on from the incident's onset up to the offending step, and
    the atypical stretch right before the onset (the last MAX_EXAMINED in all): a run of bad
    batches can precede the spike it causes, and even the detected onset."""
    steps = [*s.plan.atypical_before, *range(s.plan.incident.onset, s.plan.offending)]
    return [t for t in steps if t in s.data.records][-MAX_EXAMINED + 1 :]


def judge(
    s: Session, examined: dict[int, dict[str, Any]], cs: list[dict[str, Any]], ctrl: list[int]
) -> ReplayResult:
    """Confirmed if any examined batch is far from the controls, refuted if all are close."""
    verdicts = {t: decide(o, cs) for t, o in sorted(examined.items())}
    flagged = [t for t, (v, _) in verdicts.items() if v == CONFIRMED]
    unsure = [t for t, (v, _) in verdicts.items() if v == INCONCLUSIVE]
    shown = flagged[0] if flagged else s.plan.offending
    verdict, why = verdicts[shown]
    if flagged:
        why = f"{len(flagged)} of {len(verdicts)} batches (steps {fmt_steps(flagged)}) are "
        why += "corrupt; "
        why += f"step {shown}: {verdicts[shown][1]}"
    elif unsure and verdict == REFUTED:
        verdict = INCONCLUSIVE
        why = f"batches of steps {fmt_steps(unsure)} differ from the controls, but not decisively"
    numbers: dict[str, Any] = {"step": shown, "control_steps": ctrl}
    numbers |= {"examined_steps": fmt_steps(sorted(examined)), "corrupt_steps": flagged}
    numbers |= {k: v for k, v in examined[shown].items() if k != "shape"}
    numbers |= {f"control_{k}": median([c[k] for c in cs]) for k in _NUMERIC}
    return s.result(PROBE, HYPOTHESIS, verdict, numbers, why)


def _controls(s: Session) -> list[tuple[list[BatchRecord], np.ndarray]]:
    out = []
    for step in s.plan.controls:
        try:
            recs = batch_records(s.data, step)
            out.append((recs, tokens_of(recs)))
        except (StateUnavailable, OSError, ValueError):
            continue
    return out


def tokens_of(records: list[BatchRecord]) -> np.ndarray:
    """(rows, seq_len + 1) int64 token rows of a step: each sequence with its last target."""
    rows = []
    for rec in records:
        path, shard = Path(rec.source), shard_of(rec)
        end = rec.token_offset + rec.n_tokens
        if end > shard.size:
            raise StateUnavailable(f"{path}: span of step {rec.step} runs past the shard")
        span = np.asarray(shard[rec.token_offset : end], dtype=np.int64)
        T = rec.seq_len
        rows += [span[i * T : (i + 1) * T + 1] for i in range(rec.batch_size)]
    return np.stack(rows)


def vocab_size(s: Session) -> int | None:
    model = s.data.config.get("model")
    if isinstance(model, dict) and model.get("vocab_size"):
        return int(model["vocab_size"])
    for key in ("model.vocab_size", "vocab_size"):
        if s.data.config.get(key):
            return int(s.data.config[key])
    counts = s.data.token_counts
    return None if counts is None else int(counts.size)


@dataclass(frozen=True)
class Known:
    """The adjacent pairs of a sample of the training stream, counted, so that a batch's own
    occurrences can be taken out (the sample holds the batches being judged)."""

    codes: np.ndarray  # sorted unique pair codes a * v + b
    counts: np.ndarray  # occurrences of each code in the sample
    v: int
    source: str = ""  # the shard sampled ("" for a stream not read from a shard)
    n_tokens: int = 0  # tokens sampled: shard[:n_tokens]

    @classmethod
    def of(cls, sample: np.ndarray, vocab: int | None, source: str = "") -> Known | None:
        if sample.size < 2:
            return None
        v = max(int(sample.max(initial=0)) + 1, vocab or 0)
        codes, counts = np.unique(pair_codes(sample, v), return_counts=True)
        return cls(codes, counts, v, source, int(sample.size))

    def own_pairs(self, records: list[BatchRecord]) -> np.ndarray:
        """Pair codes of the records' spans that lie inside the sample (with repeats)."""
        own = []
        for rec in records:
            end = min(rec.token_offset + rec.n_tokens, self.n_tokens)
            if rec.source == self.source and end - rec.token_offset >= 2:
                span = np.asarray(read_tokens(Path(rec.source))[rec.token_offset : end])
                own.append(pair_codes(span.astype(np.int64), self.v))
        return np.concatenate(own) if own else np.zeros(0, dtype=np.int64)

    def support(self, codes: np.ndarray, own: np.ndarray | None = None) -> np.ndarray:
        """Whether each pair occurs in the sample outside the batch's own occurrences."""
        count = _lookup(self.codes, self.counts, codes)
        if own is not None and own.size:
            count = count - _lookup(*np.unique(own, return_counts=True), codes)
        return count > 0


def pair_codes(stream: np.ndarray, v: int) -> np.ndarray:
    return stream[:-1] * v + stream[1:]


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray) -> np.ndarray:
    """values[keys == q] for each q of `query` (keys sorted), 0 where absent."""
    if keys.size == 0:
        return np.zeros(query.shape, dtype=np.int64)
    i = np.clip(np.searchsorted(keys, query), 0, keys.size - 1)
    return np.where(keys[i] == query, values[i], 0)


def known_bigrams(records: list[BatchRecord], vocab: int | None) -> Known | None:
    """Adjacent pairs of a sample of the shard that the control batches come from."""
    try:
        shard = read_tokens(Path(records[0].source))
    except (ReplayError, OSError, ValueError):
        return None  # an unreadable shard only disables this statistic
    sample = np.asarray(shard[: min(shard.size, TRAIN_SAMPLE)], dtype=np.int64)
    return Known.of(sample, vocab, records[0].source)


_NUMERIC = ("entropy_bits", "repeat_frac", "dup_4gram_frac", "bigram_support", "invalid_ids")


def batch_stats(
    tokens: np.ndarray,
    records: list[BatchRecord],
    vocab: int | None,
    rare: np.ndarray,
    known: Known | None,
    own: np.ndarray | None = None,
) -> dict[str, Any]:
    """The batch's statistics; `own`: its pair codes inside known's sample (left out)."""
    flat = tokens.ravel()
    _, counts = np.unique(flat, return_counts=True)
    p = counts / counts.sum()
    invalid = int(((flat < 0) | (flat >= vocab)).sum()) if vocab else 0
    return {
        "entropy_bits": float(-(p * np.log2(p)).sum()),
        "repeat_frac": float((tokens[:, 1:] == tokens[:, :-1]).mean()),
        "dup_4gram_frac": dup_ngram_frac(tokens, 4),
        "bigram_support": bigram_support(tokens, rare, known, own),
        "invalid_ids": invalid,
        "shape": [(r.batch_size, r.seq_len) for r in records],
    }


def dup_ngram_frac(tokens: np.ndarray, n: int) -> float:
    """Share of the batch's n-grams (within sequences) that are copies of another one."""
    if tokens.shape[1] < n:
        return 0.0
    grams = np.stack([tokens[:, i : tokens.shape[1] - n + 1 + i] for i in range(n)], axis=-1)
    grams = grams.reshape(-1, n)
    _, counts = np.unique(grams, axis=0, return_counts=True)
    return float((counts - 1).sum() / grams.shape[0])


def bigram_support(
    tokens: np.ndarray, rare: np.ndarray, known: Known | None, own: np.ndarray | None = None
) -> float:
    """Share of adjacent common-token pairs seen in the training sample outside the batch's
    own occurrences (`own`); NaN if too few."""
    if known is None:
        return math.nan
    v = known.v
    a, b = tokens[:, :-1].ravel(), tokens[:, 1:].ravel()
    keep = ~(np.isin(a, rare) | np.isin(b, rare)) & (a < v) & (b < v) & (a >= 0) & (b >= 0)
    if int(keep.sum()) < MIN_PAIRS:
        return math.nan
    return float(known.support(a[keep] * v + b[keep], own).mean())


def decide(o: dict[str, Any], cs: list[dict[str, Any]]) -> tuple[str, str]:
    c = {k: median([x[k] for x in cs]) for k in _NUMERIC}
    flags = _far(o, cs, c)
    if flags:
        return CONFIRMED, "the batch differs from the controls: " + "; ".join(flags)
    close = _close(o, c)
    if close:
        return REFUTED, (
            "batch statistics match the controls (entropy ratio "
            f"{ratio(o['entropy_bits'], c['entropy_bits']):.2f}, repeats "
            f"{o['repeat_frac']:.3f} vs {c['repeat_frac']:.3f}, no invalid id)"
        )
    return INCONCLUSIVE, "batch statistics differ from the controls, but not decisively"


def _far(o: dict[str, Any], cs: list[dict[str, Any]], c: dict[str, float]) -> list[str]:
    flags = []
    if o["invalid_ids"] > 0:
        flags.append(f"{o['invalid_ids']} token ids outside the vocabulary")
    if all(o["shape"] != x["shape"] for x in cs):
        flags.append(f"shape {o['shape']} unlike every control")
    if ratio(o["entropy_bits"], c["entropy_bits"]) <= 0.5:
        flags.append(f"entropy {o['entropy_bits']:.2f} bits vs {c['entropy_bits']:.2f}")
    for key in ("repeat_frac", "dup_4gram_frac"):
        if o[key] >= 0.5 and o[key] >= 3 * c[key]:
            flags.append(f"{key} {o[key]:.3f} vs {c[key]:.3f}")
    sup, csup = o["bigram_support"], c["bigram_support"]
    if _support_usable(sup, csup) and sup <= 0.5 * csup:
        flags.append(f"bigram support {sup:.3f} vs {csup:.3f} (pairs unseen in training)")
    return flags


def _close(o: dict[str, Any], c: dict[str, float]) -> bool:
    sup, csup = o["bigram_support"], c["bigram_support"]
    return (
        o["invalid_ids"] == 0
        and 0.8 <= ratio(o["entropy_bits"], c["entropy_bits"]) <= 1.25
        and all(o[k] <= 1.5 * c[k] + 0.05 for k in ("repeat_frac", "dup_4gram_frac"))
        and (not _support_usable(sup, csup) or sup >= 0.8 * csup)
    )


def _support_usable(sup: float, csup: float) -> bool:
    """Both measured, and the controls find most of their pairs elsewhere in the sample."""
    return math.isfinite(sup) and math.isfinite(csup) and csup >= MIN_CONTROL_SUPPORT
