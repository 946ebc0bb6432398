"""Self-contained HTML formatter: one file, CSS inline, charts as SVG data URIs, no network.

The template is autoescaped, so text from a profile (a title with `<script>`) stays text.
The same template with `print_mode=True` is the PDF's source (see pdf.py).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path

from advisor.report.model import Report
from advisor.report.templating import environment
from advisor.report.writer import ReportWriter, check_name


def svg_data_uri(svg: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")


def render_html(report: Report, chart_svgs: Mapping[str, str], print_mode: bool = False) -> str:
    """The report as one HTML document; `chart_svgs` maps available chart ids to SVG text."""
    template = environment("html").get_template("report.html.j2")
    uris = {chart_id: svg_data_uri(svg) for chart_id, svg in chart_svgs.items()}
    return template.render(report=report, chart_uris=uris, print_mode=print_mode)


def write_html(
    report: Report, writer: ReportWriter, stem: str, chart_svgs: Mapping[str, str]
) -> Path:
    check_name(stem)
    return writer.write_text(f"{stem}.html", render_html(report, chart_svgs))
