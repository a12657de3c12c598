"""A real Hugging Face Trainer run replayed end to end: its own batches, its own model.

The run (hf_run.py) is trained once per session by the real `Trainer` on CPU: a tiny Llama
built from a LlamaConfig, a local tokenizer, a `save_to_disk` dataset, a checkpoint every 50
steps, one injected batch of rare words. `forensics analyze` on its output folder with the
dataset path must find the spike, rebuild that exact batch, resume the run from its own
checkpoint with its own Trainer, reproduce the logged loss, confirm the rare tokens and refute
other causes; each tier's failure gives one line per probe while the other tiers still run.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

pytest.importorskip("transformers", reason="the [hf] extra is not installed")

from fix_share_checks import check_ordinary_substitutes  # noqa: E402
from hf_run import (  # noqa: E402
    RARE_STEP,
    SEED,
    STEPS,
    build_hf_run,
    build_lm_collator_run,
    build_lr_jump_run,
)

from forensics.cli import app  # noqa: E402
from forensics.store import open_store  # noqa: E402

# the store, the Markdown or the HTML figures are read, never a PNG (conftest.no_png)
pytestmark = pytest.mark.usefixtures("no_png")


@pytest.fixture(scope="session")
def hf_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return build_hf_run(tmp_path_factory.mktemp("hf_run"))


def _analyze(run: Path, dataset: Path | str, out: Path, *extra: str) -> str:
    args = ["analyze", str(run), "--out", str(out), "--dataset", str(dataset), "--device", "cpu"]
    res = CliRunner().invoke(app, [*args, *extra], terminal_width=400)
    assert res.exit_code == 0, res.output
    return res.output


def _replays(db: Path) -> dict[str, tuple[str, dict[str, Any], str]]:
    with open_store(db) as store:
        rows = store.query("SELECT probe, verdict, numbers, detail FROM replays").rows()
    return {p: (v, json.loads(n), d) for p, v, n, d in rows}


@pytest.fixture(scope="module")
def analysis(hf_run: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("hf_out")
    with pytest.MonkeyPatch.context() as mp:  # no_png for a module fixture
        mp.setenv("FORENSICS_CHROMIUM", "off")
        text = _analyze(hf_run["out"], hf_run["dataset"], out)
    # One step off the trend in a 150-step run is a minor incident (docs/definitions.md):
    # the post-mortem these tests read is asked for.
    from forensics.report import write_report

    with open_store(out / "forensics.duckdb", read_only=True) as store:
        run_id = store.query("SELECT run_id FROM incidents")["run_id"][0]
        write_report(store, run_id, out, png=False, min_severity="minor")
    return {"out": out, "text": text, "db": out / "forensics.duckdb"}


def test_rebuilt_batches_are_what_the_trainer_fed(hf_run: dict[str, Any]) -> None:
    from forensics.replay.hf_data import index_steps, load_dataset, load_training_args

    args = load_training_args(hf_run["out"] / "checkpoint-100" / "training_args.bin")
    index = index_steps(args, load_dataset(hf_run["dataset"]), STEPS)
    assert len(hf_run["fed"]) == STEPS
    for step, fed in hf_run["fed"].items():
        assert index.batch(step)[0]["input_ids"].tolist() == fed, step


def test_analyze_replays_the_spike_through_the_runs_own_model(analysis: dict[str, Any]) -> None:
    with open_store(analysis["db"]) as store:
        inc = store.query("SELECT onset_step, peak_step, cause FROM incidents").rows()
        logged = store.query(
            "SELECT value FROM metrics WHERE metric = 'loss' AND step = ?", [RARE_STEP]
        ).item()
    assert [(a <= RARE_STEP <= b, cause) for a, b, cause in inc] == [(True, "rare_tokens")]
    rows = _replays(analysis["db"])
    verdict, numbers, _ = rows["reproduce"]
    assert verdict == "confirmed" and numbers["offending_step"] == RARE_STEP
    assert numbers["checkpoint_step"] == 100 and numbers["steps_replayed"] >= RARE_STEP - 100
    assert abs(numbers["replayed_loss"] - logged) <= 1e-3 * logged
    assert numbers["prefix_max_abs_diff_loss"] <= 1e-4
    assert rows["rare_tokens"][0] == "confirmed"
    assert rows["rare_tokens"][1]["rare_grad_share"] >= 0.5
    assert rows["hardware"][0] == "refuted"  # the deterministic replay reproduces the spike
    assert rows["overflow"][0] == "refuted"  # an fp32 run whose batch stays finite
    assert rows["overflow"][1]["fp32_max_abs_act"]  # one value per decoder layer (hooks)
    data = rows["data_corruption"][1]
    assert data["tokenizer"].endswith("tokenizer.json")
    assert all(w.startswith("r") for w in data["excerpts"][0].split())  # the rare words
    assert "reference_judge" not in rows  # tier 3 ran: no proxy needed
    assert "tier 3 ran" in analysis["text"]


def test_analyze_table_says_the_cause_replay_left(analysis: dict[str, Any]) -> None:
    """The table `analyze` prints is the stored incident after replay (its confidence moved
    from detection's), as README.md and incidents.json say, with the replay verdict."""
    with open_store(analysis["db"]) as store:
        cause, conf, verdict = store.query("SELECT cause, confidence, replay FROM incidents").row(0)
    assert verdict == "confirmed"
    text = " ".join(analysis["text"].split())  # the table folds its cells on a narrow terminal
    assert re.search(rf"{cause} .*\({conf:.2f}\), replay confirmed", text), analysis["text"]


def test_what_to_log_next_leaves_out_what_replay_decided(analysis: dict[str, Any]) -> None:
    """Detection asked for the batch's token statistics (data corruption?) and the loss scale
    (fp16 overflow?), which the Trainer's log does not hold (beta2 it no longer asks for:
    training_args.bin gives it); replay, through the run's own model, refuted both causes:
    the post-mortem no longer asks for them, and the page reads back against the store
    (tests/report/explained.py works out the settled rows itself)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "report"))
    from consistency import check_report

    with open_store(analysis["db"]) as store:
        rows = store.query("SELECT metric, separates, settled_by_replay FROM log_next").rows()
        run_id = store.query("SELECT run_id FROM incidents")["run_id"][0]
        assert check_report(analysis["out"], store, run_id) == []
    assert {(m, sep, done) for m, sep, done in rows} == {
        ("batch_tokens", '["data_corruption"]', True), ("loss_scale", '["fp16_overflow"]', True)
    }  # fmt: skip
    verdicts = _replays(analysis["db"])
    assert verdicts["stale_beta2"][0] == verdicts["overflow"][0] == "refuted"
    (pm,) = (analysis["out"] / "postmortems").glob("spike-*.md")
    assert "What to log next" not in pm.read_text()


def test_sources_list_checkpoints_in_step_order(analysis: dict[str, Any]) -> None:
    """The Trainer's checkpoint-50, -100, -150 are listed as a reader counts steps, not as
    strings sort (checkpoint-100 before checkpoint-50)."""
    (pm,) = (analysis["out"] / "postmortems").glob("spike-*.md")
    line = next(x for x in pm.read_text().splitlines() if x.startswith("Sources: "))
    steps = [int(m) for m in re.findall(r"checkpoint-(\d+)\b", line)]
    assert len(steps) >= 3 and steps == sorted(steps), line


def test_onset_is_the_first_high_loss(analysis: dict[str, Any]) -> None:
    """The rare batch's loss is logged at RARE_STEP and the step before is noise: the onset
    is RARE_STEP, not the point ruptures paired with the jump (its segments hold >= 2
    points), and the post-mortem's excerpt marks that row."""
    with open_store(analysis["db"]) as store:
        ((onset, peak),) = store.query("SELECT onset_step, peak_step FROM incidents").rows()
    assert onset == peak == RARE_STEP
    text = (analysis["out"] / "postmortems" / "spike-01.md").read_text(encoding="utf-8")
    assert f"| {RARE_STEP} | onset, peak |" in text and "at the onset step itself" in text


def test_postmortem_shows_the_decoded_batch(analysis: dict[str, Any]) -> None:
    """The Evidence section names the rows replay decoded, as stored; the page stays short
    and consistent with the store."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "report"))
    from consistency import check_report

    text = (analysis["out"] / "postmortems" / "spike-01.md").read_text(encoding="utf-8")
    stored = _replays(analysis["db"])["data_corruption"][1]
    evidence = text.split("## Evidence")[1].split("## Classification")[0]
    assert f"**What the offending batch held** at step {RARE_STEP} (" in evidence
    for row, words in zip(stored["excerpt_rows"], stored["excerpts"], strict=True):
        assert f"- row {row}: `{words}`" in evidence
    assert len(text.split("<details>")[0].splitlines()) <= 120
    with open_store(analysis["db"]) as store:
        run_id = store.query("SELECT run_id FROM runs").item()
        assert check_report(analysis["out"], store, run_id) == []


def test_skip_advice_names_the_dataset_rows_of_the_batch(
    hf_run: dict[str, Any], analysis: dict[str, Any], tmp_path: Path
) -> None:
    """Replay stores the dataset rows the Trainer's sampler put into the offending step; a
    skip_batch advice on an HF Trainer run names them to drop (the Trainer has no skip flag)
    instead of Megatron's `--skip-train-iteration-range`."""
    from datasets import load_from_disk

    from forensics.report import write_report

    stored = _replays(analysis["db"])["data_corruption"][1]
    rows = stored["dataset_rows"][str(RARE_STEP)]
    ds = load_from_disk(str(hf_run["dataset"]))
    assert sorted(ds[i]["input_ids"] for i in rows) == sorted(hf_run["fed"][RARE_STEP])
    assert set(hf_run["rare_rows"]) <= set(rows)
    db, out = tmp_path / "skip.duckdb", tmp_path / "out"
    shutil.copy(analysis["db"], db)
    with open_store(db) as store:  # the advice a data rule gives (rules/data-corruption-*)
        store.con.execute("UPDATE incidents SET recovery = 'skip_batch'")
        run_id = store.query("SELECT run_id FROM runs").item()
        write_report(store, run_id, out, png=False, min_severity="minor")
    text = " ".join((out / "postmortems" / "spike-01.md").read_text(encoding="utf-8").split())
    assert "skip-train-iteration-range" not in text and "iterations-to-skip" not in text
    drop = "{" + ", ".join(map(str, sorted(rows))) + "}"
    assert f"Skip the k = 1 batch of step {RARE_STEP}. The Hugging Face" in text
    assert f"`drop = {drop}`" in text and "resume_from_checkpoint" in text


def test_batch_size_comes_from_training_args(analysis: dict[str, Any]) -> None:
    """training_args.bin gives the samples per step (8 x 1 x one process): the page says so
    and names the one factor it lacks (the sequence length), instead of 'unknown'."""
    with open_store(analysis["db"], read_only=True) as store:
        run_id = store.query("SELECT run_id FROM runs").item()
        cfg = store.run_config(run_id)
    assert (cfg["per_device_train_batch_size"], cfg["gradient_accumulation_steps"]) == (8, 1)
    assert cfg["world_size"] == 1 and cfg["global_batch_size"] == 8
    assert cfg["world_size_from"].startswith("training_args.bin (one process: local_rank -1")
    text = " ".join((analysis["out"] / "postmortems" / "spike-01.md").read_text().split())
    assert (
        "tokens: sequence length unknown (samples per step: 8 = per_device_train_batch_size 8 × "
        "gradient_accumulation_steps 1 × world size 1 from training_args.bin" in text
    )
    assert "number of GPUs unknown" not in text


def test_optimizer_settings_come_from_training_args(analysis: dict[str, Any]) -> None:
    """The real TrainingArguments (tests/replay/hf_run.py: lr 3e-3, 10 warm-up steps, AdamW's
    default betas, max_grad_norm 1.0, no fp16/bf16): what the cause rules read (beta2 for
    stale-beta2, the peak LR and warm-up for LR-too-high, the clip) is in the run config."""
    with open_store(analysis["db"], read_only=True) as store:
        cfg = store.run_config(store.query("SELECT run_id FROM runs").item())
    assert (cfg["peak_lr"], cfg["beta2"], cfg["grad_clip"]) == (3e-3, 0.999, 1.0)
    assert cfg["warmup_steps"] == 10 and cfg["seed"] == SEED
    assert cfg["lr_scheduler_type"] == "linear"
    assert "fp16" not in cfg and "bf16" not in cfg  # both false: the precision is not claimed


def test_the_vocab_size_comes_from_a_checkpoints_model_config(
    hf_run: dict[str, Any], analysis: dict[str, Any]
) -> None:
    """The output dir has no model config.json (no final save_model), each checkpoint-N/
    has one: its vocab_size gives ln V (the random-token level the cause rules compare a
    spike's loss with); its dtype is the weights', not the run's precision."""
    from hf_run import _vocab

    assert not (hf_run["out"] / "config.json").exists()
    with open_store(analysis["db"], read_only=True) as store:
        cfg = store.run_config(store.query("SELECT run_id FROM runs").item())
    assert cfg["vocab_size"] == len(_vocab())
    assert "precision" not in cfg


def test_unreadable_training_args_is_a_warning(hf_run: dict[str, Any], tmp_path: Path) -> None:
    from forensics.ingest import ingest

    run = _copy_run(hf_run["out"], tmp_path / "run")
    (run / "checkpoint-100" / "training_args.bin").write_bytes(b"not a pickle")
    with open_store(tmp_path / "x.duckdb") as store:
        (summary,) = ingest(store, [run], run="r")
        assert "per_device_train_batch_size" not in store.run_config("r")
    warned = [w for s in summary.sources for w in s.warnings if "training_args.bin" in w]
    assert len(warned) == 1 and "checkpoint-100/training_args.bin: cannot load" in warned[0]


def test_optimizer_counterfactuals_refute_a_rare_batch(analysis: dict[str, Any]) -> None:
    """beta2 and the LR are sane here: the counterfactuals re-run the run's own Trainer from
    checkpoint-100 with beta2 = 0.95 / half the LR, and find no loss the updates added."""
    rows = _replays(analysis["db"])
    for probe in ("stale_beta2", "lr_too_high"):
        verdict, n, detail = rows[probe]
        assert verdict == "refuted", (probe, detail)
        assert "do not produce the spike" in detail
        assert n["start_step"] == 100 and n["steps"][0] == 102 and n["end_step"] >= RARE_STEP
        assert RARE_STEP in n["hard_batch_steps"]  # the rare batch is hard in itself
        # the original re-run reproduces the log: the same added loss, the same LR
        assert n["original_trajectory_excess"] == pytest.approx(n["logged_trajectory_excess"])
        assert n["original_trajectory_excess"] < n["noise_allowance"]
        assert len(n["counterfactual_loss"]) == len(n["steps"])
    assert rows["stale_beta2"][1]["run_beta2"] == 0.999  # read from the restored optimizer
    lr = rows["lr_too_high"][1]
    assert lr["lr_scaled"] == "the logged LR"
    assert lr["counterfactual_lr"] == pytest.approx([0.5 * x for x in lr["lr"]])


def test_lr_jump_is_what_halving_the_lr_removes(tmp_path: Path) -> None:
    """A clean run whose (custom) schedule multiplies the LR by 100 at step 50 only: replay
    follows the logged LR, reproduces the spike at 51, and halving the LR removes most of
    the loss the updates added; rare tokens and beta2 are refuted. Halving a 100x jump still
    leaves a 50x update, so lr_too_high stays inconclusive (the bundled rule also asks the
    updates to come back near their pre-spike size) instead of confirmed."""
    run = build_lr_jump_run(tmp_path, steps=60, save_every=20, jump=50, factor=100.0)
    _analyze(run, tmp_path / "dataset", tmp_path / "out", "--no-report")
    rows = _replays(tmp_path / "out" / "forensics.duckdb")
    repro = rows["reproduce"][1]
    assert rows["reproduce"][0] == "confirmed" and repro["offending_step"] == 51
    assert repro["replayed_loss"] == pytest.approx(repro["logged_loss"], rel=1e-6)
    verdict, n, detail = rows["lr_too_high"]
    assert n["lr"][n["steps"].index(50)] == pytest.approx(100 * 3e-3)
    assert n["original_trajectory_excess"] > 10 * n["noise_allowance"]
    assert n["kept"] < 0.25, detail  # halving the LR removes over 3/4 of the added loss
    assert n["counterfactual_max_update_norm"] < 0.6 * n["original_max_update_norm"]
    assert verdict == "inconclusive" and "not the update blow-up" in detail
    assert rows["stale_beta2"][0] == "refuted" and rows["rare_tokens"][0] == "refuted"


def _copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("checkpoint-150"))
    return dst


def test_no_optimizer_state_and_no_tokenizer_fall_back_to_tiers_1_and_2(
    hf_run: dict[str, Any], tmp_path: Path
) -> None:
    run = _copy_run(hf_run["out"], tmp_path / "run")
    (run / "checkpoint-100" / "optimizer.pt").unlink()
    for tok in run.rglob("tokenizer.json"):
        tok.unlink()
    text = _analyze(run, hf_run["dataset"], tmp_path / "out", "--no-report")
    rows = _replays(tmp_path / "out" / "forensics.duckdb")
    why = "checkpoint-100 has no optimizer.pt"
    for probe in ("reproduce", "hardware", "rare_tokens", "overflow"):
        assert rows[probe][0] == "inconclusive" and why in rows[probe][2], probe
    assert rows["data_corruption"][1]["excerpts_note"].startswith("no tokenizer.json found")
    assert rows["data_corruption"][1]["excerpt_ids"]  # raw ids instead of text
    verdict, numbers, detail = rows["reference_judge"]
    assert detail.startswith("proxy") and numbers["proxy"] is True
    assert "tier 2 ran" in text and why in text


def test_architecture_not_loadable_is_one_line(hf_run: dict[str, Any], tmp_path: Path) -> None:
    from forensics.replay.hf_model import load_model
    from forensics.replay.state import StateUnavailable

    ckpt = shutil.copytree(hf_run["out"] / "checkpoint-100", tmp_path / "checkpoint-100")
    cfg = ckpt / "config.json"
    cfg.write_text(cfg.read_text().replace('"model_type": "llama"', '"model_type": "nosuchlm"'))
    with pytest.raises(StateUnavailable, match="architecture not loadable by transformers") as exc:
        load_model(ckpt, torch.device("cpu"))
    assert "\n" not in str(exc.value)


def test_missing_dataset_gives_one_line_per_probe(analysis: dict[str, Any], tmp_path: Path) -> None:
    db = tmp_path / "copy.duckdb"
    shutil.copy(analysis["db"], db)
    res = CliRunner().invoke(
        app,
        ["replay", "--db", str(db), "--device", "cpu", "--dataset", str(tmp_path / "nowhere")],
        terminal_width=400,
    )
    assert res.exit_code == 0, res.output
    assert "no tier ran" in res.output and "dataset folder missing" in res.output
    rows = _replays(db)
    assert len(rows) == 7
    assert all(d.startswith("not run: batches not rebuilt") for _, _, d in rows.values())


def test_lm_collator_run_is_rebuilt_and_reproduced(tmp_path: Path) -> None:
    """A dataset without labels was fed through DataCollatorForLanguageModeling(mlm=False):
    replay infers that collator, rebuilds it with the checkpoint's tokenizer, gives the ids and
    the -100 pad labels the Trainer fed, and the resumed re-run reproduces the logged losses."""
    from forensics.replay.hf_data import (
        DataUnavailable,
        index_steps,
        load_dataset,
        load_training_args,
        run_collator,
    )
    from forensics.replay.hf_model import rerun

    info = build_lm_collator_run(tmp_path, steps=20, save_every=10)
    ckpt = info["out"] / "checkpoint-10"
    args = load_training_args(ckpt / "training_args.bin")
    ds = load_dataset(info["dataset"])
    collator = run_collator(ds, [ckpt])
    assert type(collator).__name__ == "DataCollatorForLanguageModeling"
    index = index_steps(args, ds, 20, collator)
    for step, (ids, labels) in info["fed"].items():
        batch = index.batch(step)[0]
        assert batch["input_ids"].tolist() == ids and batch["labels"].tolist() == labels, step
    assert any(-100 in row for _, labels in info["fed"].values() for row in labels)
    re = rerun(ckpt, 10, args, ds, 15, 20, torch.device("cpu"), collator=collator)
    state = json.loads((info["out"] / "trainer_state.json").read_text())
    logged = {e["step"]: e["loss"] for e in state["log_history"] if "loss" in e}
    assert [re.rows[t]["loss"] for t in range(11, 21)] == [logged[t] for t in range(11, 21)]
    with pytest.raises(DataUnavailable, match="no labels column"):
        run_collator(ds, [tmp_path / "nowhere"])


def test_a_run_folder_with_only_checkpoint_states_is_analysed(
    hf_run: dict[str, Any], tmp_path: Path
) -> None:
    """`Trainer.train()` writes trainer_state.json only inside each checkpoint-N/ (the folder's
    own comes from `save_state()`, which a crashed or stopped run never calls): the folder's
    metrics are the latest checkpoint's log history, said in a note, and the spike is found."""
    run = tmp_path / "run"
    shutil.copytree(hf_run["out"], run, ignore=shutil.ignore_patterns("trainer_state.json"))
    for ckpt in (50, 100, 150):  # the copy dropped them too: put the checkpoints' own back
        src = hf_run["out"] / f"checkpoint-{ckpt}" / "trainer_state.json"
        shutil.copy(src, run / f"checkpoint-{ckpt}" / "trainer_state.json")
    assert not (run / "trainer_state.json").exists()
    out = tmp_path / "out"
    said = _analyze(run, hf_run["dataset"], out, "--no-replay")
    assert "ingest: " in said and "latest checkpoint, checkpoint-150" in said  # on screen too
    full = json.loads((hf_run["out"] / "checkpoint-150" / "trainer_state.json").read_text())
    logged = {e["step"]: e["loss"] for e in full["log_history"] if "loss" in e}
    with open_store(out / "forensics.duckdb") as store:
        sql = "SELECT step, value FROM metrics WHERE metric = 'loss' ORDER BY step"
        loss = dict(store.query(sql).rows())
        peaks = [r[0] for r in store.query("SELECT peak_step FROM incidents").rows()]
        ckpts = store.query("SELECT count(*) FROM checkpoints").rows()[0][0]
        said = store.query("SELECT warnings FROM sources WHERE kind = 'metrics'").rows()
    assert any("history is read from its latest checkpoint, checkpoint-150" in w
               for (ws,) in said for w in json.loads(ws))  # fmt: skip
    assert loss == pytest.approx(logged)
    assert ckpts == 3
    assert RARE_STEP in peaks


def test_the_trainer_trains_a_substituted_batch_or_skips_an_update(hf_run: dict[str, Any]) -> None:
    """The fix share's run without the trigger through the run's own Trainer (fix_share.py):
    a substituted step trains the other step's batch, from the same model; a skipped step
    logs its loss and makes no update."""
    from forensics.replay.hf_data import index_steps, load_dataset, load_training_args
    from forensics.replay.hf_model import CausalLMProbe, Change, probe_batch, rerun
    from forensics.replay.measure import token_losses

    ckpt, cpu = hf_run["out"] / "checkpoint-100", torch.device("cpu")
    args = load_training_args(ckpt / "training_args.bin")
    dataset = load_dataset(hf_run["dataset"])
    index = index_steps(args, dataset, STEPS)
    t, u = 103, 140
    own = rerun(ckpt, 100, args, dataset, t, t, cpu)
    sub = rerun(ckpt, 100, args, dataset, t, t, cpu, change=Change(batches={t: index.batch(u)}))
    skip = rerun(ckpt, 100, args, dataset, t, t, cpu, change=Change(skip=frozenset({t})))
    assert own.pre is not None
    for step in (101, 102):  # the steps before it are the run's own
        assert sub.rows[step]["loss"] == own.rows[step]["loss"] == skip.rows[step]["loss"]
    with torch.no_grad():
        want = token_losses(CausalLMProbe(own.pre, 0), probe_batch(index.batch(u), cpu)).mean()  # type: ignore[arg-type]
    assert sub.rows[t]["loss"] == pytest.approx(float(want), rel=1e-4)
    assert abs(sub.rows[t]["loss"] - own.rows[t]["loss"]) > 1e-3
    assert skip.rows[t]["loss"] == own.rows[t]["loss"] and skip.rows[t]["update_norm"] == 0.0
    assert own.rows[t]["update_norm"] > 0


def test_the_fix_share_is_measured_through_the_runs_own_trainer(
    analysis: dict[str, Any], hf_run: dict[str, Any], tmp_path: Path, monkeypatch: Any
) -> None:
    """The same measure as the bundled trainer's (fix_share.measure_fix), through the run's
    own Trainer from the checkpoint replay restored. beta2 is not stale here, so its verdict
    is forced to confirmed to reach the fix (what follows a confirmation is under test, not
    the verdict)."""
    from forensics.replay.probes import optimizer

    monkeypatch.setattr(optimizer, "decide_beta2", lambda w: ("confirmed", "forced"))
    db = tmp_path / "copy.duckdb"
    shutil.copy(analysis["db"], db)
    args = ["replay", "--db", str(db), "--dataset", str(hf_run["dataset"]), "--device", "cpu"]
    res = CliRunner().invoke(app, args, terminal_width=400)
    assert res.exit_code == 0, res.output
    verdict, n, detail = _replays(db)["stale_beta2"]
    assert verdict == "confirmed"
    assert n["fix_checkpoint_step"] == 100 and RARE_STEP in n["fix_hard_steps"]
    check_ordinary_substitutes(n)
    with open_store(db) as store:
        logged = dict(store.query("SELECT step, value FROM metrics WHERE metric = 'loss'").rows())
    assert n["fix_original_loss"] == pytest.approx([logged[t] for t in n["fix_steps"]], rel=1e-3)
    assert "the run without the trigger (batches" in detail and "replaced by the ordinary" in detail
