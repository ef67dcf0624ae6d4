"""``kubectl runs snapshot save``: the objects kubectl-runs reads, as one JSON ``List`` for offline use."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from typing import IO

import click
import msgspec

from ..errors import UserError
from ..kueue.model import QUEUE_API_VERSIONS
from ..model import API_VERSION, snapshot_document
from ..pods.model import POD_API_VERSIONS
from ..render import JSON, YAML, Document
from ..timeutil import rfc3339
from .options import GlobalOptions, global_options


@click.group("snapshot")
@global_options
def snapshot() -> None:
    """Save the objects kubectl-runs reads, for offline use."""


@snapshot.command("save")
@click.option("-f", "--file", "path", metavar="PATH", help="Write to this file instead of stdout.")
@global_options
@click.pass_context
def save(ctx: click.Context, path: str | None) -> None:
    """Nodes, Budgets, Runs, Reservations and GPULeases (and Kueue's and Kaiwo's objects where their CRDs are
    installed: ResourceFlavors, ClusterQueues, Cohorts, LocalQueues, Workloads, WorkloadPriorityClasses,
    KaiwoJobs, KaiwoServices; and, for `pending`, the Pods that request GPUs or run on GPU nodes, the
    FailedScheduling/FailedCreate Events, ResourceQuotas and LimitRanges, lean) as one JSON List stamped with the
    time it was taken
    (annotation jobtree.dev/snapshot-time). Every command reads it back with --snapshot and gives the answer
    it would have given live at that instant. Only Nodes are required: a Kueue cluster without the jobtree.dev
    CRDs saves what it has, and the kinds not installed are named in one note (and in the annotation
    jobtree.dev/snapshot-absent-kinds). -f writes the file whole or not at all.

    \b
    Examples:
      kubectl runs snapshot save > fleet-$(date +%F).json
      kubectl runs budgets usage --snapshot fleet-2025-11-20.json
      kubectl runs snapshot save --snapshot fleet.yaml > fleet.json   # YAML in, normalized JSON out
    """
    opts = GlobalOptions.of(ctx)
    fmt = opts.output_format((JSON, YAML)) if opts.output else JSON
    source = opts.source(opts.report_namespace())
    if source.live:
        from ..sources.save import save_cluster

        document, notes = save_cluster(source, rfc3339(opts.evaluation_time()))
        for note in notes:
            click.echo(f"note: {note}", err=True)
    else:
        loaded = opts.load(opts.report_namespace())
        document = _normalized(loaded, rfc3339(opts.evaluation_time(loaded)))
    if path:
        write_whole(path, lambda out: _write(document, fmt, out))
        click.echo(f"saved {len(document['items'])} objects to {path}", err=True)
    else:
        _write(document, fmt, sys.stdout)


def write_whole(path: str, write: Callable[[IO[str]], None]) -> None:
    """Write a file whole or not at all: into a temporary file beside it, flushed to disk, then renamed over
    ``path``. A failure (a full disk, an interrupt) leaves no partial file, and an earlier file of that name as
    it was. A path that is not a regular file (``/dev/stdout``, a FIFO) is written directly: it cannot be
    replaced. A symbolic link is followed: the file it points at is replaced."""
    target = os.path.realpath(path)
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None
    if mode is not None and not stat.S_ISREG(mode):
        try:
            with open(path, "w", encoding="utf-8") as out:
                write(out)
        except OSError as exc:
            raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None
        return
    directory, name = os.path.split(target)
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=directory or ".")
    except OSError as exc:
        raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
        os.replace(temporary, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write(document: dict, fmt: str, out) -> None:
    if fmt == JSON:
        out.write(msgspec.json.encode(document).decode() + "\n")
    else:
        opts_free = Document(data=document)
        from ..render import render

        render(opts_free, fmt, out, sys.stderr)


def _normalized(loaded, taken_at: str | None) -> dict:
    """The typed records re-encoded (only the fields kubectl-runs reads survive)."""
    items = []
    pods = loaded.pods
    groups = (loaded.nodes, loaded.budgets, loaded.runs, loaded.reservations, loaded.leases, *loaded.queues.groups(),
              *(getattr(pods, attribute) for attribute in pods.FIELDS.values()))
    for group in groups:
        for obj in group:
            item = msgspec.to_builtins(obj)
            kind = item["kind"]
            item["apiVersion"] = "v1" if kind == "Node" else POD_API_VERSIONS.get(kind) or \
                QUEUE_API_VERSIONS.get(kind, API_VERSION)
            items.append(item)
    return snapshot_document(items, taken_at)
