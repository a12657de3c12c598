"""Tier 2: the bundled reference model as an independent judge of the offending batch.

When the run's own model cannot be replayed (no checkpoint, no optimizer state, an
architecture we cannot load), a fresh bundled GPT (`tiny` preset widened to the run's vocabulary
and sequence length) is trained on a sample of the run's own token stream -- windows of the
shards or the dataset, never the offending batch's rows -- and then scores the offending batch
and the control batches with the rare-token measurements (`rare_tokens.evaluate`). It answers
"is this batch anomalous to a model that learned the run's data but never saw the run?".

Its verdict is stored as probe `reference_judge` on hypothesis `rare_tokens`, with its own
numbers (steps, tokens seen, losses) and a detail that starts with "proxy": it is evidence about
the data, not a reproduction of the run. The spike-size condition of the rare-token rule is
not applied (the judge's loss scale is not the run's).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

from forensics.replay.freq import Freq
from forensics.replay.measure import Batch
from forensics.replay.probes import rare_tokens
from forensics.replay.result import INCONCLUSIVE, ReplayResult
from forensics.sim.model import GPT, preset

PROBE, HYPOTHESIS = "reference_judge", "rare_tokens"
# (steps, sequences per step, window tokens): the CPU preset takes ~5 s on 2 idle cores; the
# GPU preset sees ~16x more tokens in about the same time.
PRESETS = {"cpu": (200, 8, 64), "cuda": (1000, 32, 256)}
LR = 3e-3
SEED = 1234


def train_judge(
    stream: np.ndarray, vocab: int, seq_len: int, device: torch.device
) -> tuple[GPT, dict[str, Any]]:
    """A bundled GPT trained on random windows of `stream` (1-D token ids)."""
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    steps, batch, window = PRESETS["cuda" if device.type == "cuda" else "cpu"]
    window = min(window, seq_len)
    cfg = preset("tiny", vocab_size=int(vocab), block_size=max(seq_len, window))
    model = GPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.0)
    hi = stream.size - window - 1
    if hi <= 0:
        raise ValueError(f"the token sample ({stream.size} tokens) is shorter than one window")
    losses = []
    for step in range(steps):
        starts = rng.integers(0, hi, size=batch)
        span = np.stack([stream[s : s + window + 1] for s in starts]).astype(np.int64)
        t = torch.from_numpy(span).to(device)
        lr = LR * min(1.0, (step + 1) / 30)
        for g in opt.param_groups:
            g["lr"] = lr
        _, loss = model(t[:, :-1].contiguous(), t[:, 1:].contiguous())
        assert loss is not None
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    info = {
        "judge_steps": steps,
        "judge_tokens_seen": steps * batch * window,
        "judge_sample_tokens": int(stream.size),
        "judge_final_train_loss": float(np.mean(losses[-20:])),
        "judge_params": model.num_params(),
    }
    return model.eval(), info


def judge(
    run_id: str,
    incident_id: int,
    stream: np.ndarray | None,
    off: Batch | None,
    ctrls: list[Batch],
    freq: Freq | None,
    device: torch.device,
    why_not_tier3: str,
) -> ReplayResult:
    """The `reference_judge` row (inconclusive, saying why, when it cannot run)."""
    t0 = time.perf_counter()

    def row(verdict: str, numbers: dict[str, Any], detail: str) -> ReplayResult:
        r = ReplayResult(run_id, incident_id, PROBE, HYPOTHESIS, verdict, numbers, detail,
                         str(device), time.perf_counter() - t0)  # fmt: skip
        return r

    if off is None or stream is None:
        return row(
            INCONCLUSIVE, {}, "not run: the offending batch or the token stream is unreadable"
        )
    if freq is None or not ctrls:
        why = "no token counts" if freq is None else "no control batch"
        return row(INCONCLUSIVE, {}, f"not run: {why}")
    ids = np.concatenate([x.flatten().cpu().numpy() for x, _, _ in off])
    vocab = max(int(freq.counts.size), int(stream.max(initial=0)) + 1, int(ids.max()) + 1)
    seq_len = int(off[0][0].shape[1])
    try:
        model, info = train_judge(stream, vocab, seq_len, device)
    except ValueError as exc:
        return row(INCONCLUSIVE, {}, f"not run: {exc}")
    verdict, detail, numbers = rare_tokens.evaluate(model, off, ctrls, freq, 0.0)
    numbers = {"proxy": True, "freq_source": freq.source} | info | numbers
    loss, ctrl = numbers.get("loss", math.nan), numbers.get("control_loss", math.nan)
    head = (
        f"proxy (the bundled model, {info['judge_params']:,} params trained "
        f"{info['judge_steps']} steps on {info['judge_tokens_seen']:,} tokens of the run's own "
        f"stream, never the run's weights; used because {why_not_tier3}): the batch's loss "
        f"{loss:.3g} vs {ctrl:.3g} on the controls; "
    )
    return row(verdict, numbers, head + detail)
