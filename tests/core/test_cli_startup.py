"""Issue 11: the CLI starts light. `forensics --help`, `formats` and `rules list` import a
frozen set of modules (no polars, DuckDB, numpy, torch, scipy or plotly), and the pipeline
commands import only what their stage needs (no torch without replay, no plotly before
report). Times are measured by bench/cli_startup.py, never asserted here."""

from __future__ import annotations

from pathlib import Path

from cli_probe import run_cli

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "sample_logs" / "rare_tokens" / "metrics.jsonl"  # metrics only: no checkpoint

# What `forensics --help` may import from the project: the CLI and its command modules,
# nothing that pulls in numpy, polars, duckdb, scipy, torch or plotly.
FROZEN = {
    "forensics",
    "forensics.cli",
    "forensics.commands",
    "forensics.commands.compare",
    "forensics.commands.demo",
    "forensics.commands.detect",
    "forensics.commands.ingest",
    "forensics.commands.replay",
    "forensics.commands.report",
    "forensics.commands.rules",
    "forensics.commands.simulate",
    "forensics.errors",
}
# `forensics rules list` adds the rule loader and the plain-data vocabularies it checks
# rules against (forensics/detect/vocab.py), not the detector (forensics.detect resolves its
# exports lazily through forensics/lazy.py), and forensics/nonfinite.py (stdlib only), which
# spells a rule's evidence values.
RULES_FROZEN = FROZEN | {
    "forensics.lazy",
    "forensics.detect",
    "forensics.detect.config",
    "forensics.detect.expr",
    "forensics.detect.model",
    "forensics.detect.rules",
    "forensics.detect.vocab",
    "forensics.nonfinite",
    "forensics.yamlio",
}
# `forensics formats` imports every reader module (the registry), which bind their
# libraries lazily (forensics/lazy.py), plus what those import at module level.
FORMATS_EXTRA = (
    "forensics.ingest",
    "forensics.store",
    "forensics.lazy",
    "forensics.canon",
    "forensics.yamlio",
)
HEAVY = (
    "torch", "scipy", "plotly", "polars", "duckdb", "numpy", "pyarrow", "pandas",
    "transformers", "kaleido", "safetensors",
)  # fmt: skip


def _modules(*args: str) -> list[str]:
    run = run_cli(*args)
    assert run.code == 0, f"forensics {' '.join(args)} exited {run.code}: {run.stderr[-2000:]}"
    assert "leaked" not in run.stderr  # DuckDB's bindings report objects alive at exit
    return run.modules


def _ours(mods: list[str]) -> set[str]:
    return {m for m in mods if m == "forensics" or m.startswith("forensics.")}


def _top(mods: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted({m.split(".")[0] for m in mods} & set(names))


def test_help_imports_a_frozen_set_of_modules() -> None:
    mods = _modules("--help")
    assert _ours(mods) == FROZEN
    assert not _top(mods, HEAVY)


def test_rules_list_imports_a_frozen_set_of_modules() -> None:
    mods = _modules("rules", "list")
    assert _ours(mods) == RULES_FROZEN
    assert not _top(mods, HEAVY)
    assert not _top(mods, ("rich",))  # piped: tab-separated rows, no rich table (~20 ms)


def test_formats_imports_the_readers_but_no_heavy_library() -> None:
    mods = _modules("formats")
    extra = _ours(mods) - FROZEN
    assert "forensics.ingest.readers.jsonl" in extra  # the registry was really read
    assert not [m for m in extra if not m.startswith(FORMATS_EXTRA)]
    assert not {"forensics.ingest.pipeline", "forensics.store.db"} & extra
    assert not _top(mods, (*HEAVY, "rich"))


def test_pipeline_commands_import_only_their_stage(tmp_path: Path) -> None:
    db = str(tmp_path / "run.duckdb")
    ingest = _modules("ingest", str(LOG), "--db", db)
    assert not _top(ingest, ("torch", "scipy", "plotly", "transformers"))
    detect = _modules("detect", "--db", db)
    assert not _top(detect, ("torch", "plotly", "transformers"))
    analyze = _modules("analyze", str(LOG), "--no-replay", "--out", str(tmp_path / "out"))
    assert not _top(analyze, ("torch", "transformers"))
    assert not {"forensics.replay.runner", "forensics.sim.trainer"} & _ours(analyze)


def test_scenario_names_in_help_match_the_simulator() -> None:
    from forensics.commands.simulate import SCENARIO_NAMES
    from forensics.sim.scenarios import SCENARIOS

    assert list(SCENARIO_NAMES) == list(SCENARIOS)
