"""Small pieces of the report stage: formatting, vocabulary lookups, decimation, browser."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from forensics.detect.recovery import action_argument
from forensics.report import fmt
from forensics.report.export import find_chromium
from forensics.report.figures import _stacked, decimate, label, log_ticks, tick_label, use_log
from forensics.report.knowledge import Knowledge
from forensics.report.render import environment, knowledge


@pytest.fixture(scope="module")
def kb() -> Knowledge:
    return knowledge(environment())


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "n/a"),
        (float("nan"), "NaN"),
        (float("inf"), "+Inf"),
        (2400, "2400"),
        (36000, "36,000"),
        (3.14159, "3.142"),
        (262623.4, "262,623"),
        (3e-4, "3e-04"),
        (0.00025956, "2.596e-04"),
        (True, "yes"),
        ("fp16", "fp16"),
    ],
)
def test_num(value: object, text: str) -> None:
    assert fmt.num(value) == text


def test_other_filters() -> None:
    assert fmt.pct(0.823) == "82%" and fmt.pct(None) == "n/a"
    assert fmt.ratio(6.2, 3.1) == "×2" and fmt.ratio(7539, 1.5) == "×5,026"
    assert fmt.ratio(1.0, 0.0) == "n/a" and fmt.ratio(None, 1.0) == "n/a"
    assert fmt.count(1_310_720_000) == "1.31 B" and fmt.count(14_680_064) == "14.7 M"
    assert fmt.usd(6.656) == "$6.66" and fmt.usd(1234.5) == "$1,234"
    assert fmt.utc(1709625600.0) == "2024-03-05 08:00 UTC"
    assert fmt.utc(1709625600.0, zoned=False) == "2024-03-05 08:00"  # a text log's clock
    assert fmt.plural(1, "row") == "1 row" and fmt.plural(36000, "row") == "36,000 rows"
    assert fmt.cell("a|b\nc") == "a\\|b c" and fmt.cell([1, 2]) == "1, 2"
    assert fmt.cell(list(range(9))) == "list of 9"
    assert fmt.sentence("adam's v") == "Adam's v"


@pytest.mark.parametrize(
    ("raw", "key", "name"),
    [
        ("recoverable", "1", "recoverable"),
        ("1", "1", "recoverable"),
        ("Type-2", "2", "lingering"),
        ("divergent", "3", "divergent"),
        ("exploded", "?", "unclassified"),
        (None, "?", "unclassified"),
    ],
)
def test_incident_types(kb: Knowledge, raw: str | None, key: str, name: str) -> None:
    entry = kb.incident_type(raw)
    assert (entry.key, entry.name) == (key, name)


def test_every_detector_cause_and_action_has_text(kb: Knowledge) -> None:
    """The vocabulary of forensics/detect/model.py is described in lessons.yaml."""
    causes = [
        "rare_tokens",
        "stale_beta2",
        "lr_too_high",
        "fp16_overflow",
        "data_corruption",
        "hardware_fault",
        "unknown",
    ]
    actions = ["continue", "skip_batch", "restart_from_checkpoint", "lower_lr", "data_swap"]
    for cause in causes:
        entry = kb.cause(cause)
        assert entry.key == cause and entry.lessons and "no description" not in entry.description
    for name in actions:
        assert kb.action(name) is not None, name
    assert kb.cause("Stale-Adam").key == "stale_beta2"
    assert kb.action("skip_batch:3") is kb.action("skip-batch")


def test_unknown_cause_falls_back_by_name(kb: Knowledge) -> None:
    entry = kb.cause("tokenizer_glitch")
    assert entry.title == "tokenizer glitch"
    assert "lessons.yaml" in entry.description and entry.lessons


def test_action_argument() -> None:
    assert action_argument("skip_batch:3") == 3
    assert action_argument("skip_batch(12)") == 12
    assert action_argument("skip_batch") is None and action_argument(None) is None


def test_decimate_keeps_every_spike() -> None:
    steps = list(range(100_000))
    values = [2.0 + 0.01 * math.sin(s) for s in steps]
    values[31_219] = 5.1
    values[77_777] = 0.5
    xs, ys = decimate(steps, values)
    assert len(xs) <= 4_002 and xs == sorted(xs)
    assert (31_219, 5.1) in zip(xs, ys, strict=True) and 0.5 in ys


def test_log_axis_only_for_wide_positive_ranges() -> None:
    assert use_log([1.0, 100.0]) and not use_log([2.0, 5.0]) and not use_log([0.0, 100.0])


def test_find_chromium_respects_env(tmp_path: Path) -> None:
    assert find_chromium({"FORENSICS_CHROMIUM": "off"}) == (
        None,
        "PNG export is turned off by FORENSICS_CHROMIUM='off'",
    )
    path, why = find_chromium({"BROWSER_PATH": str(tmp_path / "nope")})
    assert path is None and "is not an executable file" in why
    fake = tmp_path / "chrome"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert find_chromium({"FORENSICS_CHROMIUM": str(fake)}) == (str(fake), "")


def test_missing_repo_folder_is_a_clear_error(tmp_path: Path) -> None:
    from forensics.report.locate import MissingFolderError, repo_folder, templates_dir

    assert (templates_dir() / "postmortem.md.j2").is_file()
    with pytest.raises(
        MissingFolderError, match=r'"sample_logs/" folder: looked in .*pip install -e'
    ):
        repo_folder("sample_logs", root=tmp_path)


def test_log_ticks_are_labelled_in_full() -> None:
    assert log_ticks(3.0, 11.0) == [3.0, 5.0, 7.0, 10.0]  # one decade: finer than 1-2-5
    assert log_ticks(0.3, 2.5) == [0.5, 1.0, 2.0]
    assert log_ticks(4096, 65536) == [5000.0, 10000.0, 20000.0, 50000.0]
    assert len(log_ticks(1e-3, 1e12)) <= 8
    assert log_ticks(0.0, 1.0) == [] and log_ticks(1.0, float("inf")) == []
    assert [tick_label(v) for v in (0.5, 5000.0, 2.5e6, 3.0)] == ["0.5", "5k", "2.5M", "3"]


def test_labels_one_step_apart_are_stacked_not_overprinted() -> None:
    # a real modded-nanogpt spike: peak 14738, back on trend at 14739, on a 192-step axis;
    # the two labels were drawn over each other ("peak 1473814739")
    ends: list[float] = []
    peak = _stacked(label(14738, "peak 14738", "#d62728", "right"), ends, 192)
    rec = _stacked(label(14739, "recovered 14739", "#2ca02c", "right"), ends, 192)
    far = _stacked(label(14790, "recovered 14790", "#2ca02c", "right"), ends, 192)
    assert peak["y"] == 1.0 and rec["y"] > peak["y"]
    assert far["y"] == 1.0  # a label clear of the others stays on the first row


def _skip_advice(writer: str | None, replays: list[object] | None = None) -> str:
    """The skip_batch recommendation for a 7-step spike at 2400 written by `writer`."""
    from forensics.report.model import Incident
    from forensics.report.recommend import recommend

    env = environment()
    kb = knowledge(env)
    inc = Incident(
        incident_id=1, metric="loss", onset_step=2400, peak_step=2406, end_step=2450,
        pre_value=2.0, peak_value=4.0, post_value=2.0, grad_norm_peak=None, type="1",
        cause="rare_tokens", confidence=0.8, recovery="skip_batch",
        restart_checkpoint_step=None, peaks=[], evidence=[], features={}, replay=None,
        steps_lost=None, tokens_lost=None, gpu_hours_lost=None, cost_usd=None,
        replays=list(replays or []),  # type: ignore[arg-type]
    )  # fmt: skip
    kind = kb.incident_type("1")
    return recommend(inc, None, None, kb, env, kind, writer).text  # type: ignore[arg-type]


def _lower_lr_why(cause: str) -> str:
    from forensics.report.model import Incident
    from forensics.report.recommend import recommend

    env = environment()
    kb = knowledge(env)
    inc = Incident(
        incident_id=2, metric="loss", onset_step=125, peak_step=125, end_step=None,
        pre_value=2.1, peak_value=float("nan"), post_value=None, grad_norm_peak=None, type="3",
        cause=cause, confidence=0.0, recovery="lower_lr", restart_checkpoint_step=None,
        peaks=[], evidence=[], features={}, replay=None, steps_lost=None, tokens_lost=None,
        gpu_hours_lost=None, cost_usd=None,
    )  # fmt: skip
    return recommend(inc, None, None, kb, env, kb.incident_type("3"), None).why  # type: ignore[arg-type]


def test_lower_lr_advice_claims_no_cause_the_log_did_not_give() -> None:
    # a divergence of undetermined cause that recurs gets 'lower the LR'; its reason said
    # "The optimizer took steps the model could not absorb", a cause no rule had found
    why = _lower_lr_why("unknown")
    assert "could not absorb" not in why
    assert why.startswith("the log does not tell the cause, but the loss kept leaving its trend")
    assert "could not absorb (learning rate too high)" in _lower_lr_why("lr_too_high")


def test_skip_advice_is_megatrons_flag_only_for_megatron_logs() -> None:
    text = _skip_advice("megatron")
    assert "`--skip-train-iteration-range 2400-2406`" in text
    assert "`--iterations-to-skip 2400 2401 2402 2403 2404 2405 2406`" in text


@pytest.mark.parametrize("writer", ["jsonl", "textlog", "lightning", "generic_text", "wandb", None])
def test_skip_advice_claims_no_flag_for_other_writers(writer: str | None) -> None:
    """nanoGPT/llm.c (textlog), Lightning, OLMo or Composer logs (jsonl, W&B, generic text):
    the steps to skip, said plainly, and no option that writer does not have."""
    text = _skip_advice(writer)
    assert "Skip the k = 7 batches of steps 2400–2406:" in text
    assert "--" not in text and "Megatron" not in text
    assert "pass over the data of those steps" in text


def test_skip_advice_for_a_trainer_run_names_the_rows_replay_stored() -> None:
    from forensics.report.model import Replay

    assert "forensics replay --dataset DIR" in _skip_advice("hf_trainer")
    rows = {str(t): [t - 2400, 100 + t - 2400] for t in range(2400, 2407)}
    numbers = {"dataset_rows": rows, "dataset_name": "corpus"}
    probe = Replay("data_corruption", "data_corruption", "refuted", numbers, "", "cpu", 1.0)
    text = _skip_advice("hf_trainer", [probe])
    assert "`drop = {0, 1, 2, 3, 4, 5, 6, 100, 101, 102, 103, 104, 105, 106}`" in text
    assert "the dataset at corpus/" in text and "resume_from_checkpoint" in text
    assert "--skip-train-iteration-range" not in text
    del rows["2406"]  # a step replay did not reach: no partial list passed off as the batch
    assert "drop =" not in _skip_advice("hf_trainer", [probe])


def test_a_metric_logged_in_another_form_is_not_asked_for() -> None:
    """OLMo logs its throughput per device: the README must not say tokens_per_s is missing
    (a reader who sees it in the coverage table above stops trusting the list)."""
    from forensics.report.coverage import missing

    def rows(*names: str) -> list[dict]:
        return [{"metric": n, "n": 10, "first": 1, "last": 10} for n in names]

    kb = knowledge(environment())
    asked = {name for name, _ in missing(rows("loss", "tokens_per_s_device"), {}, kb)}
    assert "tokens_per_s" not in asked and "lr" in asked
    assert "tokens_per_s" in {name for name, _ in missing(rows("loss"), {}, kb)}
    # Megatron's time per iteration prices the incident as well (the GPU count is what the
    # cost section then asks for): the Mixtral golden values log iteration-time
    for timed in ("iter_time_s", "iter_time_ms"):
        assert "tokens_per_s" not in {name for name, _ in missing(rows("loss", timed), {}, kb)}


def test_the_level_500_steps_later_is_a_median_not_one_noisy_point() -> None:
    """ScaleUp1B's page quoted one point at x1.14 the trend while its neighbours were near
    it; the level is the median of the 9 values logged from there (finite ones only)."""
    import polars as pl

    from forensics.report.series import level_from

    steps = list(range(0, 200, 10))
    loss = [2.7] * len(steps)
    loss[10], loss[11] = 3.145, float("nan")  # steps 100 and 110
    frame = pl.DataFrame({"step": steps, "loss": loss})
    lv = level_from(frame, "loss", 95)
    assert lv is not None
    assert (lv.first, lv.last, lv.n, lv.value) == (100, 180, 9, 2.7)
    end = level_from(frame, "loss", 190)
    assert end is not None and (end.first, end.n, end.value) == (190, 1, 2.7)
    assert level_from(frame, "loss", 500) is None


def test_a_hole_in_the_log_breaks_the_curve() -> None:
    """Megatron's golden values hold 1.7k-step holes (no data), which the run overview drew
    as straight lines, as if the loss had been logged there."""
    from forensics.report.figures import broken_at_gaps

    xs = [*range(0, 1000, 5), *range(2700, 3000, 5)]
    ys = [2.0] * len(xs)
    gx, gy = broken_at_gaps(xs, ys)
    (hole,) = [i for i, v in enumerate(gy) if math.isnan(v)]
    assert gx[hole - 1] == 995 and gx[hole + 1] == 2700 and 995 < gx[hole] < 2700
    assert len(gx) == len(xs) + 1
    assert broken_at_gaps(list(range(0, 1000, 5)), [1.0] * 200)[1] == [1.0] * 200  # no hole
