"""Real public training logs (../shared/real_logs), ingested through the real pipeline.

Documented spikes are found and typed recoverable; clean runs and normal start-up raise
nothing; llm.c's gradient spikes with small loss bumps are near-misses (or recoverable).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from forensics.detect import Detection, detect
from forensics.ingest import ingest
from forensics.store import open_store

MODDED = "KellerJordan__modded-nanogpt/records__track_1_short__"
GOLDEN = "NVIDIA__Megatron-LM/tests__functional_tests__test_cases__"


@pytest.fixture(scope="module")
def detected(real_logs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Detection]:
    """Detection of every real log, keyed by the file's path under real_logs/."""
    out: dict[str, Detection] = {}
    tmp = tmp_path_factory.mktemp("real")
    for i, path in enumerate(sorted(p for p in real_logs.glob("*/*") if p.is_file())):
        with open_store(tmp / f"{i}.duckdb") as store:
            ingest(store, [path], run="r")
            out[str(path.relative_to(real_logs))] = detect(store, "r")[0]
    return out


def _one(detected: dict[str, Detection], prefix: str) -> Detection:
    hits = [d for k, d in detected.items() if k.startswith(prefix)]
    assert len(hits) == 1, prefix
    return hits[0]


@pytest.mark.parametrize(
    ("prefix", "step"),
    [
        (MODDED + "2024-10-09_SOAP", 947),
        (MODDED + "2024-10-10_Muon", 947),
        (MODDED + "2024-12-04_ValueEmbed__75a3af7b", 946),
        (MODDED + "2024-12-04_ValueEmbed__51faed93", 946),
        (MODDED + "2024-10-20_ScaleUp1B__ad8d7ae5", 4454),
        (MODDED + "2024-10-20_ScaleUp1B__c0078066", 4454),
        (MODDED + "2024-10-20_ScaleUp1B__87bd51fd", 5964),
        (MODDED + "2024-11-10_ScaleShortcuts", 14221),
        (MODDED + "2024-11-14_QuantizedFP4", 14257),
        (GOLDEN + "mixtral__mixtral_8x7b_alltoall_tp2pp4ep4_release__golden_values_lts", 4055),
    ],
)
def test_documented_spike_is_found_and_recoverable(detected, prefix: str, step: int) -> None:  # type: ignore[no-untyped-def]
    det = _one(detected, prefix)
    hits = [i for i in det.incidents if any(abs(s - step) <= 5 for s, _ in i.peaks)]
    assert hits, (
        f"no incident peaks at {step}: {[(i.onset_step, i.peak_step) for i in det.incidents]}"
    )
    inc = hits[0]
    assert inc.type == "recoverable" and inc.end_step is not None
    # loss-only logs: the shape of a batch, which kind the log cannot say; what to log next
    assert inc.cause == "batch_driven" and inc.confidence >= 0.6
    assert any(e.key == "missing_metrics" and "grad_norm" in str(e.value) for e in inc.evidence)
    assert inc.log_next and inc.log_next[0].metric == "grad_norm"


def test_mixtral_spike_spans_4045_to_about_4070(detected) -> None:  # type: ignore[no-untyped-def]
    det = _one(
        detected, GOLDEN + "mixtral__mixtral_8x7b_alltoall_tp2pp4ep4_release__golden_values_lts"
    )
    (inc,) = [i for i in det.incidents if i.peak_step == 4055]
    assert 4045 <= inc.onset_step <= 4050 and inc.end_step is not None and inc.end_step <= 4100


@pytest.mark.parametrize("step", [7435, 9025])
def test_llmc_gradient_spikes_are_near_misses_or_recoverable(detected, step: int) -> None:  # type: ignore[no-untyped-def]
    det = _one(detected, MODDED + "2024-10-13_llmc")
    near = {n.step for n in det.near_misses}
    recoverable = {s for i in det.incidents if i.type == "recoverable" for s, _ in i.peaks}
    assert step in near or any(abs(s - step) <= 2 for s in recoverable)


@pytest.mark.parametrize(
    "prefix",
    [
        GOLDEN + "gpt__gpt3_15b_8t_release",
        GOLDEN + "mixtral__deepseekv3_proxy",
        MODDED + "2024-06-06_AdamW",
        "bigscience-workshop__bigscience/experiments__gpt2-meg",  # fp16 loss-scale search
        "aigoncharov__trainer_state_viz/trainer_state.json",
        GOLDEN + "gpt__gpt3_mcore_tp1_pp2_resume_torch_dist__golden_values_lts_dgx_a100_2nd",
    ],
)
def test_clean_runs_and_start_up_raise_no_incident(detected, prefix: str) -> None:  # type: ignore[no-untyped-def]
    det = _one(detected, prefix)
    assert det.incidents == [], [(i.onset_step, i.peak_step, i.type) for i in det.incidents]


def test_a_recovery_point_sits_within_the_allowance_the_evidence_states(
    detected,
    real_logs: Path,  # type: ignore[no-untyped-def]
) -> None:
    """ScaleUp1B c0078066's spike at 4701 is "back at step 4705" with the loss 7.8% over the
    trend, where the evidence gave only the 4.5% tolerance (which the 9-point median meets):
    the point's own allowance (2 noise scales) is now evidence too, and holds it."""
    det = _one(detected, MODDED + "2024-10-20_ScaleUp1B__c0078066")
    (inc,) = [i for i in det.incidents if i.onset_step == 4701]
    ev = {e.key: e.value for e in inc.evidence}
    assert inc.end_step == 4705 and ev["tolerance"] < 0.078 < ev["back_point_allowance"]
    for i in det.incidents:  # every loss incident states it, never below the tolerance
        e = {x.key: x.value for x in i.evidence}
        assert e["back_point_allowance"] >= e["tolerance"], i.onset_step


def test_mixtral_blips_just_under_the_spike_size_are_near_misses(detected) -> None:  # type: ignore[no-untyped-def]
    # the overview shows blips at 1500, 3735, 4575 and 5305 beside the two marked spikes,
    # 15-20 noise scales up but +11-14%, under the +15% a spike needs: a reader who sees
    # them learns why they are no incidents (the page said "No near-miss was recorded")
    det = _one(
        detected, GOLDEN + "mixtral__mixtral_8x7b_alltoall_tp2pp4ep4_release__golden_values_lts"
    )
    small = {n.step: n for n in det.near_misses if "under the +15% a spike needs" in n.detail}
    assert {3735, 5305} <= set(small) and all(1.1 <= n.ratio < 1.15 for n in small.values())
    # one blip is one row, not one per point of its excursion; no row inside an incident
    steps = sorted(small)
    assert all(b - a > 5 for a, b in zip(steps, steps[1:], strict=False))
    assert not any(i.onset_step <= s <= i.span_end for i in det.incidents for s in steps)
