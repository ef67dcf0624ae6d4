"""``kubectl runs version``: version, commit, Python and platform (no kubernetes import)."""

from __future__ import annotations

import os
import sys

import click

from .. import __version__
from .options import GlobalOptions, global_options


def build_info() -> dict:
    """What this executable is. The commit is known only to a single-file build (scripts/dist writes it into
    ``kubectl_runs/_build.py``); an installed package says ``unknown``."""
    try:
        from .. import _build  # written by the single-file build (scripts/dist)

        commit = getattr(_build, "COMMIT", "unknown")
    except ImportError:
        commit = "unknown"
    return {
        "version": __version__,
        "commit": commit,
        "python": _python_version(),
        "platform": f"{sys.platform}/{os.uname().machine.lower()}",
        "frozen": bool(getattr(sys, "frozen", False)),
    }


def _python_version() -> str:
    """``platform.python_version()`` without importing ``platform`` (5 ms of start-up)."""
    v = sys.version_info
    suffix = "" if v.releaselevel == "final" else f"{v.releaselevel[0]}{v.serial}".replace("c", "rc", 1)
    return f"{v.major}.{v.minor}.{v.micro}{suffix}"


@click.command("version")
@global_options
@click.pass_context
def version(ctx: click.Context) -> None:
    """Print the version, commit, Python and platform."""
    from ..render import JSON, OBJECT_FORMATS, YAML, Document

    opts = GlobalOptions.of(ctx)
    fmt = opts.output_format(OBJECT_FORMATS)
    info = build_info()
    if fmt in (JSON, YAML):
        opts.print(Document(data=info), fmt)
        return
    click.echo(
        f"kubectl-runs {info['version']} (commit {info['commit']}, Python {info['python']}, {info['platform']})"
    )
