"""Each probe's rule on small constructed cases (a tiny random model, batches built here)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from forensics.replay.freq import Freq
from forensics.replay.measure import trace
from forensics.replay.probes import (
    counterfactual,
    data_corruption,
    optimizer,
    overflow,
    rare_tokens,
)
from forensics.replay.probes.reproduce import close
from forensics.sim.data import BatchRecord
from forensics.sim.model import GPT, GPTConfig
from forensics.sim.trainer import TrainConfig, build_state, make_optimizer

V, B, T = 64, 8, 32
RARE = np.arange(56, 64)  # ids the training counts almost never saw


@pytest.fixture(scope="module")
def model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=2, n_head=2, n_embd=16))


@pytest.fixture(scope="module")
def freq() -> Freq:
    counts = 1e5 / np.arange(1, V + 1) ** 1.1
    counts[RARE] = 1.0
    return Freq(counts, "test")


def _batch(ids: np.ndarray, scale: float = 1.0) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    rows = torch.as_tensor(ids, dtype=torch.int64).view(B, T + 1)
    return [(rows[:, :-1].contiguous(), rows[:, 1:].contiguous(), scale)]


def _common(seed: int) -> np.ndarray:
    p = 1.0 / np.arange(1, 57) ** 1.1
    return np.random.default_rng(seed).choice(56, size=B * (T + 1), p=p / p.sum())


# ----- rare tokens --------------------------------------------------------------------------
def test_rare_batch_confirms_rare_tokens(model: GPT, freq: Freq) -> None:
    off = _batch(np.random.default_rng(1).choice(RARE, size=B * (T + 1)))
    ctrls = [_batch(_common(s)) for s in range(3)]
    verdict, detail, nums = rare_tokens.evaluate(model, off, ctrls, freq, logged_excess=0.0)
    assert verdict == "confirmed", detail
    assert nums["rarity_decades"] >= 1 and nums["rare_grad_share"] >= 0.5
    assert set(nums["token_histogram"]["token_ids"]) <= set(RARE.tolist())


def test_common_batch_refutes_rare_tokens(model: GPT, freq: Freq) -> None:
    ctrls = [_batch(_common(s)) for s in range(3)]
    verdict, detail, nums = rare_tokens.evaluate(
        model, _batch(_common(9)), ctrls, freq, logged_excess=0.0
    )
    assert verdict == "refuted", detail
    assert abs(nums["rarity_decades"]) < 0.5
    assert nums["state_free"] and "rare-token positions of" in detail  # the tokens say it


def test_rare_token_excess_is_read_from_the_tokens_alone() -> None:
    """No rare-token batch holds only the ordinary rate of rare positions (module doc); one
    with more than Poisson noise above it is left to the model-based rule."""
    assert rare_tokens.no_rare_excess(0.0, 0.0107, 512)  # lr_too_high@1021: 0 of 512
    assert rare_tokens.no_rare_excess(6 / 512, 0.01, 512)  # 6 against 5.1 +- 4.5
    assert rare_tokens.no_rare_excess(11 / 512, 0.01, 512) is None  # 11 > 9.6
    assert rare_tokens.no_rare_excess(0.3, 0.01, 512) is None  # a rare-band burst
    assert rare_tokens.no_rare_excess(0.0, math.nan, 512) is None


def test_a_token_only_refutation_survives_an_unfaithful_replay() -> None:
    """runner.downgrade makes state probes inconclusive when the replay left the log, but a
    verdict that read no model state stands."""
    from forensics.replay.result import ReplayResult
    from forensics.replay.runner import downgrade

    def row(probe: str, verdict: str, **numbers: object) -> ReplayResult:
        return ReplayResult("r", 1, probe, probe, verdict, dict(numbers), probe)

    out = downgrade([row("reproduce", "refuted"), row("rare_tokens", "refuted", state_free=True),
                     row("overflow", "refuted")])  # fmt: skip
    assert [r.verdict for r in out] == ["refuted", "refuted", "inconclusive"]


def test_rare_batch_that_does_not_explain_the_spike_is_not_confirmed(
    model: GPT, freq: Freq
) -> None:
    off = _batch(np.random.default_rng(1).choice(RARE, size=B * (T + 1)))
    ctrls = [_batch(_common(s)) for s in range(3)]
    verdict, _, nums = rare_tokens.evaluate(model, off, ctrls, freq, logged_excess=50.0)
    assert verdict == "inconclusive" and "state_free" not in nums


def test_garbage_batch_whose_common_tokens_also_fail_is_not_a_rare_token_batch() -> None:
    o = {"rare_grad_share": 0.95, "rare_loss_share": 0.8}
    assert rare_tokens.decide(o, 2.3, True, alone=0.65)[0] == "refuted"
    assert rare_tokens.decide(o, 2.3, True, alone=0.05)[0] == "confirmed"
    assert rare_tokens.decide(o, 2.3, True, alone=math.nan)[0] == "confirmed"  # rare only
    assert rare_tokens.decide(o, 2.3, True, alone=0.4)[0] == "inconclusive"


def test_rare_tokens_detail_says_more_common_not_negative_rarer() -> None:
    """A batch of one frequent token repeated: its loss sits on tokens more common than the
    controls'; the detail says so instead of "-0.51 decades rarer"."""
    o = {"rare_grad_share": 0.0, "rare_loss_share": 0.0}
    verdict, detail = rare_tokens.decide(o, -0.515, True, alone=1.01)
    assert verdict == "refuted" and "0.52 decades more common than in controls" in detail
    assert "-0." not in detail


# ----- data corruption ----------------------------------------------------------------------
def _rec(step: int) -> list[BatchRecord]:
    return [BatchRecord(step, 0, "x.bin", 0, B * T + 1, T, B)]


def _stats(tokens: np.ndarray, known: data_corruption.Known | None = None) -> dict[str, object]:
    rows = tokens.reshape(B, T + 1)
    return data_corruption.batch_stats(rows, _rec(1), V, RARE, known)


def test_degenerate_repeated_batch_flags_data_corruption() -> None:
    ctrls = [_stats(_common(s)) for s in range(4)]
    repeated = np.tile(np.array([3, 7, 3, 9]), B * (T + 1) // 4 + 1)[: B * (T + 1)]
    verdict, detail = data_corruption.decide(_stats(repeated), ctrls)
    assert verdict == "confirmed" and "entropy" in detail


def test_out_of_vocabulary_ids_flag_data_corruption() -> None:
    ctrls = [_stats(_common(s)) for s in range(4)]
    bad = _common(5)
    bad[::7] = V + 100
    verdict, detail = data_corruption.decide(_stats(bad), ctrls)
    assert verdict == "confirmed" and "outside the vocabulary" in detail


def test_scrambled_tokens_lose_bigram_support() -> None:
    chain = np.array([(i * 5) % 56 for i in range(8000)])  # a language with one successor each
    known = data_corruption.Known.of(chain, V)
    start = np.random.default_rng(0).integers(0, 7000, 5)
    ctrls = [_stats(chain[s : s + B * (T + 1)], known) for s in start[:4]]
    scrambled = np.random.default_rng(1).permutation(chain[start[4] : start[4] + B * (T + 1)])
    verdict, detail = data_corruption.decide(_stats(scrambled, known), ctrls)
    assert verdict == "confirmed" and "bigram support" in detail


def test_ordinary_batch_refutes_data_corruption() -> None:
    ctrls = [_stats(_common(s)) for s in range(4)]
    verdict, detail = data_corruption.decide(_stats(_common(11)), ctrls)
    assert verdict == "refuted", detail


# ----- overflow -----------------------------------------------------------------------------
def test_fp16_overflow_is_confirmed_for_an_fp16_run(model: GPT) -> None:
    off = _batch(_common(1), scale=1e7)  # embeddings x 1e7: past fp16's 65504, fine in fp32
    ctrls = [_batch(_common(s)) for s in range(2)]
    verdict, detail, nums = overflow.evaluate(model, "fp16", 1024.0, off, ctrls)
    assert verdict == "confirmed", detail
    assert nums["fp16_first_nonfinite"] == "embed" and nums["fp32_first_nonfinite"] is None
    assert nums["control_nonfinite"] == 0
    assert len(nums["act_norms"]["value"]) == len(nums["act_norms"]["control"]) == 2


def test_overflow_is_refuted_for_fp32_and_for_a_harmless_batch(model: GPT) -> None:
    off = _batch(_common(1), scale=1e7)
    ctrls = [_batch(_common(s)) for s in range(2)]
    assert overflow.evaluate(model, "fp32", None, off, ctrls)[0] == "refuted"
    verdict, detail, _ = overflow.evaluate(model, "fp16", 1024.0, _batch(_common(3)), ctrls)
    assert verdict == "refuted", detail


def test_trace_names_the_first_nonfinite_layer(model: GPT) -> None:
    tr = trace(model, _batch(_common(1), scale=1e7), torch.float16)
    assert tr.first_nonfinite == "embed" and not tr.finite
    assert len(tr.max_abs) == len(tr.max_attn_logit) == 2
    ok = trace(model, _batch(_common(1)), torch.float32)
    assert ok.finite and all(math.isfinite(v) for v in ok.max_abs)


# ----- optimizer counterfactuals ------------------------------------------------------------
def _w(x_orig: float, x_cf: float, **kw: float) -> counterfactual.Window:
    base = {"e_log": 2.0, "x_log": x_orig, "x_orig": x_orig, "x_cf": x_cf, "a": 0.3,
            "u_pre": 1.0, "u_orig": 4.0, "u_cf": 1.2, "r_pre": 10.0, "r_orig": 40.0,
            "r_cf": 12.0}  # fmt: skip
    return counterfactual.Window(**(base | kw))


@pytest.mark.parametrize(
    ("w", "want"),
    [
        (_w(2.0, 0.1), "confirmed"),  # removes the added loss, updates back to normal
        (_w(2.0, 0.1, u_cf=3.9), "inconclusive"),  # ... but its updates still blow up
        (_w(2.0, 1.95), "refuted"),  # keeps it
        (_w(0.1, 0.1, x_log=0.1), "refuted"),  # the batch itself is the spike
        (_w(0.05, 0.05, x_log=2.0), "refuted"),  # the replay does not produce it
        (_w(0.1, 0.0, e_log=0.1), "inconclusive"),  # nothing above the noise
        (_w(1e9, 0.2, e_log=1e9, x_log=1e9, u_pre=math.nan), "confirmed"),  # a NaN spike
        (_w(2.0, 1.3), "inconclusive"),  # keeps 60%
    ],
)
def test_lr_counterfactual_rule(w: counterfactual.Window, want: str) -> None:
    assert optimizer.decide_lr(w)[0] == want


@pytest.mark.parametrize(
    ("w", "want"),
    [
        (_w(2.0, 0.8, r_cf=20.0), "confirmed"),  # halves the added loss and the step blow-up
        (_w(2.0, 0.8, r_orig=15.0), "refuted"),  # the normalized step never blew up
        (_w(2.0, 0.8, r_cf=35.0), "inconclusive"),  # the step blow-up stays
        (_w(2.0, 1.9, r_cf=38.0), "refuted"),  # keeps both
        (_w(0.1, 0.1, x_log=0.1), "refuted"),  # the batch itself is the spike
    ],
)
def test_beta2_counterfactual_rule(w: counterfactual.Window, want: str) -> None:
    assert optimizer.decide_beta2(w)[0] == want


def test_counterfactual_updates_near_the_pre_spike_level() -> None:
    assert _w(2.0, 0.1, u_cf=1.9).updates_near_pre()  # within 2x of the pre-spike level
    assert _w(2.0, 0.1, u_orig=6.0, u_cf=3.0).updates_near_pre()  # half the excess removed
    assert not _w(2.0, 0.1, u_cf=3.0).updates_near_pre()
    assert _w(2.0, 0.1, u_pre=math.nan).updates_near_pre()  # not measurable: no objection


def test_trajectory_excess_leaves_out_what_the_batch_itself_costs() -> None:
    assert counterfactual.trajectory_excess(9.0, 8.5) == pytest.approx(0.5)
    assert counterfactual.trajectory_excess(math.nan, 4.0) == counterfactual.BIG
    assert counterfactual.trajectory_excess(math.nan, math.inf) == 0.0  # non-finite in itself


def test_second_moment_reset_only_raises_v() -> None:
    cfg = TrainConfig(model=GPTConfig(vocab_size=V, block_size=T, n_embd=16, n_head=2), seq_len=T)
    state = build_state(cfg)
    state.optimizer = make_optimizer(state.model, cfg)
    x = torch.randint(0, V, (B, T))
    for _ in range(2):
        state.optimizer.zero_grad()
        state.model(x, x)[1].backward()  # type: ignore[union-attr]
        state.optimizer.step()
    v_before = {p: s["exp_avg_sq"].clone() for p, s in state.optimizer.state.items()}
    state.optimizer.zero_grad()
    (10.0 * state.model(x, x)[1]).backward()  # type: ignore[union-attr]
    info = counterfactual.SecondMomentReset(3, state).apply(state.model)
    assert info["reset_params"] == len(v_before)
    for p, st in state.optimizer.state.items():
        g = p.grad * info["clip_coef"]
        assert torch.all(st["exp_avg_sq"] >= v_before[p])
        assert torch.all(st["exp_avg_sq"] >= g.pow(2) * (1 - cfg.beta2**2) * (1 - 1e-6))


# ----- reproduction tolerance ---------------------------------------------------------------
def test_close_is_an_fp_tolerance_that_matches_nan_with_nan() -> None:
    assert close(4.0, 4.0 + 1e-4, 1e-3) and not close(4.0, 4.1, 1e-3)
    assert close(float("nan"), float("nan"), 1e-3) and not close(float("nan"), 4.0, 1e-3)
    assert close(None, 7.0, 1e-3)  # not logged: nothing to contradict
    assert close(float("inf"), float("inf"), 1e-3)
