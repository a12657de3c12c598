"""`forensics demo` for real, on the bundled sample runs: the README's main command.

Every injected incident (truth.json) gets a post-mortem whose incident starts at the
injected step and names the injected cause, confirmed by replay; the clean run gets none;
every written document is free of template leaks and its links resolve. About a minute on
two CPU cores (seven runs analysed, replayed and reported).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from mdcheck import broken_links, leaks
from replay_portability import departed
from typer.testing import CliRunner

from forensics.cli import app
from forensics.report.demo import same_incident
from forensics.report.locate import sample_logs_dir

ONSET_SLACK = 25  # steps between the injected step and the detected onset


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "forensics-demo"
    result = CliRunner().invoke(app, ["demo", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"Open {out / 'README.md'}" in result.stdout
    return out


def scenarios() -> list[str]:
    return sorted(p.parent.name for p in sample_logs_dir().glob("*/truth.json"))


def expected(scenario: str) -> list[dict[str, object]]:
    truth = json.loads((sample_logs_dir() / scenario / "truth.json").read_text())
    return list(truth["expected"])


@pytest.mark.slow
@pytest.mark.parametrize("scenario", scenarios())
def test_a_postmortem_per_injected_incident(demo_out: Path, scenario: str) -> None:
    found = json.loads((demo_out / scenario / "incidents.json").read_text())["incidents"]
    postmortems = sorted((demo_out / scenario / "postmortems").glob("spike-*.md"))
    assert len(postmortems) == len(found), (scenario, postmortems)
    want = expected(scenario)
    if not want:
        assert found == [], f"clean run {scenario} has incidents: {found}"
        return
    for truth in want:
        onset = int(str(truth["onset_step"]))
        near = [i for i in found if same_incident(onset, i, ONSET_SLACK)]
        assert near, f"{scenario}: no incident near step {onset}: {found}"
        assert near[0]["cause"] == truth["cause"], (scenario, near[0])
        if near[0]["replay"] != "confirmed":
            probes = _replays(demo_out / scenario, near[0]["id"])
            assert departed(scenario, probes), (scenario, near[0], probes)
        text = postmortems[found.index(near[0])].read_text()
        assert f"onset at step {near[0]['onset_step']}" in text


def _replays(run_out: Path, incident_id: int) -> list[tuple[str, str, str]]:
    """The stored (probe, verdict, detail) rows of one incident of a demo run."""
    with duckdb.connect(str(run_out / "forensics.duckdb"), read_only=True) as con:
        rows = con.execute(
            "SELECT probe, verdict, detail FROM replays WHERE incident_id = ?", [incident_id]
        ).fetchall()
    return [(str(p), str(v), str(d)) for p, v, d in rows]


@pytest.mark.slow
def test_demo_documents_render_cleanly(demo_out: Path) -> None:
    docs = [demo_out / "README.md", *demo_out.glob("*/README.md"), *demo_out.glob("*/*/*.md")]
    assert len(docs) >= 1 + 2 * len(scenarios()) - 1
    for doc in docs:
        text = doc.read_text()
        assert not leaks(text), (doc, leaks(text))
        assert not broken_links(doc), (doc, broken_links(doc))
    index = (demo_out / "README.md").read_text()
    for scenario in scenarios():
        assert f"| `{scenario}` |" in index


@pytest.mark.slow
def test_demo_is_consistent_small_and_on_one_screen(demo_out: Path) -> None:
    """Issue 11: the checker passes on every demo run; each post-mortem is <= 120 lines
    before its appendix; one plotly.min.js for the whole demo; <= 25 MB in all; the index
    marks where what was found differs from what was injected."""
    from consistency import check_report

    from forensics.store import open_store

    for scenario in scenarios():
        with open_store(demo_out / scenario / "forensics.duckdb", read_only=True) as store:
            assert check_report(demo_out / scenario, store, scenario) == [], scenario
        for pm in (demo_out / scenario / "postmortems").glob("spike-*.md"):
            screen = pm.read_text().split("<details>")[0]
            assert len(screen.splitlines()) <= 120, pm
    assert [p.name for p in demo_out.rglob("plotly.min.js")] == ["plotly.min.js"]
    for html in demo_out.rglob("*.html"):
        assert html.stat().st_size <= 100_000, html
    total = sum(p.stat().st_size for p in demo_out.rglob("*") if p.is_file())
    assert total <= 25_000_000, total
    index = (demo_out / "README.md").read_text()
    assert "| yes |" in index  # agreeing runs are marked too, not only the differing ones


@pytest.mark.slow
def test_lr_too_high_spikes_are_not_called_rare_token_batches(demo_out: Path) -> None:
    """The lr_too_high sample replays off its log on any other CPU (replay_portability), so
    the model-state probes conclude nothing; yet its extra spikes' batches are ordinary, and
    the tokens alone say so: rare_tokens is refuted on the data (`state_free`), and no
    incident of the run is stated a rare-token batch (1021 read "rare-token batch, 85%")."""
    run_out = demo_out / "lr_too_high"
    found = json.loads((run_out / "incidents.json").read_text())["incidents"]
    assert len(found) >= 2 and all(i["cause"] != "rare_tokens" for i in found), found
    with duckdb.connect(str(run_out / "forensics.duckdb"), read_only=True) as con:
        rows = con.execute(
            "SELECT incident_id, verdict, detail, numbers FROM replays WHERE probe = 'rare_tokens'"
        ).fetchall()
    assert len(rows) == len(found)
    for n, verdict, detail, numbers in rows:
        assert verdict == "refuted" and json.loads(numbers)["state_free"], (n, detail)
        assert "rare-token positions of" in detail and "would be" not in detail, (n, detail)
