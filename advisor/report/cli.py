"""The `report` command: `python -m advisor report --profile FILE --format ... --out DIR`.

`register(app)` adds it to the advisor's typer app (advisor/cli.py calls it). User errors print
one line and exit with code 2.
"""

from __future__ import annotations

from pathlib import Path

import typer

from bench.core.errors import UserError

FORMAT_CHOICES = ("md", "html", "pdf", "json", "all")


def parse_formats(text: str) -> list[str]:
    """`all`, one format, or a comma-separated list (md,html) -> the formats to write."""
    from advisor.report import FORMATS

    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    if not names:
        raise UserError(f"no report format given; choose from {', '.join(FORMAT_CHOICES)}")
    if "all" in names:
        return list(FORMATS)
    bad = [name for name in names if name not in FORMATS]
    if bad:
        raise UserError(
            f"unknown report format {bad[0]!r}; choose from {', '.join(FORMAT_CHOICES)}"
        )
    return list(dict.fromkeys(names))


def report_command(
    profile: Path = typer.Option(..., "--profile", help="Workload profile (YAML or JSON)."),
    run: list[str] = typer.Option(
        [],
        "--run",
        help="Stored run id to include (repeatable); default: the runs the "
        "advisor's evidence cites for this profile.",
    ),
    store: str | None = typer.Option(
        None,
        "--store",
        help="Results store: a path, sqlite:/// or postgresql:// URL (default: $ADVISOR_STORE "
        "or the user data folder).",
    ),
    format: str = typer.Option(
        "all", "--format", help="md, html, pdf, json, all, or a comma-separated list."
    ),
    out: Path = typer.Option(..., "--out", help="Folder to write into (created if missing)."),
    stage: str | None = typer.Option(
        None, "--stage", help="Stage the quality flags change (multi-stage profiles)."
    ),
    quality_result: str | None = typer.Option(
        None,
        "--quality-result",
        help="quality.json written by `python -m bench quality` on your evaluation file: a "
        "precision losing more than --max-quality-loss-pct on it is not recommended.",
        show_default=False,
    ),
    max_quality_loss_pct: float | None = typer.Option(
        None,
        "--max-quality-loss-pct",
        help="Tolerated quality loss vs the baseline precision, percent (perplexity's relative "
        "increase or accuracy points); default 1.",
        show_default=False,
    ),
) -> None:
    """Write the recommendation report for a profile (Markdown, HTML, PDF, JSON)."""
    from advisor.report import generate
    from advisor.report.build import assemble_report
    from advisor.report.writer import safe_filename

    try:
        formats = parse_formats(format)
        if not profile.is_file():
            raise UserError(f"profile file {str(profile)!r} not found")
        report = assemble_report(
            profile,
            run,
            store,
            stage=stage,
            quality_result=quality_result,
            max_quality_loss_pct=max_quality_loss_pct,
        )
        written = generate(report, out, formats, stem=safe_filename(profile.stem, "report"))
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    for name, path in written.items():
        typer.echo(f"{name}: {path}")


def register(app: typer.Typer) -> None:
    """Add the `report` command to the advisor CLI."""
    app.command("report")(report_command)
