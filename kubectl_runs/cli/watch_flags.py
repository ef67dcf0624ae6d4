"""The flags of ``-w/--watch`` (plan, explain, budgets usage, queues usage, pending): only the click options and
where they are stored. The watch itself (``cli.watching``, informers, the kubernetes client) is imported only
when ``-w`` is given."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def _store(name: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is None or value is False:
            return
        from .options import GlobalOptions

        setattr(GlobalOptions.of(ctx), name, value)

    return callback


_WATCH_OPTIONS = (
    click.option("-w", "--watch", is_flag=True, default=None, callback=_store("watch"), expose_value=False,
                 help="After printing, watch the cluster and print the report again each time its content changes."),
    click.option("--output-watch-events", is_flag=True, default=None, callback=_store("watch_events"),
                 expose_value=False, help="With -w: say before each report which objects changed "
                 "(ADDED/MODIFIED/DELETED kind namespace/name)."),
    click.option("--timeout", "watch_timeout", metavar="DURATION", callback=_store("watch_timeout"),
                 expose_value=False, help="With -w: stop watching after this long (30s, 5m, 1h; 0 = never)."),
)


def watch_options(command: Callable) -> Callable:
    """Give a report the watch flags."""
    for option in reversed(_WATCH_OPTIONS):
        command = option(command)
    return command
