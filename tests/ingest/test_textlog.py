"""Plain-text logs read through named line patterns: nanoGPT, modded-nanogpt, llm.c, litgpt."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.canon import alias_table
from forensics.errors import InputError
from forensics.ingest import ingest
from forensics.ingest.base import HEAD_BYTES, ReadResult, read_head
from forensics.ingest.readers.textlog import ENV_VAR, TextLogReader, load_patterns, parse_lines
from forensics.store import open_store

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "text"
READER = TextLogReader()


def read(name: str) -> ReadResult:
    return READER.read(FIX / name)


def series(result: ReadResult, raw_name: str) -> dict[int, float]:
    rows = result.metrics.filter(pl.col("raw_name") == raw_name).sort("step")
    return dict(zip(rows["step"].to_list(), rows["value"].to_list(), strict=True))


@pytest.mark.parametrize("pattern", load_patterns(), ids=lambda p: p.name)
def test_every_shipped_pattern_reads_its_own_example(pattern) -> None:  # type: ignore[no-untyped-def]
    """Each pattern carries a real line as its proof; it must yield a step and a metric."""
    assert pattern.description and pattern.example
    lines = pl.DataFrame({"line": [1], "text": [pattern.example]})
    rows = parse_lines(lines, [pattern], Path("example"), [])
    assert rows.height >= 1 and rows["step"].null_count() == 0


def test_modded_nanogpt_spike_and_nan_step_avg() -> None:
    res = read("modded_nanogpt.txt")
    loss = series(res, "train_loss")
    assert [loss[s] for s in (945, 946, 947)] == [3.4283, 5.0995, 3.6010]
    assert len(loss) == 11
    # `step_avg:nanms` on the first steps is a missing timing, not a NaN metric.
    step_avg = series(res, "step_avg")
    assert 1 not in step_avg and step_avg[946] == pytest.approx(169.90)
    assert not any(math.isnan(v) for v in res.metrics["value"].to_list())
    assert series(res, "val_loss") == {0: 10.8258, 1000: 3.4706, 1530: 3.2838}
    assert series(res, "train_time_ms")[946] == 159029.0  # cumulative ms, its unit in its name


def test_llmc_train_and_val_lines() -> None:
    res = read("llmc_main.log")
    assert series(res, "norm")[9025] == 2.02 and series(res, "trl")[9025] == 3.4915
    assert series(res, "tel") == {0: 11.0092, 19560: 3.2722}
    assert series(res, "lr")[0] == 0.000001
    table = alias_table()
    assert [table.canonical(n) for n in ("trl", "tel", "norm")] == ["loss", "val_loss", "grad_norm"]


def test_nanogpt_eval_lines_do_not_mix_into_training_loss() -> None:
    res = read("nanogpt.log")
    assert list(series(res, "loss")) == [0, 10, 20, 30, 40]
    assert math.isnan(series(res, "loss")[30])
    assert series(res, "eval_train_loss") == {0: 3.2791, 40: 3.0617}
    assert series(res, "val_loss") == {0: 3.2829, 40: 3.0912}
    assert series(res, "mfu_pct") == {20: 29.81, 30: 29.80, 40: 27.24}  # -100.00% = not measured
    assert series(res, "iter_time_ms")[0] == pytest.approx(31250.05)
    assert alias_table().canonical("eval_train_loss") != "loss"


def test_litgpt_micro_iterations_keep_the_blow_up_inside_a_step() -> None:
    res = read("litgpt.log")
    # loss is each optimizer step's mean, loss/max its worst micro-iteration
    assert series(res, "loss")[143] == pytest.approx((1.6932 + 1.7125) / 2)
    assert series(res, "loss")[144] == pytest.approx((1.7019 + 11.4630 + 11.2871) / 3)
    assert series(res, "loss/max") == {143: 1.7125, 144: 11.4630}
    # every micro-iteration's loss stays, by its position in the step
    assert series(res, "loss/micro/0") == {143: 1.6932, 144: 1.7019}
    assert series(res, "loss/micro/1") == {143: 1.7125, 144: 11.4630}
    assert series(res, "loss/micro/2") == {144: 11.2871}
    assert series(res, "iter") == {143: 1150.0, 144: 1153.0}
    assert series(res, "iter_time_ms")[144] == pytest.approx(1054.70)
    assert any("micro-iteration" in w and "loss/max" in w for w in res.warnings)


def test_nan_and_inf_are_kept_as_floats() -> None:
    res = read("textlog_nonfinite.log")
    trl, norm = series(res, "trl"), series(res, "norm")
    assert math.isnan(trl[1]) and norm[1] == math.inf
    assert trl[2] == -math.inf and math.isnan(norm[2])
    assert len(trl) == 4


def test_cut_last_line_keeps_what_is_complete() -> None:
    res = read("textlog_cut.log")
    assert series(res, "trl")[2] == 10.8556  # the line is kept ...
    assert 2 not in series(res, "lr")  # ... but `lr:0.0000` ran into the cut
    assert any("no line end" in w for w in res.warnings)
    res = read("textlog_cut_unparsed.log")
    assert list(series(res, "trl")) == [0, 1]
    assert any("matches no pattern: ignored" in w for w in res.warnings)


def test_file_with_no_matching_line_is_not_claimed_and_not_read() -> None:
    path = FIX / "no_match.txt"
    assert not READER.sniff(path, read_head(path))
    with pytest.raises(
        InputError, match=r"no_match\.txt: no line matches a known text-log pattern"
    ):
        READER.read(path)


@pytest.mark.parametrize(
    ("name", "claimed"),
    [
        ("modded_nanogpt.txt", True),
        ("llmc_main.log", True),
        ("nanogpt.log", True),
        ("litgpt.log", True),
        ("megatron_bigscience.log", False),
        ("nanotron.log", False),
        ("custom.log", False),
    ],
)
def test_sniff(name: str, claimed: bool) -> None:
    path = FIX / name
    assert READER.sniff(path, read_head(path)) is claimed


def test_sniff_sees_lines_after_a_long_header(tmp_path: Path) -> None:
    """Unstripped modded-nanogpt logs open with the whole training script."""
    log = tmp_path / "run.txt"
    source = "".join(f"    x_{i} = torch.zeros({i})  # model code\n" for i in range(3000))
    log.write_text(source + (FIX / "modded_nanogpt.txt").read_text())
    assert len(source) > HEAD_BYTES
    assert READER.sniff(log, read_head(log))


def test_sniff_refuses_a_document_quoting_a_log(tmp_path: Path) -> None:
    doc = tmp_path / "README.md"
    doc.write_text("step:946/1530 train_loss:5.0995 train_time:159029ms step_avg:169.90ms\n")
    assert not READER.sniff(doc, read_head(doc))


def test_user_patterns_from_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    path = FIX / "custom.log"
    assert not READER.sniff(path, read_head(path))
    monkeypatch.setenv(ENV_VAR, str(FIX / "user_patterns.yaml"))
    assert READER.sniff(path, read_head(path))
    res = READER.read(path)
    assert series(res, "loss") == {10: 2.5012, 20: 2.4420}
    assert series(res, "grad_norm") == {10: 0.31, 20: 0.29}
    assert series(res, "val_loss") == {20: 2.61}


def test_load_patterns_puts_user_patterns_first() -> None:
    names = [p.name for p in load_patterns(FIX / "user_patterns.yaml")]
    assert names[:2] == ["acme-train", "acme-eval"]
    assert "modded-nanogpt-train" in names


def test_broken_pattern_file_names_file_and_field() -> None:
    with pytest.raises(InputError, match=r"bad_patterns\.yaml: field 'patterns\[0\]\.regex'.*step"):
        load_patterns(FIX / "bad_patterns.yaml")
    with pytest.raises(InputError, match="line-pattern file not found"):
        load_patterns(FIX / "absent.yaml")


def test_bad_regex_and_loose_capture_are_input_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad_regex.yaml"
    bad.write_text("patterns:\n  - name: x\n    regex: '^(?P<step>\\d+ (?P<loss>{num})'\n")
    with pytest.raises(InputError, match=r"bad_regex\.yaml: field 'patterns\[0\]\.regex'"):
        load_patterns(bad)
    loose = tmp_path / "loose.yaml"
    loose.write_text(
        "patterns:\n  - name: loose\n    regex: '^it (?P<step>\\d+) loss (?P<loss>\\S+)'\n"
    )
    log = tmp_path / "run.log"
    log.write_text("it 1 loss 2.5\nit 2 loss oops\n")
    rows = parse_lines(
        pl.DataFrame({"line": [1], "text": ["it 1 loss 2.5"]}), load_patterns(loose), log, []
    )
    assert rows["value"].to_list() == [2.5]
    with pytest.raises(
        InputError, match=r"run\.log:2: field 'loss': pattern 'loose' captured 'oops'"
    ):
        parse_lines(
            pl.DataFrame({"line": [1, 2], "text": ["it 1 loss 2.5", "it 2 loss oops"]}),
            load_patterns(loose),
            log,
            [],
        )


def test_pipeline_second_ingest_adds_nothing(tmp_db: Path) -> None:
    src = FIX / "llmc_main.log"
    with open_store(tmp_db) as store:
        ingest(store, [src])
        run = store.run_names()[0]
        first = store.metrics_long(run).height
        ingest(store, [src])
        assert store.metrics_long(run).height == first == READER.read(src).metrics.height
        assert store.metrics_long(run, ["loss"]).height == 10
        assert store.metrics_long(run, ["val_loss"])["step"].to_list() == [0, 19560]
        assert store.metrics_long(run, ["grad_norm"]).filter(pl.col("step") == 9025)[
            "value"
        ].to_list() == [2.02]


def test_large_log_reads_every_line(tmp_path: Path) -> None:
    """200k llm.c lines (about 8 MB) in one vectorised pass; nothing lost at chunk edges."""
    lines = (f"s:{i} trl:{3 + (i % 7) / 10:.4f} lr:0.0003 norm:0.28\n" for i in range(200_000))
    log = tmp_path / "main.log"
    log.write_text("".join(lines))
    res = READER.read(log)
    assert res.metrics.height == 600_000
    assert series(res, "trl")[199_999] == pytest.approx(3.2)  # 199999 % 7 == 2


_TOKENS = st.sampled_from(
    [
        "step:",
        "s:",
        "iter ",
        "step ",
        "12",
        "/100",
        " train_loss:",
        " trl:",
        " tel:",
        "nan",
        "inf",
        "-3.5",
        ": loss ",
        ", time ",
        "ms",
        "%",
        "[rank0]: ",
        " norm:",
        "step_avg:nanms",
        "\n",
    ]
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(
        st.one_of(st.text(max_size=80), st.lists(_TOKENS, max_size=12).map("".join)), max_size=12
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
    assert res.metrics["step"].null_count() == 0 and res.metrics["value"].null_count() == 0
