"""The `dedup` command line: one module per group of commands, all on one typer app."""

from __future__ import annotations

import typer

from streams import __version__
from streams.cli import calibrate, files, label, relink, report, review, service  # noqa: F401  (each module adds its commands to the app)
from streams.cli.common import app


@app.command("version")
def version_command() -> None:
    """Print the version."""
    typer.echo(__version__)
