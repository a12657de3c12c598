"""Megatron-style text logs: every trap of SOURCES.md sections 1.3 and 4, one fixture each."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.canon import alias_table
from forensics.errors import InputError
from forensics.ingest import ingest
from forensics.ingest.base import HEAD_BYTES, ReadResult, read_head
from forensics.ingest.readers.megatron import MegatronReader
from forensics.store import open_store

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "text"
READER = MegatronReader()


def read(name: str) -> ReadResult:
    return READER.read(FIX / name)


def series(result: ReadResult, raw_name: str) -> dict[int, float]:
    rows = result.metrics.filter(pl.col("raw_name") == raw_name).sort("step")
    return dict(zip(rows["step"].to_list(), rows["value"].to_list(), strict=True))


def test_fields_as_printed_and_missing_fields_stay_missing() -> None:
    res = read("megatron_bigscience.log")
    # Iteration 10: all 10 iterations skipped, so no `lm loss` and no `grad norm` at all.
    assert list(series(res, "lm loss")) == [20, 30, 40, 100, 110]
    assert list(series(res, "grad norm")) == [30, 40, 100, 110]
    assert series(res, "lm loss")[30] == pytest.approx(22.47505)
    assert series(res, "grad norm")[30] == pytest.approx(16.999)
    assert series(res, "loss scale")[10] == 8388608.0
    assert series(res, "elapsed time per iteration (ms)")[30] == pytest.approx(1376.1)
    assert series(res, "learning rate")[30] == pytest.approx(1.5e-4)


def test_counters_are_stored_per_window() -> None:
    res = read("megatron_bigscience.log")
    skipped = series(res, "number of skipped iterations")
    assert [skipped[s] for s in (10, 20, 30, 40)] == [10.0, 8.0, 1.0, 0.0]
    assert set(series(res, "number of nan iterations").values()) == {0.0}


def test_validation_losses_are_separate_from_training_loss() -> None:
    res = read("megatron_bigscience.log")
    assert series(res, "lm loss value") == {100: pytest.approx(8.017406)}
    assert series(res, "lm loss PPL") == {100: pytest.approx(3033.3)}
    assert series(res, "lm loss")[100] == pytest.approx(7.97437)  # the training record
    table = alias_table()
    assert table.canonical("lm loss value") == "val_loss"
    assert table.canonical("lm loss PPL") == "val_ppl"
    assert table.canonical("lm loss") == "loss"


def test_arguments_block_becomes_config() -> None:
    cfg = read("megatron_bigscience.log").config
    expected = {
        "beta1": 0.9,
        "beta2": 0.999,
        "peak_lr": 0.00015,
        "min_lr": 1e-05,
        "grad_clip": 1.0,
        "precision": "fp16",
        "world_size": 16,
        "seq_len": 1024,
        "global_batch_size": 4,
        "train_iters": 1000,
        "seed": 1234,
        "warmup_steps": 8,  # lr_warmup_fraction 0.01 x lr_decay_iters 800, as Megatron does
    }
    assert {k: cfg[k] for k in expected} == expected
    # The raw arguments are kept, typed.
    assert cfg["adam_beta2"] == 0.999 and cfg["fp16"] is True and cfg["bf16"] is False
    assert cfg["split"] == "949,50,1" and cfg["lr_warmup_fraction"] == 0.01


def test_second_arguments_block_is_reported_not_merged() -> None:
    res = read("megatron_two_launches.log")
    assert res.config["beta2"] == 0.999 and res.config["precision"] == "fp16"
    assert res.config["warmup_steps"] == 106  # 216320 warm-up samples / 2048 per batch
    assert res.config["train_iters"] is None and res.config["world_size"] == 256
    assert any("adam_beta2: 0.999 -> 0.95" in w for w in res.warnings)
    assert list(series(res, "lm loss")) == [3000, 3010]


def test_nan_grad_norm_is_stored_and_absent_loss_is_not_invented() -> None:
    res = read("megatron_nan.log")
    loss, gnorm = series(res, "lm loss"), series(res, "grad norm")
    assert list(loss) == [5425, 5428, 5429]  # 5426/5427 print no `lm loss`
    assert math.isnan(gnorm[5426]) and math.isnan(gnorm[5427])
    assert math.isnan(loss[5428]) and gnorm[5428] == math.inf
    assert loss[5429] == -math.inf and gnorm[5429] == -math.inf
    assert series(res, "number of nan iterations")[5428] == 1.0


def test_deepspeed_overflow_lines_become_events_and_counts() -> None:
    res = read("megatron_overflow.log")
    events = res.events.sort("step")
    assert events["kind"].unique().to_list() == ["overflow"]
    assert events["step"].to_list() == [17062, 17063, 17064, 17064, 17066]
    assert "Attempted loss scale: 524288.0, reducing to 262144.0" in events["detail"][2]
    assert series(res, "overflow") == {17062: 1.0, 17063: 1.0, 17064: 2.0, 17066: 1.0}
    assert any("after the last iteration record" in w for w in res.warnings)
    # The trap: Megatron's own counter says nothing was skipped.
    assert set(series(res, "number of skipped iterations").values()) == {0.0}
    assert series(res, "lm loss")[17062] == pytest.approx(4.374269)


def test_rank_prefix_and_valid_loss_line() -> None:
    res = read("megatron_bloom.log")
    assert series(res, "lm loss")[31219] == pytest.approx(5.098124)
    assert series(res, "grad norm")[31219] == pytest.approx(960.351)
    assert series(res, "lm loss value") == {31250: pytest.approx(2.327091)}
    assert series(res, "elapsed time per iteration (s)")[31218] == pytest.approx(107.53)
    assert res.metrics["wall_time"].null_count() == res.metrics.height


def test_timestamp_prefix_gives_wall_time_and_extra_losses_are_kept() -> None:
    res = read("megatron_bridge.log")
    at29 = res.metrics.filter(pl.col("step") == 29)
    stamp = datetime(2026, 5, 28, 22, 26, 20, tzinfo=UTC).timestamp()
    assert at29["wall_time"].unique().to_list() == [stamp]
    assert series(res, "mtp_1 loss")[29] == pytest.approx(1.115410)
    assert series(res, "mtp_2 loss")[29] == pytest.approx(1.180141)
    assert series(res, "seq_load_balancing_loss")[29] == pytest.approx(1.253194)
    # `elapsed time per iteration: 1895.9 ms` is read under Megatron's own spelling.
    assert series(res, "elapsed time per iteration (ms)")[30] == pytest.approx(1895.9)
    assert series(res, "mtp_1 loss value") == {30: pytest.approx(1.140021)}
    assert series(res, "lm loss value") == {30: pytest.approx(0.9012345)}


def test_labelled_and_end_of_training_evaluations_stay_apart() -> None:
    res = read("megatron_bridge.log")
    # A second validation set at the same step keeps its label in the name ...
    assert series(res, "wiki lm loss value") == {30: pytest.approx(0.9512345)}
    assert alias_table().canonical("wiki lm loss value") != "val_loss"
    # ... and the end-of-training test evaluation has no step, so it is not stored.
    assert 0.8912345 not in res.metrics["value"].to_list()
    assert alias_table().canonical("mtp_1 loss") == "mtp_loss/1"
    assert alias_table().canonical("seq_load_balancing_loss") == "aux_loss"


def test_records_wrapped_mid_field_are_rejoined() -> None:
    res = read("megatron_wrapped.log")
    assert series(res, "lm loss") == {
        42782: pytest.approx(2.110646),  # wrapped inside the key "learning rate"
        42783: pytest.approx(2.124820),  # wrapped inside the number 2.124820E+00
        42784: pytest.approx(2.127643),
    }
    assert series(res, "learning rate")[42782] == pytest.approx(4.475e-5)
    assert series(res, "number of nan iterations")[42782] == 0.0
    assert series(res, "TFLOPs") == {42782: 149.04, 42783: 142.32, 42784: 141.09}
    assert any("wrapped" in w for w in res.warnings)


def test_cut_records_keep_complete_fields_only() -> None:
    res = read("megatron_cut.log")
    assert series(res, "lm loss") == {3384: pytest.approx(0.7072597)}  # 3386's `2.2` is cut
    assert series(res, "loss scale") == {3384: 1.0, 3385: 1.0}
    assert series(res, "global batch size") == {3384: 64.0, 3385: 64.0, 3386: 64.0}
    assert "grad norm" in res.metrics["raw_name"].to_list()  # 3384's, complete
    assert 3385 not in series(res, "grad norm")  # `| gr` was cut, nothing invented
    assert any("cut short" in w for w in res.warnings)


def test_nanotron_style_with_unit_suffixes() -> None:
    res = read("nanotron.log")
    assert series(res, "lm_loss") == {327281: 2.38, 327282: 2.35}
    assert series(res, "consumed_tokens")[327281] == pytest.approx(85.8e9)
    assert series(res, "elapsed_time_per_iteration_ms")[327281] == pytest.approx(11.5e3)
    assert series(res, "tokens_per_sec")[327281] == pytest.approx(22.8e3)
    assert series(res, "cuda_memory_allocated")[327282] == pytest.approx(21.7e6)
    assert series(res, "grad_norm")[327282] == pytest.approx(1.22)
    stamp = datetime(2025, 10, 17, 16, 31, 56, tzinfo=UTC).timestamp()
    assert res.metrics.filter(pl.col("step") == 327281)["wall_time"].unique().to_list() == [stamp]


def test_corrupt_loss_value_names_file_line_and_field() -> None:
    with pytest.raises(InputError, match=r"megatron_bad\.log:2: field 'lm loss': .*1\.2O3115E\+01"):
        read("megatron_bad.log")


def test_run_that_stopped_before_its_first_record_still_gives_its_config(tmp_path: Path) -> None:
    log = tmp_path / "crashed.out"
    header = (FIX / "megatron_bigscience.log").read_text().split(" iteration ")[0]
    log.write_text(header)
    res = READER.read(log)
    assert res.metrics.height == 0 and res.config["beta2"] == 0.999
    assert any("no iteration record" in w for w in res.warnings)


def test_step_beyond_64_bits_names_line_and_field(tmp_path: Path) -> None:
    log = tmp_path / "odd.log"
    log.write_text(
        " iteration 10/ 20 | lm loss: 1.0 |\n iteration 99999999999999999999/ 20 | lm loss: 1.0 |\n"
    )
    with pytest.raises(InputError, match=r"odd\.log:2: field 'iteration'"):
        READER.read(log)


def test_file_without_megatron_records_is_an_input_error() -> None:
    with pytest.raises(InputError, match="no_match.txt: no Megatron iteration record"):
        read("no_match.txt")


@pytest.mark.parametrize(
    ("name", "claimed"),
    [
        ("megatron_bigscience.log", True),
        ("megatron_overflow.log", True),
        ("nanotron.log", True),
        ("megatron_wrapped.log", True),
        ("modded_nanogpt.txt", False),
        ("llmc_main.log", False),
        ("no_match.txt", False),
    ],
)
def test_sniff(name: str, claimed: bool) -> None:
    path = FIX / name
    assert READER.sniff(path, read_head(path)) is claimed


def test_sniff_looks_past_a_long_shell_trace(tmp_path: Path) -> None:
    """The BigScience .out starts with ~100 KiB of `set -x` trace before Megatron speaks."""
    log = tmp_path / "job-1809579.out"
    trace = "".join(f"++ export VAR_{i}=/gpfs/some/long/path/{i}\n" for i in range(4000))
    log.write_text(trace + (FIX / "megatron_bigscience.log").read_text())
    assert len(trace) > HEAD_BYTES
    assert READER.sniff(log, read_head(log))
    assert series(READER.read(log), "lm loss")[30] == pytest.approx(22.47505)


def test_sniff_refuses_documents_and_binary(tmp_path: Path) -> None:
    doc = tmp_path / "notes.md"
    doc.write_text((FIX / "megatron_bloom.log").read_text())
    blob = tmp_path / "blob.log"
    blob.write_bytes(b"\x00\x01 iteration 10/ 100 | lm loss: 1.0 |\n")
    assert not READER.sniff(doc, read_head(doc))
    assert not READER.sniff(blob, read_head(blob))
    with pytest.raises(InputError, match="binary"):
        READER.read(blob)


def test_pipeline_stores_canonical_names_and_second_ingest_adds_nothing(tmp_db: Path) -> None:
    src = FIX / "megatron_overflow.log"
    with open_store(tmp_db) as store:
        ingest(store, [src])
        counts = _counts(store, "megatron_overflow")
        ingest(store, [src])
        assert _counts(store, "megatron_overflow") == counts
        assert counts["events"] == 5 and counts["metrics"] == READER.read(src).metrics.height
        assert store.metrics_long("megatron_overflow", ["loss"]).height == 6
        overflow = store.metrics_long("megatron_overflow", ["overflow"])
        assert overflow["value"].sum() == 5


def test_pipeline_keeps_val_loss_out_of_loss(tmp_db: Path) -> None:
    with open_store(tmp_db) as store:
        ingest(store, [FIX / "megatron_bigscience.log"])
        run = "megatron_bigscience"
        assert store.metrics_long(run, ["loss"])["step"].to_list() == [20, 30, 40, 100, 110]
        assert store.metrics_long(run, ["val_loss"])["value"].to_list() == [8.017406]
        assert store.metrics_long(run, ["val_ppl"])["step"].to_list() == [100]
        assert store.run_config(run)["beta2"] == 0.999


def _counts(store: object, run: str) -> dict[str, int]:
    q = store.query  # type: ignore[attr-defined]
    return {
        t: q(f"SELECT count(*) AS n FROM {t} WHERE run_id = ?", [run])["n"][0]
        for t in ("metrics", "events")
    }


_TOKENS = st.sampled_from(
    [
        " iteration ",
        "iteration:",
        "10",
        "/",
        " 1000 ",
        "|",
        ": ",
        "lm loss",
        "grad norm",
        "nan",
        "-inf",
        "1.5E-04",
        "12K",
        "[default7]:",
        "[2026-05-28 22:26:20]",
        "OVERFLOW! Rank 0 Skipping step",
        "validation loss at iteration 5",
        "-------- arguments --------",
        "  lr ...... 0.1",
        "x",
        "\n",
    ]
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(
        st.one_of(st.text(max_size=80), st.lists(_TOKENS, max_size=14).map("".join)), max_size=12
    )
)
def test_garbage_never_raises_anything_but_input_error(tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "garbage.log"
    path.write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
    READER.sniff(path, read_head(path))
    try:
        res = READER.read(path)
    except InputError:
        return
    assert res.metrics["step"].null_count() == 0


def test_the_padded_vocab_line_gives_the_vocab_size(real_logs: Path) -> None:
    """Megatron prints the tokenizer's size after the arguments block
    (` > padded vocab (size: 50257) with 431 dummy tokens (new size: 50688)`): the vocab
    size peak_vs_uniform divides by (ln V, the loss of uniform predictions)."""
    path = (
        real_logs
        / "bigscience-workshop__bigscience"
        / "experiments__gpt2-meg__meg_gpt2_base_n4_dp1_tp4_pp4-1809579.out"
    )
    if not path.is_file():
        pytest.skip("the bigscience .out log is not in this copy of real_logs")
    assert MegatronReader().read(path).config["vocab_size"] == 50257
