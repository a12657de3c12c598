"""Real public logs (../shared/real_logs, see SOURCES.md): Megatron golden values and HF state.

Counts are computed independently here with plain `json`, and checked against what the
store holds after a full ingest.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from forensics.ingest import ingest
from forensics.store import Store, open_store

MEGATRON = "NVIDIA__Megatron-LM"
PREFIX = "tests__functional_tests__test_cases__"
MIXTRAL_A100 = (
    PREFIX + "mixtral__mixtral_8x7b_alltoall_tp2pp4ep4_release__golden_values_lts_dgx_a100.json"
)
MIXTRAL_H100 = (
    PREFIX + "mixtral__mixtral_8x7b_alltoall_tp2pp4ep4_release__golden_values_dev_dgx_h100.json"
)
RESUME = PREFIX + "gpt__gpt3_mcore_tp1_pp2_resume_torch_dist__golden_values_lts.json"
RESUME_2ND = (
    PREFIX + "gpt__gpt3_mcore_tp1_pp2_resume_torch_dist__golden_values_lts_dgx_a100_2nd.json"
)

# Spikes quoted in SOURCES.md, section 1.2.
QUOTED: dict[str, dict[int, float]] = {
    MIXTRAL_A100: {4045: 2.44079, 4050: 3.84222, 4055: 5.11474, 4060: 2.59913, 4070: 2.4832},
    MIXTRAL_H100: {3800: 2.78664, 3850: 3.41116, 3855: 2.64597, 3860: 2.53525, 4260: 3.025},
    RESUME: {76: 9.26137, 77: 10.17615, 78: 9.85644, 79: 9.50644},
    RESUME_2ND: {51: 10.2013, 77: 10.17614},
}


def golden_files(root: Path) -> list[Path]:
    files = sorted((root / MEGATRON).glob("*golden_values*.json"))
    assert len(files) == 6, files
    return files


def lm_loss_expected(path: Path) -> tuple[dict[int, float], set[int]]:
    """Numeric `lm loss` entries and the steps holding the string "nan", with plain json."""
    values = json.loads(path.read_text())["lm loss"]["values"]
    numeric = {int(k): v for k, v in values.items() if not isinstance(v, str)}
    return numeric, {int(k) for k, v in values.items() if v == "nan"}


def stored(store: Store, run: str, raw_name: str) -> dict[int, float]:
    rows = store.query(
        "SELECT step, value FROM metrics WHERE run_id = ? AND raw_name = ? ORDER BY step",
        [run, raw_name],
    ).rows()
    return dict(rows)


@pytest.fixture(scope="module")
def golden_db(real_logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("golden") / "golden.duckdb"
    with open_store(db) as store:
        for i, path in enumerate(golden_files(real_logs)):
            ingest(store, [path], run=f"g{i}")
    return db


def test_every_golden_file_stores_exactly_its_numeric_lm_loss(
    real_logs: Path, golden_db: Path
) -> None:
    with open_store(golden_db, read_only=True) as store:
        for i, path in enumerate(golden_files(real_logs)):
            numeric, _ = lm_loss_expected(path)
            got = stored(store, f"g{i}", "lm loss")
            assert got.keys() == numeric.keys(), path.name
            assert all(got[s] == v for s, v in numeric.items()), path.name
            assert store.metrics_long(f"g{i}", ["loss"]).height == len(numeric)


def test_quoted_spike_values(real_logs: Path, golden_db: Path) -> None:
    index = {p.name: i for i, p in enumerate(golden_files(real_logs))}
    with open_store(golden_db, read_only=True) as store:
        for name, quoted in QUOTED.items():
            got = stored(store, f"g{index[name]}", "lm loss")
            for step, value in quoted.items():  # SOURCES.md rounds a few values (3.025)
                assert got[step] == pytest.approx(value, abs=5e-4), (name, step)
        assert stored(store, f"g{index[MIXTRAL_A100]}", "lm loss")[4055] == 5.11474


def test_nan_strings_are_missing_steps(real_logs: Path, golden_db: Path) -> None:
    index = {p.name: i for i, p in enumerate(golden_files(real_logs))}
    path = real_logs / MEGATRON / MIXTRAL_A100
    _, nan_steps = lm_loss_expected(path)
    assert len(nan_steps) == 1707 and min(nan_steps) == 13555  # as SOURCES.md says
    with open_store(golden_db, read_only=True) as store:
        got = stored(store, f"g{index[MIXTRAL_A100]}", "lm loss")
        assert not got.keys() & nan_steps and not any(math.isnan(v) for v in got.values())
        resumed = stored(store, f"g{index[RESUME_2ND]}", "lm loss")
        assert min(resumed) == 51  # steps 1-50 were not run in the resumed process
        mtp = store.query("SELECT DISTINCT raw_name FROM metrics WHERE raw_name = 'mtp_1 loss'")
        assert mtp.height == 1


def test_hf_trainer_state_train_and_eval_apart(real_logs: Path, tmp_db: Path) -> None:
    path = real_logs / "aigoncharov__trainer_state_viz" / "trainer_state.json"
    history = json.loads(path.read_text())["log_history"]
    train = {e["step"]: e["loss"] for e in history if "loss" in e}
    evals = [e for e in history if "eval_g0_loss" in e]
    assert len(train) == 30
    with open_store(tmp_db) as store:
        ingest(store, [path], run="hf")
        ingest(store, [path], run="hf")
        loss = store.metrics_long("hf", ["loss"])
        assert dict(loss.select("step", "value").rows()) == train
        assert stored(store, "hf", "eval_g0_loss") == {e["step"]: e["eval_g0_loss"] for e in evals}
        assert store.metrics_long("hf", ["val_loss"]).height == 0  # eval_gN_loss stay apart


def test_nan_string_warning_says_where_the_holes_are(real_logs: Path, tmp_path: Path) -> None:
    # before: "1707 "nan" entries (first at step 13555, last at step 24000) hold no data: the
    # run stopped early or had not reached them", on a run that logged up to step 23405:
    # four holes in the middle, which the run overview's line crosses
    with open_store(tmp_path / "g.duckdb") as store:
        (summary,) = ingest(store, [real_logs / MEGATRON / MIXTRAL_A100])
    (warning,) = [w for w in summary.sources[0].warnings if "hold no data" in w]
    assert '1707 "nan" entries hold no data' in warning
    assert "4 gap(s) inside the run (steps 13555-15230, steps 15805-17520, " in warning
    assert "steps 23410-24000 after its last value at step 23405" in warning
    assert "stopped early or had not reached" not in warning
    with open_store(tmp_path / "r.duckdb") as store:
        (summary,) = ingest(store, [real_logs / MEGATRON / RESUME_2ND])
    (warning,) = [w for w in summary.sources[0].warnings if "hold no data" in w]
    assert warning.endswith(
        '50 "nan" entries hold no data: steps 1-50 before its first value at step 51'
    )
