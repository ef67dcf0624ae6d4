"""The `leases audit` report: who used which GPUs over a window, and was the ledger honest (API.md §5).

``audit(snapshot, at, since=…, until=…, by=…)`` clips every lease to the window ``[since, min(until, at))``
(a lease holds its slots on ``[start, ended)``, or up to ``at`` while it is open; nothing after the evaluation
clock is known) and reports, per key of the ``by`` dimensions, the GPU-hours used, the leases that overlap the
window and the peak of GPUs held at one instant, with the totals and the findings:

* ``DoubleBooked`` — two or more leases held one slot at the same instant: one finding per *episode* (a
  maximal interval during which the slot is held more than once) and node, the slots with the same episode
  together, naming the lease that made it double-booked, the interval, the number of leases and the first few
  of them (never one finding per pair: 100,000 leases on the same slots are a handful of findings, found in
  O(n log n));
* ``UnknownNode``, ``UnknownRun``, ``UnknownEnvelope`` — a lease names a node, run or envelope that is not in
  the snapshot; ``MalformedSlot``, ``SlotOutOfRange`` — a slot that is not ``node#ordinal``, or past the node's
  GPUs (engine/slots.py);
* ``InvalidInterval``, ``ClosedWithoutEnd``, ``FutureStart``, ``DanglingReservation`` — times no lease can have,
  an Activated Reservation naming what is not there (engine/lease_faults.py);
* ``ACLViolation``, ``Overdraft``, ``UnboundNamespace`` — funding problems, found by the ledger itself
  (``accounting.ledger``) evaluated at the end of the window and at every lease start inside the window where a
  problem is possible (see ``ledger_findings``).

The window's flat columns and sweeps are engine/audit_window.py; the findings are engine/audit_slots.py (slots) and
engine/audit_findings.py (runs, envelopes, the ledger).
Histories run to millions of leases, so the arithmetic works on flat lists of floats (epoch seconds, computed
once per lease) and leans on C-level builtins (``sorted``, ``map``, ``accumulate``) rather than per-slot Python
work: slots are looked at once per distinct slot list, not once per lease.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from operator import mul

from ..model import Snapshot
from ..timeutil import rfc3339
from . import reports
from .audit_findings import RUN_GONE_REASONS, envelope_findings, ledger_findings, payers, run_findings
from .audit_slots import NODE_GONE_REASONS, slot_findings
from .audit_window import (
    Window,
    clip,
    gpu_seconds,
    group_indices,
    held_micros,
    key_peaks,
    node_entries,
    peak,
    seconds_of,
    split_slot,
)
from .findings import Finding, sort_findings
from .lease_faults import lease_time_findings, read_at, reservation_findings

__all__ = ("DIMENSIONS", "NODE_GONE_REASONS", "NO_ENVELOPE", "RUN_GONE_REASONS", "AuditReport", "AuditRow", "audit",
           "breakdown", "checked", "peak", "split_slot", "window_findings")

OWNER, ENVELOPE, FLAVOR, RUN, NODE = "owner", "envelope", "flavor", "run", "node"
DIMENSIONS = (OWNER, ENVELOPE, FLAVOR, RUN, NODE)
NO_ENVELOPE = "<none>"  # the envelope key of leases minted unfunded (no paidBy)




@dataclass(frozen=True)
class AuditRow:
    """One key of the breakdown: ``key`` holds one value per ``by`` dimension."""

    key: tuple[str, ...]
    gpu_seconds: float  # GPU-seconds inside the window
    leases: int  # leases of this key that overlap the window
    peak_gpus: int | None  # most GPUs this key held at one instant inside the window (None: not computed)

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0


@dataclass(frozen=True)
class AuditReport:
    at: datetime
    since: datetime
    until: datetime
    by: tuple[str, ...]
    rows: list[AuditRow]
    total_gpu_seconds: float
    total_leases: int
    findings: list[Finding]
    ledger_instants: int = 0  # how many instants the ledger was evaluated at
    notes: list[str] = field(default_factory=list)
    hours_only: bool = False  # --hours-only: GPU-hours and leases alone (the rows' peaks and the findings unknown)

    @property
    def total_gpu_hours(self) -> float:
        return self.total_gpu_seconds / 3600.0

    @property
    def report(self) -> reports.AuditReport | reports.AuditHoursReport:
        """The value ``-o json`` prints: each row's ``by`` dimensions first, in the order asked for."""
        round_hours = reports.round_hours
        since, until = rfc3339(self.since) or "", rfc3339(self.until) or ""
        totals = reports.AuditTotals(round_hours(self.total_gpu_hours), self.total_leases)
        if self.hours_only:
            row_type = reports.audit_row_type(self.by, peaks=False)
            rows = [row_type(*row.key, round_hours(row.gpu_hours), row.leases) for row in self.rows]
            return reports.AuditHoursReport(since=since, until=until, rows=rows, totals=totals)
        row_type = reports.audit_row_type(self.by)
        rows = [row_type(*row.key, round_hours(row.gpu_hours), row.leases, row.peak_gpus) for row in self.rows]
        return reports.AuditReport(since=since, until=until, rows=rows, totals=totals,
                                   findings=reports.finding_entries(self.findings))


# --- the report -------------------------------------------------------------------------------------------


def audit(
    snapshot: Snapshot,
    at: datetime,
    *,
    since: datetime,
    until: datetime,
    by: Sequence[str] = (OWNER,),
    namespace: str | None = None,
    ledger_at_starts: bool = True,
    hours_only: bool = False,
    read: datetime | None = None,
) -> AuditReport:
    """GPU-hours, leases and peak GPUs per key of ``by`` over ``[since, until)``, with findings.

    Units: GPU-hours in the rows and totals, GPUs for peaks. Only leases of ``namespace`` are counted and
    reported when it is given; funding is still judged with every lease charged to an envelope (a borrower in
    another namespace uses the same envelope). ``ledger_at_starts=False`` evaluates the ledger only at the end
    of the window. ``hours_only``: GPU-hours and leases alone (no peaks, no findings: ``--hours-only``).
    ``read``: the wall clock when the objects were read, for a snapshot without a stamp (``FutureStart``)."""
    report = _audit(snapshot, at, since, until, checked(by, since, until), namespace, ledger_at_starts,
                    findings=not hours_only, read=read_at(snapshot, at, read))
    if hours_only:
        rows = [AuditRow(row.key, row.gpu_seconds, row.leases, None) for row in report.rows]
        return replace(report, rows=rows, hours_only=True)
    return report


def checked(by: Sequence[str], since: datetime, until: datetime) -> tuple[str, ...]:
    """``by`` as a tuple, once it and the window are valid arguments of an audit (ValueError when not)."""
    by = tuple(by)
    if not by:
        raise ValueError("by: at least one dimension")
    for dim in by:
        if dim not in DIMENSIONS:
            raise ValueError(f"by: {dim!r} is not one of {', '.join(DIMENSIONS)}")
    if len(set(by)) != len(by):
        raise ValueError("by: each dimension at most once")
    if since >= until:
        raise ValueError(f"since ({rfc3339(since)}) must be before until ({rfc3339(until)})")
    return by


def _audit(
    snapshot: Snapshot,
    at: datetime,
    since: datetime,
    until: datetime,
    by: tuple[str, ...],
    namespace: str | None,
    ledger_at_starts: bool,
    findings: bool = True,
    read: datetime | None = None,
) -> AuditReport:
    notes = window_notes(at, until)
    hi_at = min(until, at)
    win = clip(snapshot.leases, since, hi_at) if since < hi_at else Window(lo=0.0, hi=0.0)
    rows, total_seconds, total_leases = _counted(win, by, namespace)

    found, instants = ([], 0) if not findings else window_findings(snapshot, win, since, hi_at, namespace,
                                                                    ledger_at_starts, notes, read=read)
    return AuditReport(
        at=at,
        since=since,
        until=until,
        by=by,
        rows=rows,
        total_gpu_seconds=total_seconds,
        total_leases=total_leases,
        findings=found,
        ledger_instants=instants,
        notes=notes,
    )


def window_notes(at: datetime, until: datetime) -> list[str]:
    """The notes of an audit whose window ends after the evaluation time."""
    if until > at:
        return [f"--until is after the evaluation time {rfc3339(at)}: GPU-hours are counted up to it"]
    return []


def window_findings(
    snapshot: Snapshot,
    win: Window,
    since: datetime,
    hi_at: datetime,
    namespace: str | None,
    ledger_at_starts: bool,
    notes: list[str],
    double_booked: bool = True,
    read: datetime | None = None,
) -> tuple[list[Finding], int]:
    """The findings of the window ``win`` (``clip`` of the snapshot's leases over ``[since, hi_at)``), sorted,
    narrowed to ``namespace`` when given, and how many instants the ledger was evaluated at.

    Each kind depends only on some of the window's leases (archive/findings.py relies on it to run this on a
    subset): ``DoubleBooked`` on a node on the leases holding slots on it, the reference findings on each lease
    alone, the ledger on the leases open at the end of the window and on the leases of the budgets where a cheap
    bound says a problem is possible — bounds that can only fall when leases are left out.
    ``double_booked=False`` leaves ``DoubleBooked`` out (the caller finds it another way). The times of the
    snapshot's leases (``InvalidInterval``, ``ClosedWithoutEnd`` of those starting in the window, ``FutureStart``
    after ``read``: engine/lease_faults.py) and its Activated Reservations (``DanglingReservation``) come from
    the snapshot, not the window (a lease with no sound interval is in no window)."""
    found: list[Finding] = []
    by_payer = group_indices(payers(win))
    found += slot_findings(snapshot, win, notes, double_booked)
    found += run_findings(snapshot, win)
    found += envelope_findings(snapshot, win, by_payer)
    ledger_found, instants = ledger_findings(snapshot, win, by_payer, since, hi_at, ledger_at_starts)
    found += ledger_found
    found += lease_time_findings(snapshot.leases, since, hi_at, read or snapshot.taken_at)
    found += reservation_findings(snapshot, since, hi_at)
    if namespace is not None:
        found = [f for f in found if _finding_namespace(f) == namespace]
    return sort_findings(found), instants


def breakdown(
    snapshot: Snapshot,
    at: datetime,
    *,
    since: datetime,
    until: datetime,
    by: Sequence[str],
    namespace: str | None = None,
) -> tuple[list[AuditRow], float, int]:
    """The rows and totals (GPU-seconds, leases) of ``audit`` over ``[since, min(until, at))``, without the
    findings: what each period of a report by period counts (engine/audit_periods.py)."""
    hi_at = min(until, at)
    win = clip(snapshot.leases, since, hi_at) if since < hi_at else Window(lo=0.0, hi=0.0)
    return _counted(win, tuple(by), namespace)


def _counted(win: Window, by: tuple[str, ...], namespace: str | None) -> tuple[list[AuditRow], float, int]:
    """Rows, GPU-seconds and leases of the window (of ``namespace`` only, when given)."""
    selected = None
    if namespace is not None:
        selected = [i for i, lease in enumerate(win.leases) if lease.metadata.namespace == namespace]
    rows = _rows(win, by, selected)
    if selected is None:
        return rows, gpu_seconds(win), len(win.leases)
    return rows, gpu_seconds(win, selected), len(selected)


def _finding_namespace(finding: Finding) -> str | None:
    if finding.lease is not None:
        return finding.lease.partition("/")[0]
    return finding.namespace


# --- rows -------------------------------------------------------------------------------------------------


def _rows(win: Window, by: tuple[str, ...], selected: list[int] | None) -> list[AuditRow]:
    """One row per key: entries are leases, or (lease, node) pairs when ``node`` is a dimension."""
    index = selected if selected is not None else range(len(win.leases))
    columns: list[list[str]] = []
    for dim in by:
        if dim == NODE:
            continue
        column = _dimension(dim, win)
        columns.append(column if selected is None else list(map(column.__getitem__, selected)))
    if NODE in by:
        lease_of, node_keys, weights = node_entries(win, index)
        node_at = by.index(NODE)
        if selected is not None:  # back to window indices: lease_of holds window indices
            columns = [_dimension(dim, win) for dim in by if dim != NODE]
        columns = [list(map(col.__getitem__, lease_of)) for col in columns]
        columns.insert(node_at, node_keys)
        starts = list(map(win.starts.__getitem__, lease_of))
        ends = list(map(win.ends.__getitem__, lease_of))
        micros = list(map(mul, weights, held_micros(starts, ends)))
    elif selected is not None:
        weights = list(map(win.gpus.__getitem__, index))
        starts = list(map(win.starts.__getitem__, index))
        ends = list(map(win.ends.__getitem__, index))
        micros = list(map(win.gpu_micros().__getitem__, index))
    else:
        weights, starts, ends, micros = win.gpus, win.starts, win.ends, win.gpu_micros()
    single = len(columns) == 1
    keys: list = columns[0] if single else list(zip(*columns, strict=True))
    groups = group_indices(keys)
    peaks = key_peaks(keys, groups, starts, ends, weights)
    rows = []
    for key, idx in groups.items():
        total = sum(micros) if len(idx) == len(micros) else sum(map(micros.__getitem__, idx))
        rows.append(AuditRow(key=(key,) if single else key, gpu_seconds=seconds_of(total), leases=len(idx),
                             peak_gpus=peaks[key]))
    rows.sort(key=lambda r: (-r.gpu_seconds, r.key))
    return rows


def _dimension(dim: str, win: Window) -> list[str]:
    """The key of every window lease in one dimension (not ``node``: see ``node_entries``)."""
    if dim in (OWNER, FLAVOR):
        return win.column(dim)
    if dim == RUN:
        refs = list(zip(win.column("run_namespace"), win.column("run_name"), strict=True))
        names: dict[tuple[str, str], str] = {}
        for ref in set(refs):
            names[ref] = f"{ref[0]}/{ref[1]}"
        return list(map(names.__getitem__, refs))
    names = {}
    for key in set(payers(win)):
        names[key] = NO_ENVELOPE if key is None else "/".join(key)
    return list(map(names.__getitem__, payers(win)))
