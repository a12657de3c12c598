"""Report stage: Markdown post-mortems and a run summary, with figures, from the store.

`write_report(store, run_id, out_dir)` is the entry point (used by `forensics report`,
`forensics demo` and the analyze pipeline). docs/reports.md describes the output.
"""

from forensics.report.writer import ReportResult, write_report

__all__ = ["ReportResult", "write_report"]
