"""Every rendered document is complete: all sections, none empty, no template leaks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mdcheck import POSTMORTEM_SECTIONS, SUMMARY_SECTIONS, bad_tables, leaks, sections
from reportdb import RUNS, render_docs

from forensics.store import open_store
from forensics.store.db import Store

# the store, the Markdown or the HTML figures are read, never a PNG (conftest.no_png)
pytestmark = pytest.mark.usefixtures("no_png")


@pytest.fixture(scope="module")
def docs(report_db: Path) -> dict[str, dict[str, str]]:
    with open_store(report_db, read_only=True) as store:
        return {run: render_docs(store, run) for run in RUNS}


def postmortems(docs: dict[str, dict[str, str]]) -> list[tuple[str, str, str]]:
    return [
        (run, rel, text)
        for run, d in docs.items()
        for rel, text in d.items()
        if rel.startswith("postmortems/")
    ]


def test_every_incident_type_is_covered(docs: dict[str, dict[str, str]]) -> None:
    heads = " ".join(text.splitlines()[2] for _, _, text in postmortems(docs))
    for kind in ("type 1 — recoverable", "type 2 — lingering", "type 3 — divergent"):
        assert kind in heads


def test_postmortems_have_every_section_filled(docs: dict[str, dict[str, str]]) -> None:
    for run, rel, text in postmortems(docs):
        found = sections(text)
        assert list(found) == POSTMORTEM_SECTIONS, f"{run}/{rel}: sections {list(found)}"
        for title, body in found.items():
            assert body.strip(), f"{run}/{rel}: section {title!r} is empty"


def test_summaries_have_every_section_filled(docs: dict[str, dict[str, str]]) -> None:
    for run, d in docs.items():
        found = sections(d["README.md"])
        assert list(found) == SUMMARY_SECTIONS, f"{run}: sections {list(found)}"
        assert all(body.strip() for body in found.values()), run


@pytest.mark.parametrize("run", RUNS)
def test_no_template_leaks_and_tables_are_rectangular(
    docs: dict[str, dict[str, str]], run: str
) -> None:
    for rel, text in docs[run].items():
        assert not leaks(text), f"{run}/{rel}: {leaks(text)}"
        assert not bad_tables(text), f"{run}/{rel}: ragged rows {bad_tables(text)}"


def test_heading_has_wall_clock_time_or_step(docs: dict[str, dict[str, str]]) -> None:
    heading = {(run, rel): text.splitlines()[0] for run, rel, text in postmortems(docs)}
    assert heading[("gpt-1b-fp16", "postmortems/spike-01.md")] == (
        "# Spike #1 — 2024-03-05 11:34 UTC"
    )
    assert heading[("llm-13b-bf16", "postmortems/spike-01.md")] == "# Spike #1 — step 2500"
    for line in heading.values():
        assert re.fullmatch(r"# Spike #\d+ — (\d{4}-\d\d-\d\d \d\d:\d\d UTC|step \d+)", line)


def test_a_run_without_incidents_says_so(docs: dict[str, dict[str, str]]) -> None:
    readme = docs["clean-350m"]["README.md"]
    # its start-up was not screened (screen_coverage): never "clean" without the caveat
    assert "**No incident was detected in the screened steps of this run**" in readme
    assert "**Screening:** the first 5 of 31 logged loss points (steps 0-400" in readme
    assert list(docs["clean-350m"]) == ["README.md"]


def test_summary_lists_and_links_every_incident(store: Store) -> None:
    readme = render_docs(store, "gpt-1b-fp16")["README.md"]
    for n in (1, 2, 3):
        assert f"[spike-0{n}.md](postmortems/spike-0{n}.md)" in readme


def test_cost_says_what_is_unknown(docs: dict[str, dict[str, str]]) -> None:
    cost = sections(docs["llm-13b-bf16"]["postmortems/spike-02.md"])["Cost of incident"]
    assert "| GPU-hours | unknown |" in cost
    assert "pass `--world-size N`" in cost
    known = sections(docs["gpt-1b-fp16"]["postmortems/spike-01.md"])["Cost of incident"]
    assert "× 64 GPUs" in known and "$2.50/GPU-hour" in known


def test_competing_hypotheses_cite_replay_refutation(docs: dict[str, dict[str, str]]) -> None:
    text = sections(docs["gpt-1b-fp16"]["postmortems/spike-01.md"])["Classification"]
    assert "| refuted by replay | `fresh_optimizer`:" in text


def test_missing_fp16_metric_asked_only_for_fp16(docs: dict[str, dict[str, str]]) -> None:
    assert "`loss_scale`" not in sections(docs["llm-13b-bf16"]["README.md"])["Metrics coverage"]
    assert "`param_norm`" in sections(docs["llm-13b-bf16"]["README.md"])["Metrics coverage"]


XTUNER_658 = (
    "2024/05/07 11:45:16 - mmengine - INFO - Iter(train) [ 510/2046]  lr: 1.7590e-04  eta: "
    "1:25:37  time: 22.5450  data_time: 19.6772  memory: 15266  loss: 0.6919  grad_norm: nan\n"
)  # https://github.com/InternLM/xtuner/issues/658: the grad norm is NaN on every line


def test_a_grad_norm_nan_all_along_did_not_turn_nan_with_the_incident(tmp_path: Path) -> None:
    """The page said "The gradient norm turned NaN/Inf at step 1190" for a loss spike at 1200
    of a run whose grad norm (fp16 AMP, xtuner) was NaN on every logged line."""
    from forensics.analyze import AnalyzeOptions, analyze

    lines = [XTUNER_658]
    for it in range(520, 2050, 10):
        loss = {1200: 2.8412, 1210: 1.9071, 1220: 1.1032}.get(it, 0.66 + 0.01 * (it % 3))
        lines.append(
            XTUNER_658.replace("[ 510/2046]", f"[{it:>4}/2046]").replace(
                "loss: 0.6919", f"loss: {loss:.4f}"
            )
        )
    run = tmp_path / "xtuner"
    run.mkdir()
    (run / "20240507_114500.log").write_text("".join(lines))
    out = tmp_path / "out"
    analyze(run, out, options=AnalyzeOptions(replay=False, min_severity="minor"))
    pages = [p.read_text() for p in sorted((out / "postmortems").glob("*.md"))]
    (page,) = [p for p in pages if "at step 1200" in p or "onset at step 1200" in p]
    assert "turned NaN/Inf" not in page
    # NaN at every step with a finite loss: a logger that does not compute it (not read)
    assert "The gradient norm is NaN/Inf at 154 of its 154 logged steps (from step 510)" in page
