"""One place that turns what a user can get wrong on a command line into ONE line on stderr.

Both CLIs (`python -m bench`, `python -m advisor`) use `OneLineErrorsGroup` as their root typer
group, so a usage error (unknown option or command, a bad or missing value), a UserError, a
pydantic ValidationError or a file the OS refuses prints `error: ...` and exits with code 2,
whether the app is run as a program, through `main([...])` or through typer's CliRunner.

Why a group class: typer vendors click (`typer._click`), whose exceptions do not subclass the
`click` package's, and in non-standalone mode it re-raises them to the caller; handling them in
the root group's `main` covers every way the app is invoked.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from bench.core.errors import RunAborted, RunInterrupted, UserError

# OS errors met on a path the command was given: exit 2 like every other user error, a full
# disk or a file-size limit under the output path included (nothing was lost; point --out at a
# place with room). Others (an I/O error) are still one line naming the file, with exit code 1:
# a script can tell "fix the command" from "fix the machine".
USER_ERRNOS = {
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EFBIG,
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.ENOENT,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.ENAMETOOLONG,
    errno.ELOOP,
    errno.EEXIST,
}


def _usage_hint(exc: Any) -> str:
    ctx = getattr(exc, "ctx", None)
    if ctx is None:
        return ""
    return f" (see `{ctx.command_path} --help`)"


def report_exception(exc: BaseException) -> int:
    """Print the one line for `exc` and return the exit code; re-raise what is not the user's
    (a bug must keep its traceback)."""
    from pydantic import ValidationError
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError

    if isinstance(exc, typer.Exit):
        return exc.exit_code
    if isinstance(exc, (typer.Abort, KeyboardInterrupt)):
        typer.echo("aborted", err=True)
        return 130
    if isinstance(exc, NoArgsIsHelpError):  # `python -m bench` alone: the help, as asked
        exc.show()
        return 0
    if isinstance(exc, UsageError):
        typer.echo(f"error: {exc.format_message()}{_usage_hint(exc)}", err=True)
        return 2
    if isinstance(exc, ClickException):
        typer.echo(f"error: {exc.format_message()}", err=True)
        return exc.exit_code or 1
    if isinstance(exc, UserError):
        typer.echo(f"error: {exc}", err=True)
        return 2
    if isinstance(exc, RunAborted | RunInterrupted):  # the run is marked FAILED; one line says so
        typer.echo(f"error: {exc}", err=True)
        return exc.exit_code
    if isinstance(exc, ValidationError):
        from bench.core.strict import describe_validation_error

        typer.echo(f"error: {describe_validation_error(exc)}", err=True)
        return 2
    if isinstance(exc, BrokenPipeError):  # `python -m bench runs | head`: the reader left
        import os

        # Python flushes stdout again at exit; point it at /dev/null so that is silent too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    if isinstance(exc, OSError):
        # Every OSError is one line: the writers name their file (bench.core.outputs.naming_path)
        # so a full disk says which file it stopped; exit 2 when the path the user gave is the
        # cause, 1 when the machine is (a full disk, an I/O error).
        from bench.core.files import shown_path

        where = f" {shown_path(exc.filename)}" if exc.filename is not None else ""
        typer.echo(f"error: cannot use{where}: {exc.strerror or exc}", err=True)
        return 2 if exc.errno in USER_ERRNOS else 1
    raise exc


class OneLineErrorsGroup(TyperGroup):
    """The root group of a CLI: every user error is one `error: ...` line and exit code 2."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            returned = super().main(
                args=args,
                prog_name=prog_name,
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
            code = returned if isinstance(returned, int) else 0
        except (Exception, KeyboardInterrupt, RunInterrupted) as exc:
            code = report_exception(exc)
        if standalone_mode:
            sys.exit(code)
        return code
