"""Jinja rendering: the template environment, figure links, and the Markdown documents.

Templates are looked up first in the user's `--templates` folder, then in the bundled
`templates/`, so any one file (including lessons.yaml) can be overridden alone.
StrictUndefined turns a misspelt variable into an error instead of an empty section.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

from forensics.errors import ForensicsError
from forensics.report.context import RunReport
from forensics.report.export import Exported, FigureSpec
from forensics.report.fmt import FILTERS
from forensics.report.knowledge import Knowledge
from forensics.report.locate import templates_dir

POSTMORTEM = "postmortem.md.j2"
SUMMARY = "summary.md.j2"
LESSONS = "lessons.yaml"
FIGURES_DIR = "figures"
POSTMORTEMS_DIR = "postmortems"


class TemplateError(ForensicsError):
    """A template is missing or does not render: names the template and the line."""


@dataclass
class FigureRef:
    """A figure as one document links it: paths relative to that document."""

    title: str
    png: str | None
    html: str


def environment(user_dir: Path | None = None) -> jinja2.Environment:
    """Templates from `user_dir` first, then the bundled ones; report filters installed."""
    folders = []
    if user_dir is not None:
        if not user_dir.is_dir():
            raise TemplateError(f'--templates "{user_dir}" is not a folder')
        folders.append(str(user_dir))
    folders.append(str(templates_dir()))
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folders),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(FILTERS)
    return env


def knowledge(env: jinja2.Environment) -> Knowledge:
    """lessons.yaml through the same lookup as the templates (so it can be overridden)."""
    assert env.loader is not None
    try:
        text, filename, _ = env.loader.get_source(env, LESSONS)
    except jinja2.TemplateNotFound as exc:
        raise TemplateError(f"{LESSONS} not found in the template folders") from exc
    return Knowledge.from_text(text, filename or LESSONS)


def planned(specs: list[FigureSpec], out_dir: Path, png: bool) -> dict[str, Exported]:
    """The figure files as if exported (for rendering without writing figures)."""
    fig_dir = out_dir / FIGURES_DIR
    return {
        s.name: Exported(
            s.name, s.title, fig_dir / f"{s.name}.html", fig_dir / f"{s.name}.png" if png else None
        )
        for s in specs
    }


def _ref(e: Exported, doc_dir: Path) -> FigureRef:
    rel = lambda p: Path(os.path.relpath(p, doc_dir)).as_posix()  # noqa: E731
    return FigureRef(e.title, rel(e.png) if e.png else None, rel(e.html))


def render_report(
    report: RunReport, exported: dict[str, Exported], env: jinja2.Environment, out_dir: Path
) -> dict[str, str]:
    """Every Markdown document of the report, keyed by its path relative to `out_dir`."""
    docs = {"README.md": _summary(report, exported, env, out_dir)}
    pm_dir = out_dir / POSTMORTEMS_DIR
    for v in report.detailed:
        figs = {k: _ref(exported[name], pm_dir) for k, name in v.figure_names.items()}
        text = _render(env, POSTMORTEM, run=report, v=v, figs=figs, summary_link="../README.md")
        docs[f"{POSTMORTEMS_DIR}/{v.slug}.md"] = text
    return docs


def _summary(
    report: RunReport, exported: dict[str, Exported], env: jinja2.Environment, out_dir: Path
) -> str:
    overview = _ref(exported["run-overview"], out_dir)
    links = {v.n: f"{POSTMORTEMS_DIR}/{v.slug}.md" for v in report.detailed}
    return _render(env, SUMMARY, run=report, overview=overview, links=links)


def _render(env: jinja2.Environment, name: str, **ctx: object) -> str:
    try:
        text = env.get_template(name).render(**ctx)
    except jinja2.TemplateNotFound as exc:
        raise TemplateError(f"template {exc.name} not found in the template folders") from exc
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"{exc.filename}:{exc.lineno}: {exc.message}") from exc
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"{name}: {exc.message}") from exc
    return tidy(text)


def tidy(text: str) -> str:
    """No trailing spaces, at most one blank line in a row, one newline at the end."""
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip() + "\n"
