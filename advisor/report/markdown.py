"""Markdown formatter: a report that renders on common code hosts, charts as SVG files beside it.

Charts go to `<stem>-charts/<chart id>.svg` and are linked relatively, so the folder can be
committed or zipped as is. Profile text is escaped (`md` filter): raw HTML never renders.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from advisor.report.model import SECTIONS, Report
from advisor.report.templating import environment
from advisor.report.writer import ReportWriter, check_name


def heading_anchor(title: str) -> str:
    """The anchor GitHub/GitLab give a heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def render_markdown(report: Report, chart_links: Mapping[str, str]) -> str:
    """Markdown text; `chart_links` maps each available chart id to its relative file path."""
    template = environment("markdown").get_template("report.md.j2")
    anchors = {anchor: heading_anchor(title) for anchor, title in SECTIONS}
    return template.render(report=report, chart_links=chart_links, anchor_of=anchors)


def write_markdown(
    report: Report, writer: ReportWriter, stem: str, chart_svgs: Mapping[str, str]
) -> Path:
    """Write `<stem>.md` and its chart files; returns the Markdown file's path."""
    links = chart_links(chart_svgs, stem)
    for chart_id, link in links.items():
        folder, _, name = link.rpartition("/")
        writer.write_text(name, chart_svgs[chart_id], folder=folder)
    return writer.write_text(f"{stem}.md", render_markdown(report, links))


def chart_links(chart_ids: Iterable[str], stem: str) -> dict[str, str]:
    """Where the Markdown links each chart: `<stem>-charts/<chart id>.svg`, beside the file."""
    check_name(stem)
    return {chart_id: f"{stem}-charts/{check_name(f'{chart_id}.svg')}" for chart_id in chart_ids}
