"""write_report end to end: files, links that resolve, real PNGs, the no-browser fallback."""

from __future__ import annotations

from pathlib import Path

import pytest
from mdcheck import broken_links, relative_links
from pngcheck import content_spread, size

from forensics.report import ReportResult, write_report
from forensics.report.export import find_chromium
from forensics.report.render import TemplateError
from forensics.store import open_store

BROWSER, WHY_NOT = find_chromium()
needs_browser = pytest.mark.skipif(BROWSER is None, reason=f"PNG export impossible: {WHY_NOT}")


def html_only(report_db: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> ReportResult:
    monkeypatch.setenv("FORENSICS_CHROMIUM", "off")
    with open_store(report_db, read_only=True) as store:
        return write_report(store, "llm-13b-bf16", out, warn=lambda _m: None)


def test_layout(full: ReportResult) -> None:
    names = sorted(p.name for p in full.postmortems)
    assert names == ["spike-01.md", "spike-02.md", "spike-03.md"]
    figures = sorted(p.name for p in (full.out_dir / "figures").glob("*.html"))
    assert figures == [
        "run-overview.html",
        "spike-01-act-norms.html",
        "spike-01-metrics.html",
        "spike-01-tokens.html",
        "spike-02-metrics.html",
        "spike-03-metrics.html",
    ]


def test_every_relative_link_resolves(full: ReportResult) -> None:
    for doc in [full.readme, *full.postmortems]:
        assert relative_links(doc.read_text()), doc
        assert not broken_links(doc), f"{doc}: {broken_links(doc)}"


@needs_browser
def test_pngs_are_real_pictures(full: ReportResult) -> None:
    assert full.png and not full.warnings
    for fig in full.figures:
        assert fig.png is not None
        width, height = size(fig.png)
        assert width >= 1000 and height >= 500, (fig.name, width, height)
        assert fig.png.stat().st_size > 20_000, fig.name
        assert content_spread(fig.png) > 5, f"{fig.name} looks blank"
    text = full.postmortems[0].read_text()
    assert "![Spike #1: token histogram of the batch](../figures/spike-01-tokens.png)" in text


def test_html_figures_are_self_contained(full: ReportResult) -> None:
    html = (full.out_dir / "figures" / "run-overview.html").read_text()
    assert (
        "<script src=" not in html.split("Plotly.newPlot")[0].replace('type="text/javascript"', "")
        or "cdn" not in html[:5000]
    )
    assert 'id="run-overview"' in html and "Plotly.newPlot" in html
    # one plotly.min.js per figures folder, shared by every figure (opens offline)
    assert 'src="plotly.min.js"' in html and len(html) < 100_000
    assert (full.out_dir / "figures" / "plotly.min.js").stat().st_size > 1_000_000


def test_without_browser_links_html_and_warns_once(
    report_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = html_only(report_db, tmp_path, monkeypatch)
    assert len(result.warnings) == 1 and "FORENSICS_CHROMIUM" in result.warnings[0]
    assert not list(tmp_path.rglob("*.png")) and not result.png
    for doc in [result.readme, *result.postmortems]:
        text = doc.read_text()
        assert "![" not in text and ".png" not in text
        assert "(interactive figure, HTML)](" in text
        assert not broken_links(doc)


def test_rewrite_removes_stale_incidents(
    report_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "postmortems").mkdir()
    (tmp_path / "figures").mkdir()
    stale = [
        tmp_path / "postmortems" / "spike-09.md",
        tmp_path / "figures" / "spike-09-metrics.png",
    ]
    for p in stale:
        p.write_text("old")
    keep = tmp_path / "notes.md"
    keep.write_text("mine")
    html_only(report_db, tmp_path, monkeypatch)
    assert not any(p.exists() for p in stale) and keep.exists()


def test_user_templates_override_one_file(
    report_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.md.j2").write_text("# Custom summary of {{ run.run }}\n")
    lessons = (Path(__file__).parents[2] / "templates" / "lessons.yaml").read_text()
    (mine / "lessons.yaml").write_text(
        lessons.replace("title: learning rate too high", "title: LR!")
    )
    monkeypatch.setenv("FORENSICS_CHROMIUM", "off")
    with open_store(report_db, read_only=True) as store:
        res = write_report(store, "llm-13b-bf16", tmp_path / "out", templates=mine, warn=print)
    assert res.readme.read_text() == "# Custom summary of llm-13b-bf16\n"
    assert "root cause: **LR!**" in res.postmortems[0].read_text()


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("summary.md.j2", "{% if %}", "summary.md.j2:1"),
        ("summary.md.j2", "{{ run.no_such_field }}", "no_such_field"),
        ("lessons.yaml", "types: [", "not valid YAML"),
    ],
)
def test_broken_user_template_is_a_clear_error(
    report_db: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    text: str,
    message: str,
) -> None:
    (tmp_path / name).write_text(text)
    monkeypatch.setenv("FORENSICS_CHROMIUM", "off")
    with open_store(report_db, read_only=True) as store, pytest.raises(Exception) as err:
        write_report(store, "clean-350m", tmp_path / "out", templates=tmp_path)
    assert message in str(err.value)
    assert isinstance(err.value, TemplateError) or "lessons.yaml" in str(err.value)


def test_missing_templates_folder(report_db: Path, tmp_path: Path) -> None:
    with open_store(report_db, read_only=True) as store, pytest.raises(TemplateError):
        write_report(store, "clean-350m", tmp_path, templates=tmp_path / "nope")


def test_report_after_a_half_read_result(report_db: Path, tmp_path: Path) -> None:
    """A stage before us may leave a DuckDB result open (Store.run_config does)."""
    with open_store(report_db, read_only=True) as store:
        store.run_config("clean-350m")
        result = write_report(store, "clean-350m", tmp_path, png=False)
    assert result.readme.is_file()
