"""Recommendation reports for architecture reviews: one data model, four formats.

`build.assemble_report` gathers the data; `generate(report, out_dir, formats)` writes Markdown,
self-contained HTML, PDF and JSON atomically into one folder (see writer.py for the safety rules).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from advisor.report.model import REPORT_SCHEMA_VERSION, SECTIONS, Report
from bench.core.errors import UserError

FORMATS = ("md", "html", "pdf", "json")


def generate(
    report: Report,
    out_dir: str | Path,
    formats: Iterable[str] = FORMATS,
    stem: str = "report",
    svgs: Mapping[str, str] | None = None,
) -> dict[str, Path]:
    """Write the report in each format into `out_dir`; returns format -> file written.

    `svgs`: the report's charts already rendered (`render_all_svg(report.charts)`, as the app
    keeps them); rendered here when not given."""
    from advisor.report.charts import render_all_svg
    from advisor.report.html import write_html
    from advisor.report.json import write_json
    from advisor.report.markdown import write_markdown
    from advisor.report.pdf import write_pdf
    from advisor.report.writer import ReportWriter, check_name

    wanted = list(dict.fromkeys(formats))
    unknown = [name for name in wanted if name not in FORMATS]
    if unknown or not wanted:
        raise UserError(
            f"unknown report format {unknown or wanted}; choose from {', '.join(FORMATS)}"
        )
    check_name(stem)
    writer = ReportWriter(out_dir)
    # Charts are rendered once and shared: the same SVG in the Markdown files, HTML and PDF.
    if svgs is None:
        svgs = render_all_svg(report.charts) if set(wanted) & {"md", "html", "pdf"} else {}
    written: dict[str, Path] = {}
    for name in wanted:
        if name == "md":
            written[name] = write_markdown(report, writer, stem, svgs)
        elif name == "html":
            written[name] = write_html(report, writer, stem, svgs)
        elif name == "pdf":
            written[name] = write_pdf(report, writer, stem, svgs)
        else:
            written[name] = write_json(report, writer, stem)
    return written


__all__ = ["FORMATS", "REPORT_SCHEMA_VERSION", "SECTIONS", "Report", "generate"]
