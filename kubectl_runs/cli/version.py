"""``kubectl runs version``: version, commit, Python and platform (no kubernetes import)."""

from __future__ import annotations

import platform
import sys

import click

from .. import __version__
from ..render import JSON, OBJECT_FORMATS, YAML, Document
from .options import GlobalOptions, global_options


def build_info() -> dict:
    try:
        from .. import _build  # written by the single-file build (scripts/dist)

        commit = getattr(_build, "COMMIT", "unknown")
    except ImportError:
        commit = "unknown"
    return {
        "version": __version__,
        "commit": commit,
        "python": platform.python_version(),
        "platform": f"{sys.platform}/{platform.machine().lower()}",
        "frozen": bool(getattr(sys, "frozen", False)),
    }


@click.command("version")
@global_options
@click.pass_context
def version(ctx: click.Context) -> None:
    """Print the version, commit, Python and platform."""
    opts = GlobalOptions.of(ctx)
    fmt = opts.output_format(OBJECT_FORMATS)
    info = build_info()
    if fmt in (JSON, YAML):
        opts.print(Document(data=info), fmt)
        return
    click.echo(
        f"kubectl-runs {info['version']} (commit {info['commit']}, Python {info['python']}, {info['platform']})"
    )
