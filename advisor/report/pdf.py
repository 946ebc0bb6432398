"""PDF formatter: the HTML report with print CSS (A4, a page per section) rendered by WeasyPrint.

WeasyPrint uses the system's pango and draws the SVG charts as vectors. It is imported only here,
and never fetches anything: the document has no external resources and URL fetching is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from advisor.report.html import render_html
from advisor.report.model import Report
from advisor.report.writer import ReportWriter, check_name
from bench.core.errors import UserError


def render_pdf(report: Report, chart_svgs: Mapping[str, str]) -> bytes:
    try:
        import weasyprint
    except (ImportError, OSError) as exc:  # OSError: pango/cairo system libraries missing
        raise UserError(
            f"PDF output needs WeasyPrint and the system pango library: {exc}"
        ) from None
    html = render_html(report, chart_svgs, print_mode=True)
    # Every resource is inline (data: URIs); any other URL is refused rather than fetched.
    fetcher = weasyprint.URLFetcher(allowed_protocols={"data"}, timeout=1)
    document = weasyprint.HTML(string=html, url_fetcher=fetcher, base_url=None)
    return document.write_pdf()


def write_pdf(
    report: Report, writer: ReportWriter, stem: str, chart_svgs: Mapping[str, str]
) -> Path:
    check_name(stem)
    return writer.write_bytes(f"{stem}.pdf", render_pdf(report, chart_svgs))
