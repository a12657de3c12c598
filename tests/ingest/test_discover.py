"""Run discovery: which files are one run, which are several, and a walk that cannot hang."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from forensics.errors import InputError
from forensics.ingest import ingest
from forensics.ingest.discover import run_name_for
from forensics.store import open_store

MEGATRON = "NVIDIA__Megatron-LM"
MODDED = "KellerJordan__modded-nanogpt"


def _runs(db: Path, *paths: Path, run: str | None = None) -> dict[str, list[str]]:
    with open_store(db) as store:
        summaries = ingest(store, list(paths), run=run)
    return {s.run: sorted(Path(src.path).name for src in s.sources) for s in summaries}


def _llmc(path: Path, steps: range, loss: float = 3.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"s:{s} trl:{loss + (s % 7) / 100:.4f}\n" for s in steps))
    return path


def test_megatron_golden_folder_is_six_runs(real_logs: Path, tmp_db: Path) -> None:
    folder = real_logs / MEGATRON
    runs = _runs(tmp_db, folder)
    files = sorted(p.name for p in folder.iterdir())
    assert len(runs) == len(files) == 6
    assert sorted(n for names in runs.values() for n in names) == files
    assert all(len(names) == 1 for names in runs.values())
    # the resumed half overlaps the full run's steps: a run of its own, not merged
    assert any(r.endswith("resume_torch_dist__golden_values_lts_dgx_a100_2nd") for r in runs)


def test_modded_nanogpt_folder_is_eleven_runs(real_logs: Path, tmp_db: Path) -> None:
    folder = real_logs / MODDED
    runs = _runs(tmp_db, folder)
    assert len(runs) == len(list(folder.iterdir())) == 11
    with open_store(tmp_db) as store:
        for run in runs:
            loss = store.metrics_long(run, ["loss"])
            assert loss["step"].is_unique().all(), run  # no two runs on one step axis


def test_resumed_log_continues_the_first(tmp_path: Path, tmp_db: Path) -> None:
    _llmc(tmp_path / "run" / "part1.log", range(0, 1000))
    _llmc(tmp_path / "run" / "part2.log", range(900, 2000))  # restarted from step 900
    _llmc(tmp_path / "run" / "other.log", range(0, 500), loss=5.0)  # a second run
    with open_store(tmp_db) as store:
        summaries = ingest(store, [tmp_path / "run"])
    by_run = {s.run: s for s in summaries}
    assert set(by_run) == {"part1", "other"}
    assert sorted(Path(s.path).name for s in by_run["part1"].sources) == [
        "part1.log",
        "part2.log",
    ]
    note = " ".join(by_run["part1"].notes)
    assert "part2.log continues part1.log from step 900" in note
    with open_store(tmp_db) as store:
        warnings = store.query("SELECT warnings FROM sources WHERE run_id = 'part1'")
    assert "continues" in str(warnings.to_dicts())


def _csv_logger_version(root: Path, version: int, steps: range, loss: float) -> None:
    """One Lightning CSVLogger version folder (the real logger, as a resumed Trainer opens
    a new version_N under lightning_logs/)."""
    from lightning.pytorch.loggers import CSVLogger

    logger = CSVLogger(save_dir=str(root), name="lightning_logs", version=version)
    logger.log_hyperparams({"lr": 3e-4, "max_steps": 2000})
    for s in steps:
        logger.log_metrics({"train_loss": loss - s / 4000 + (s % 7) / 100}, step=s)
    logger.finalize("success")


@pytest.mark.parametrize(
    ("first", "second", "said"),
    [
        # logged every 10 steps to 930, resumed logging every 2 from 932: the steps between
        # were trained, not logged (issue: two runs)
        (range(10, 931, 10), range(932, 2037, 2), ["from step 932"]),
        # a crash lost the rows CSVLogger had not flushed (every 100 steps) while the
        # checkpoint restored is later: version_1 starts 64 steps after version_0's last
        # row (read as two runs, the second 25 points, too short to judge)
        (
            range(16, 2161, 16),
            range(2224, 2601, 16),
            ["from step 2224", "steps 2161-2223 are in neither log"],
        ),
    ],
    ids=["new_log_interval", "steps_no_log_holds"],
)
def test_a_lightning_resume_is_one_run(
    tmp_path: Path, tmp_db: Path, first: range, second: range, said: list[str]
) -> None:
    """version_1 continues version_0 (a resumed Trainer opens a new version folder)."""
    pytest.importorskip("lightning")
    run = tmp_path / "run"
    _csv_logger_version(run, 0, first, 3.0)
    _csv_logger_version(run, 1, second, 3.0)
    with open_store(tmp_db) as store:
        (summary,) = ingest(store, [run])
        steps = store.metrics_long(summary.run, ["loss"])["step"]
    assert (
        summary.run == "run" and steps.is_unique().all() and len(steps) == len(first) + len(second)
    )
    note = " ".join(summary.notes)
    assert "version_1/metrics.csv continues version_0/metrics.csv " + said[0] in note
    assert all(part in note for part in said[1:])


def test_resume_note_quotes_the_steps_logged_up_to_the_nan_end(
    tmp_path: Path, tmp_db: Path
) -> None:
    """A resumed run that diverged logs NaN to its end: the note quotes the steps the file
    holds (before: "then 304-499" for a version_2 that runs to 599, NaN from 504)."""
    pytest.importorskip("lightning")
    from lightning.pytorch.loggers import CSVLogger

    run = tmp_path / "run"
    _csv_logger_version(run, 0, range(4, 350, 5), 3.0)
    logger = CSVLogger(save_dir=str(run), name="lightning_logs", version=2)
    for s in range(304, 600, 5):
        logger.log_metrics({"train_loss": 2.9 if s < 504 else float("nan")}, step=s)
    logger.finalize("success")
    with open_store(tmp_db) as store:
        (summary,) = ingest(store, [run])
        loss = store.metrics_long(summary.run, ["loss"])
    note = " ".join(summary.notes)
    assert "continues version_0/metrics.csv from step 304 (steps 4-349 then 304-599)" in note
    assert loss["step"].max() == 599 and loss["value"].is_nan().sum() == 20


def _tb_logger_version(root: Path, version: int, steps: range, loss: float) -> None:
    """One Lightning TensorBoardLogger version folder (the real logger), logging what
    `_csv_logger_version` logs: as `logger=[CSVLogger(root), TensorBoardLogger(root)]` write
    one fit to two sibling version folders."""
    from lightning.pytorch.loggers import TensorBoardLogger

    logger = TensorBoardLogger(save_dir=str(root), name="lightning_logs", version=version)
    for s in steps:
        logger.log_metrics({"train_loss": loss - s / 4000 + (s % 7) / 100}, step=s)
    logger.finalize("success")


def test_a_fit_logged_to_csv_and_tensorboard_folders_is_one_run(
    tmp_path: Path, tmp_db: Path
) -> None:
    """Before: `version_0` (CSV) and `version_1` (TB) were two runs with the same incident,
    and the folder index called it a spike recurring across runs."""
    pytest.importorskip("lightning")
    run = tmp_path / "run"
    _csv_logger_version(run, 0, range(4, 600, 5), 3.0)
    _tb_logger_version(run, 1, range(4, 600, 5), 3.0)
    with open_store(tmp_db) as store:
        (summary,) = ingest(store, [run])
        loss = store.metrics_long(summary.run, ["loss"])
    assert summary.run == "run" and len(summary.sources) >= 2
    assert loss.height == 120 and loss["step"].is_unique().all()
    assert "logs the same loss at the same steps as version_0/metrics.csv" in " ".join(
        summary.notes
    )


@pytest.mark.parametrize(
    ("second", "steps"),
    [
        # same steps, other values: a second experiment's TensorBoardLogger folder
        ("tensorboard", range(4, 600, 5)),
        # a new fit() from step 0: another experiment's CSVLogger folder
        ("csv", range(2, 600, 2)),
    ],
)
def test_another_fit_in_a_sibling_lightning_version_stays_a_run_of_its_own(
    tmp_path: Path, tmp_db: Path, second: str, steps: range
) -> None:
    pytest.importorskip("lightning")
    run = tmp_path / "run"
    first_steps = range(4, 600, 5) if second == "tensorboard" else range(10, 931, 10)
    _csv_logger_version(run, 0, first_steps, 3.0)
    write = _tb_logger_version if second == "tensorboard" else _csv_logger_version
    write(run, 1, steps, 4.0)
    assert len(_runs(tmp_db, run)) == 2


def _counting(read: Any, reads: list[str]) -> Any:
    def counted(self: object, *args: Any) -> Any:
        reads.append(Path(args[-1]).name)  # the path is the last argument of both
        return read(self, *args)

    return counted


def test_discovery_reads_each_metric_source_once(
    tmp_path: Path, tmp_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step ranges are read to split the runs; the ingest stores that read, not a second
    one (issue 11: discovery used to read every metric source twice). Nothing is lost or
    stored twice, NaN included."""
    from forensics.ingest.base import readers

    reads: list[str] = []
    for cls in {type(r) for r in readers()}:
        for method in ("read", "read_with"):
            if method in vars(cls):
                monkeypatch.setattr(cls, method, _counting(getattr(cls, method), reads))
    _llmc(tmp_path / "run" / "part1.log", range(0, 1000))
    _llmc(tmp_path / "run" / "part2.log", range(900, 2000))
    (tmp_path / "run" / "other.log").write_text(
        "".join(f"s:{s} trl:{'nan' if s == 7 else '5.0'}\n" for s in range(0, 500))
    )
    with open_store(tmp_db) as store:
        summaries = ingest(store, [tmp_path / "run"])
        other = store.metrics_long("other", ["loss"])
        part1 = store.metrics_long("part1", ["loss"])
    assert sorted(reads) == ["other.log", "part1.log", "part2.log"]
    assert {s.run for s in summaries} == {"part1", "other"}
    assert other.height == 500 and other["value"].is_nan().sum() == 1
    assert part1.height == 2000 and part1["step"].is_unique().all()  # resumed: last kept


def test_one_run_logged_by_two_writers_stays_one(tmp_path: Path, tmp_db: Path) -> None:
    run = tmp_path / "myrun"
    _llmc(run / "main.log", range(0, 300))
    (run / "metrics.jsonl").write_text(
        "".join(f'{{"step": {s}, "grad_norm": 0.5}}\n' for s in range(0, 300))
    )
    assert _runs(tmp_db, run) == {"myrun": ["main.log", "metrics.jsonl"]}


def test_config_and_recorder_folder_belong_to_their_run(tmp_path: Path, tmp_db: Path) -> None:
    root = tmp_path / "sweep"
    _llmc(root / "a" / "train.log", range(0, 200))
    (root / "a" / "config.json").write_text('{"lr": 0.001, "seed": 1}')
    _llmc(root / "b" / "train.log", range(0, 200), loss=4.0)
    rec = root / "b" / "forensics"  # our live-run recorder's folder inside run b
    rec.mkdir(parents=True)
    (rec / "metrics.jsonl").write_text(
        "".join(f'{{"step": {s}, "grad_norm": {1 + s % 5 / 10}}}\n' for s in range(0, 200))
    )
    runs = _runs(tmp_db, root)
    assert runs == {"a": ["config.json", "train.log"], "b": ["metrics.jsonl", "train.log"]}
    assert run_name_for(rec / "metrics.jsonl") == "b"


def test_walk_does_not_leave_the_folder_or_loop(tmp_path: Path, tmp_db: Path) -> None:
    outside = _llmc(tmp_path / "elsewhere" / "secret.log", range(0, 50), loss=9.0)
    root = tmp_path / "run"
    _llmc(root / "train.log", range(0, 100))
    (root / "link_out.log").symlink_to(outside)
    (root / "dir_out").symlink_to(outside.parent, target_is_directory=True)
    (root / "loop").symlink_to(root, target_is_directory=True)
    (root / "again.log").symlink_to(root / "train.log")  # the same file twice: read once
    os.mkfifo(root / "pipe.log")  # reading it would block forever
    with open_store(tmp_db) as store:
        (summary,) = ingest(store, [root])
    assert [Path(s.path).name for s in summary.sources] == ["again.log"] or [
        Path(s.path).name for s in summary.sources
    ] == ["train.log"]
    notes = " ".join(summary.notes)
    assert "outside" in notes and "not followed" in notes
    assert "pipe.log: not a regular file" in notes
    assert "loop" in notes


def test_explicit_run_name_keeps_everything_together(real_logs: Path, tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(real_logs / MEGATRON, folder)
    runs = _runs(tmp_path / "db.duckdb", folder, run="all")
    assert list(runs) == ["all"] and len(runs["all"]) == 6


def test_missing_path_is_a_clear_error(tmp_path: Path, tmp_db: Path) -> None:
    with pytest.raises(Exception, match="no such file or folder"):
        _runs(tmp_db, tmp_path / "nope")


def test_files_of_two_writers_with_disjoint_steps_are_two_runs(
    tmp_path: Path, tmp_db: Path
) -> None:
    folder = tmp_path / "pasted"
    _llmc(folder / "a.log", range(0, 50))
    (folder / "b.log").write_text(
        "".join(f"step {s} | loss 2.5 | lr 1e-4\n" for s in range(5000, 5050))
    )
    assert _runs(tmp_db, folder) == {"a": ["a.log"], "b": ["b.log"]}


def test_mlflow_root_with_two_runs_is_two_runs(tmp_path: Path, tmp_db: Path) -> None:
    mlruns = Path(__file__).resolve().parents[1] / "fixtures" / "mlflow" / "mlruns"
    runs = _runs(tmp_db, mlruns)
    assert sorted(runs) == ["other", "spiky"]


def test_tensorboard_log_dir_with_a_folder_per_run(tmp_path: Path, tmp_db: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    logdir = tmp_path / "tb"
    for name, base in (("run_a", 3.0), ("run_b", 5.0)):
        for split in ("train", "eval"):
            writer = SummaryWriter(str(logdir / name / split))
            for step in range(0, 60):
                writer.add_scalar("loss", base + step % 3 / 10, step)
            writer.close()
    runs = _runs(tmp_db, logdir)
    assert sorted(runs) == ["run_a", "run_b"]
    with open_store(tmp_db) as store:
        loss = store.metrics_long("run_a", ["loss"])
    assert loss.height == 60 and loss["value"].max() < 4


def test_analyze_folder_of_runs_writes_an_index(tmp_path: Path) -> None:
    from forensics.analyze import AnalyzeOptions, analyze

    folder = tmp_path / "pasted"
    _llmc(folder / "a.log", range(0, 300))
    (folder / "b.log").write_text(
        "".join(
            f"step {s} | loss {'nan' if s >= 5040 else 2.5 + s % 3 / 100} | lr 1e-4\n"
            for s in range(5000, 5050)
        )
    )
    out = tmp_path / "out"
    result = analyze(folder, out, options=AnalyzeOptions(replay=False, report=False))
    assert sorted(r.run_id for r in result.runs) == ["a", "b"]
    index = (out / "README.md").read_text()
    assert "2 runs" in index and "1 of them have incidents" in index
    assert index.startswith("# Runs found under pasted") and str(tmp_path) not in index
    row_b = next(line for line in index.splitlines() if line.startswith("| b |"))
    assert "#1 divergent at step 5040" in row_b
    row_a = next(line for line in index.splitlines() if line.startswith("| a |"))
    assert "| none |" in row_a and "| from step 20 (280 of 300 points) |" in row_a  # start-up
    assert index.count("skips\na run's start-up") == 1  # said once, under the table
    assert (out / "a" / "incidents.json").is_file() and (out / "b" / "incidents.json").is_file()


def test_a_folder_of_links_out_of_it_says_why_nothing_was_found(
    tmp_path: Path, tmp_db: Path
) -> None:
    """A folder of symlinks to logs elsewhere (a common way to gather runs) found nothing
    and said only "no metric log found"; the one-line error now names the skipped links."""
    outside = _llmc(tmp_path / "elsewhere" / "a.log", range(0, 50))
    root = tmp_path / "runs"
    root.mkdir()
    (root / "a.log").symlink_to(outside)
    with open_store(tmp_db) as store, pytest.raises(InputError, match=r"1 link\(s\) out of"):
        ingest(store, [root])


def test_a_stage_that_starts_far_after_the_other_ended_is_a_run_of_its_own(
    tmp_path: Path, tmp_db: Path
) -> None:
    """Logged to 1000, then another fit from step 1800: more than half the first's span
    later, so not read as its resume."""
    pytest.importorskip("lightning")
    run = tmp_path / "run"
    _csv_logger_version(run, 0, range(10, 1001, 10), 3.0)
    _csv_logger_version(run, 1, range(1800, 3001, 10), 3.0)
    assert len(_runs(tmp_db, run)) == 2


def test_a_resume_after_a_nan_stretch_is_measured_from_the_last_logged_step(
    tmp_path: Path, tmp_db: Path
) -> None:
    """version_0's loss is finite to 1656 and NaN to 3068 (an fp16 scaler skipping every
    step keeps the weights finite), version_1 resumes at 3152 from a checkpoint saved in
    between: 84 steps after version_0's last row, not 1496 after its last finite value."""
    pytest.importorskip("lightning")
    from lightning.pytorch.loggers import CSVLogger

    run = tmp_path / "run"
    logger = CSVLogger(save_dir=str(run), name="lightning_logs", version=0)
    for s in range(4, 3069, 4):
        logger.log_metrics({"train_loss": 3.0 - s / 4000 if s <= 1656 else float("nan")}, step=s)
    logger.finalize("success")
    _csv_logger_version(run, 1, range(3152, 3801, 4), 3.0)
    with open_store(tmp_db) as store:
        (summary,) = ingest(store, [run])
    note = " ".join(summary.notes)
    assert "continues version_0/metrics.csv from step 3152 (steps 4-3068 then 3152-3800)" in note
    assert "steps 3069-3151 are in neither log" in note
