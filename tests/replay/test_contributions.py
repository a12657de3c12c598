"""Trigger and amplifier: when replay confirms a batch cause and an optimizer cause, the
incident states the one whose fix prevents it (the amplifier) and `contributions` keeps both
with their role and the share of the damage each removes (forensics/replay/verdicts.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forensics.replay.verdicts import apply_verdicts
from forensics.store import Store, open_store

RUN = "r"


def _store(
    tmp_path: Path, cause: str, conf: float, findings: dict[str, tuple[bool, float]]
) -> Store:
    store = open_store(tmp_path / "c.duckdb")
    store.con.execute(
        "INSERT INTO incidents (run_id, incident_id, metric, onset_step, peak_step, cause, "
        "confidence, recovery, evidence) VALUES (?, 1, 'loss', 150, 150, ?, ?, 'continue', '[]')",
        [RUN, cause, conf],
    )
    for c, (hit, fconf) in findings.items():
        store.con.execute(
            "INSERT INTO findings (run_id, incident_id, rule_id, cause, triggered, confidence, "
            "recovery, evidence) VALUES (?, 1, ?, ?, ?, ?, NULL, '[]')",
            [RUN, c.replace("_", "-"), c, hit, fconf],
        )
    return store


def _replay(store: Store, probe: str, hyp: str, verdict: str, numbers: dict[str, Any]) -> None:
    store.con.execute(
        "INSERT INTO replays (run_id, incident_id, probe, hypothesis, verdict, numbers, detail) "
        "VALUES (?, 1, ?, ?, ?, ?, ?)",
        [RUN, probe, hyp, verdict, json.dumps(numbers), f"{probe} says {verdict}"],
    )


# The numbers the probes store (names as in probes/rare_tokens.py and counterfactual.py).
RARE = {"loss": 11.2, "control_loss": 4.1, "logged_excess": 7.1}
BETA2 = {"kept": 0.11}
LR = {"kept": 0.3}


def _incident(store: Store) -> dict[str, Any]:
    row = store.query("SELECT cause, confidence, replay, evidence FROM incidents").to_dicts()[0]
    row["evidence"] = {e["key"]: e for e in json.loads(row["evidence"])}
    return row


def _contribs(store: Store) -> dict[str, tuple[str, float | None, str]]:
    rows = store.query("SELECT cause, role, share_removed, probe FROM contributions").to_dicts()
    return {r["cause"]: (r["role"], r["share_removed"], r["probe"]) for r in rows}


def test_confirmed_trigger_and_amplifier_state_the_amplifier(tmp_path: Path) -> None:
    # The case: detection says rare tokens (0.5); replay confirms the rare-token batch
    # and beta2 = 0.95 removing 89% of the added loss.
    store = _store(tmp_path, "rare_tokens", 0.5, {"rare_tokens": (True, 0.5)})
    _replay(store, "rare_tokens", "rare_tokens", "confirmed", RARE)
    _replay(store, "stale_beta2", "stale_beta2", "confirmed", BETA2)
    _replay(store, "lr_too_high", "lr_too_high", "refuted", LR)
    apply_verdicts(store, RUN)
    inc = _incident(store)
    assert (inc["cause"], inc["replay"]) == ("stale_beta2", "confirmed")
    assert inc["confidence"] == 0.75  # the pair's stronger: rare tokens 0.5 confirmed -> 0.75
    got = _contribs(store)
    assert got["stale_beta2"][:2] == ("amplifier", 0.89)
    assert got["rare_tokens"][0] == "trigger"
    assert abs(got["rare_tokens"][1] - (11.2 - 4.1) / 7.1) < 1e-9
    assert "lr_too_high" not in got  # refuted: no contribution
    roles = inc["evidence"]["replay.roles"]
    assert [(k["cause"], k["role"]) for k in roles["value"]] == [
        ("stale_beta2", "amplifier"), ("rare_tokens", "trigger"),
    ]  # fmt: skip
    assert "amplifier stale_beta2" in roles["note"] and "89%" in roles["note"]
    # Applying again (a second `forensics replay`) gives the same rows, not duplicates.
    apply_verdicts(store, RUN)
    assert len(store.query("SELECT * FROM contributions")) == 2
    assert _incident(store)["cause"] == "stale_beta2"


def test_an_amplifier_whose_fix_alone_removes_less_than_half_is_not_stated(
    tmp_path: Path,
) -> None:
    """Issue 15: the stale_beta2 probe's reset counterfactual removed 88-100% where the fix
    itself (beta2 = 0.95, no reset) removed 26-44% per the simulator's truth, so the incident
    stated beta2 where its fix would not have prevented it. The share and the choice now use
    the fix alone (`kept_plain`); the amplifier is still stored with its role."""
    store = _store(tmp_path, "rare_tokens", 0.5, {"rare_tokens": (True, 0.5)})
    _replay(store, "rare_tokens", "rare_tokens", "confirmed", RARE)
    _replay(store, "stale_beta2", "stale_beta2", "confirmed", {"kept": 0.11, "kept_plain": 0.7})
    apply_verdicts(store, RUN)
    inc = _incident(store)
    assert (inc["cause"], inc["replay"]) == ("rare_tokens", "confirmed")
    got = _contribs(store)
    assert got["stale_beta2"][0] == "amplifier" and abs(got["stale_beta2"][1] - 0.3) < 1e-9
    roles = inc["evidence"]["replay.roles"]["value"]
    assert [k["cause"] for k in roles] == ["rare_tokens", "stale_beta2"]  # the stated one first
    assert "beta2 = 0.95 alone" in roles[1]["measure"]
    # the same fix removing 60% states beta2, as before
    _replay(store, "stale_beta2", "stale_beta2", "confirmed", {"kept": 0.11, "kept_plain": 0.4})
    store.con.execute("DELETE FROM replays WHERE probe = 'stale_beta2' AND numbers LIKE '%0.7%'")
    apply_verdicts(store, RUN)
    assert _incident(store)["cause"] == "stale_beta2"


@pytest.mark.parametrize("detected", ["stale_beta2", "rare_tokens"])
def test_an_optimizer_setting_whose_fix_removes_none_of_the_damage_amplified_nothing(
    tmp_path: Path, detected: str
) -> None:
    """Scenario draw 369036 at step 160: the stale_beta2 probe confirmed (the in-place reset
    removed 53% of the added loss), but beta2 = 0.95 alone from the checkpoint before did
    more harm (-82%, stored as 0). It is no amplifier of the rare-token batch: no row, no
    "Trigger and amplifier" line, and the batch is the stated cause even where detection had
    named beta2."""
    store = _store(tmp_path, detected, 0.8, {detected: (True, 0.8)})
    _replay(store, "rare_tokens", "rare_tokens", "confirmed", RARE)
    _replay(store, "stale_beta2", "stale_beta2", "confirmed",
            {"kept": 0.47, "fix_share_removed": -0.82})  # fmt: skip
    apply_verdicts(store, RUN)
    inc = _incident(store)
    assert (inc["cause"], inc["replay"]) == ("rare_tokens", "confirmed")
    assert _contribs(store) == {"rare_tokens": ("cause", (11.2 - 4.1) / 7.1, "rare_tokens")}
    assert "replay.roles" not in inc["evidence"]
    rows = store.query("SELECT cause, replay FROM findings").rows()
    assert ("stale_beta2", "confirmed") in rows or detected == "rare_tokens"
    # a fix that removes a little is still an amplifier, named beside the trigger
    store.con.execute("DELETE FROM replays WHERE probe = 'stale_beta2'")
    _replay(store, "stale_beta2", "stale_beta2", "confirmed",
            {"kept": 0.47, "fix_share_removed": 0.1})  # fmt: skip
    apply_verdicts(store, RUN)
    assert _contribs(store)["stale_beta2"][:2] == ("amplifier", 0.1)
    assert _incident(store)["cause"] == "rare_tokens"


def test_the_largest_share_removed_is_the_stated_amplifier(tmp_path: Path) -> None:
    store = _store(tmp_path, "rare_tokens", 0.7, {"rare_tokens": (True, 0.7)})
    _replay(store, "rare_tokens", "rare_tokens", "confirmed", RARE)
    _replay(store, "stale_beta2", "stale_beta2", "confirmed", {"kept": 0.4})
    _replay(store, "lr_too_high", "lr_too_high", "confirmed", {"kept": 0.05})
    apply_verdicts(store, RUN)
    assert _incident(store)["cause"] == "lr_too_high"
    assert _contribs(store)["stale_beta2"][0] == "amplifier"


def test_a_lone_confirmed_cause_is_stored_as_the_cause(tmp_path: Path) -> None:
    store = _store(tmp_path, "rare_tokens", 0.8, {"rare_tokens": (True, 0.8)})
    _replay(store, "rare_tokens", "rare_tokens", "confirmed", RARE)
    _replay(store, "stale_beta2", "stale_beta2", "refuted", {"kept": 0.95})
    _replay(store, "lr_too_high", "lr_too_high", "inconclusive", {"kept": 0.6})
    apply_verdicts(store, RUN)
    inc = _incident(store)
    assert (inc["cause"], inc["replay"]) == ("rare_tokens", "confirmed")
    assert _contribs(store) == {"rare_tokens": ("cause", (11.2 - 4.1) / 7.1, "rare_tokens")}
    assert "replay.roles" not in inc["evidence"]  # no pair: the template line stays out


def test_an_amplifier_without_a_trigger_is_the_sole_cause(tmp_path: Path) -> None:
    store = _store(tmp_path, "lr_too_high", 0.65, {"lr_too_high": (True, 0.65)})
    _replay(store, "lr_too_high", "lr_too_high", "confirmed", LR)
    _replay(store, "rare_tokens", "rare_tokens", "refuted", RARE)
    apply_verdicts(store, RUN)
    assert _incident(store)["cause"] == "lr_too_high"
    role, share, _ = _contribs(store)["lr_too_high"]
    assert role == "cause" and abs(share - 0.7) < 1e-9


def test_nothing_confirmed_stores_no_contribution(tmp_path: Path) -> None:
    store = _store(tmp_path, "stale_beta2", 0.6, {"stale_beta2": (True, 0.6)})
    _replay(store, "stale_beta2", "stale_beta2", "refuted", {"kept": 0.9})
    apply_verdicts(store, RUN)
    assert _incident(store)["cause"] == "unknown"
    assert _contribs(store) == {}


def test_shares_without_a_measure_are_null(tmp_path: Path) -> None:
    # A data-corruption trigger decides on a signature, not a counterfactual: no share.
    store = _store(tmp_path, "data_corruption", 0.7, {"data_corruption": (True, 0.7)})
    _replay(store, "data_corruption", "data_corruption", "confirmed", {"corrupt_steps": [150]})
    _replay(store, "lr_too_high", "lr_too_high", "confirmed", {"kept": None})
    apply_verdicts(store, RUN)
    got = _contribs(store)
    assert got["data_corruption"] == ("trigger", None, "data_corruption")
    assert got["lr_too_high"] == ("amplifier", None, "lr_too_high")


def _finding(store: Store, cause: str) -> dict[str, Any]:
    row = store.query(
        "SELECT replay, confidence, evidence FROM findings WHERE cause = ?", [cause]
    ).to_dicts()[0]
    row["evidence"] = {e["key"]: e for e in json.loads(row["evidence"])}
    return row


def test_a_confirmed_child_confirms_its_parent_and_is_named(tmp_path: Path) -> None:
    # A loss-only log said batch_driven; replay confirms rare tokens and refutes corruption:
    # the stated cause becomes the child, and the parent reads confirmed, never ruled out.
    store = _store(
        tmp_path, "batch_driven", 0.7,
        {"batch_driven": (True, 0.7), "rare_tokens": (False, 0.3), "data_corruption": (False, 0.2)},
    )  # fmt: skip
    _replay(store, "rare_tokens", "rare_tokens", "confirmed", RARE)
    _replay(store, "data_corruption", "data_corruption", "refuted", {})
    apply_verdicts(store, RUN)
    assert _incident(store)["cause"] == "rare_tokens"
    parent = _finding(store, "batch_driven")
    assert parent["replay"] == "confirmed"
    assert "rare_tokens confirmed" in parent["evidence"]["replay.children"]["note"]


def test_a_parent_whose_children_are_all_refuted_is_refuted(tmp_path: Path) -> None:
    # Replay refutes the stated rare tokens and corruption: batch_driven may not take over.
    store = _store(
        tmp_path, "rare_tokens", 0.6,
        {"batch_driven": (True, 0.55), "rare_tokens": (True, 0.6), "data_corruption": (False, 0.2)},
    )  # fmt: skip
    _replay(store, "rare_tokens", "rare_tokens", "refuted", RARE)
    _replay(store, "data_corruption", "data_corruption", "refuted", {})
    apply_verdicts(store, RUN)
    assert _finding(store, "batch_driven")["replay"] == "refuted"
    assert _incident(store)["cause"] == "unknown"


def test_a_share_is_never_rounded_across_the_line_that_states_the_amplifier() -> None:
    # 630434@153 (stale_beta2, 300 steps): beta2's fix removed 49.8%, so the trigger was
    # stated; "removes 50%" beside it would read as a page contradicting itself
    from forensics.replay.verdicts import PREVENTS, share_text
    from forensics.report.fmt import FILTERS

    assert PREVENTS == 0.5
    assert share_text(0.498) == "49.8%" and share_text(0.49996) == "49.996%"
    assert share_text(0.5) == "50%" and share_text(0.5004) == "50%"
    assert share_text(0.67) == "67%" and share_text(-0.3) == "-30%"
    assert FILTERS["share"](0.498) == "49.8%" and FILTERS["share"](None) == "n/a"
