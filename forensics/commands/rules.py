"""`forensics rules`: list, show, test and lint the cause rules (rules/*.yaml)."""

from __future__ import annotations

from pathlib import Path

import typer

from forensics.cli import App, app, err_console, fail, out_console, print_table

rules_app = App(no_args_is_help=True)
app.add_typer(
    rules_app, name="rules", help="List, show, test and lint the cause rules (rules/*.yaml)."
)

RULES_OPTION = typer.Option(None, "--rules", help="Extra folder of rule YAML files (repeatable).")


@rules_app.command("list")
def list_rules(rules: list[Path] | None = RULES_OPTION) -> None:
    """List every rule: id, cause, level, status and title.

    Example: forensics rules list --rules my_rules/
    """
    from forensics.detect.rules import load_rules

    rows = [[r.id, r.cause, r.level, r.status, r.title] for r in load_rules(rules or [])]
    print_table(("id", "cause", "level", "status", "title"), rows)


@rules_app.command("show")
def show(
    rule_id: str = typer.Argument(..., help="Rule id (see `forensics rules list`)."),
    rules: list[Path] | None = RULES_OPTION,
) -> None:
    """Print one rule file as written.

    Example: forensics rules show rare-tokens
    """
    from forensics.detect.rules import load_rules

    found = {r.id: r for r in load_rules(rules or [])}
    if rule_id not in found:
        raise fail(f"no rule {rule_id!r} (known: {', '.join(sorted(found))})", 2)
    rule = found[rule_id]
    out_console.print(f"# {rule.path}", highlight=False, markup=False)
    out_console.print(rule.path.read_text(), highlight=False, markup=False)


@rules_app.command("test")
def test(rules: list[Path] | None = RULES_OPTION) -> None:
    """Run every rule against its own fixtures: `trigger` ones must fire, `no_trigger` not.

    Example: forensics rules test
    """
    from forensics.detect.rules import load_rules, run_fixtures

    results = run_fixtures(load_rules(rules or []))
    failed = [r for r in results if not r.passed]
    real = [r for r in results if "real_log" in r.features]
    skipped = [r for r in real if r.skipped]
    for r in failed:
        want = "fire" if r.kind == "trigger" else "not fire"
        err_console.print(
            f"FAIL {r.rule_id} fixtures.{r.kind}[{r.index}]: should {want} on {r.features}",
            highlight=False,
            markup=False,
        )
    out_console.print(
        f"passed {len(results) - len(failed)} of {len(results)} fixtures "
        f"({len(real) - len(skipped)} from real logs"
        + (f", {len(skipped)} skipped: {skipped[0].skipped}" if skipped else "")
        + ")"
    )
    if failed:
        raise typer.Exit(1)


@rules_app.command("lint")
def lint(rules: list[Path] | None = RULES_OPTION) -> None:
    """Validate every rule file against the schema; name the file and field of each error.

    Example: forensics rules lint --rules my_rules/
    """
    from forensics.detect.rules import lint as lint_rules
    from forensics.errors import RuleError

    result = lint_rules(rules or [])
    for err in result.errors:
        err_console.print(f"error: {err}", highlight=False, markup=False)
    out_console.print(f"validated {result.validated} of {result.total}")
    if result.errors:
        raise typer.Exit(RuleError.exit_code)


__all__ = ["rules_app"]
