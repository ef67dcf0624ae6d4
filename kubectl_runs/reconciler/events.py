"""The Events of the ledger keeper: (the ledger writes that were made) -> the events.k8s.io/v1 Events that say
so, on the objects they concern. Pure: no clock, no I/O; the loop hands in the writes whose outcome was ``ok``
(never ``exists``, ``gone``, failed or skipped ones: an Event says what happened, not what was tried) and the
applier posts what comes out, best effort.

Why derived from the writes and not said by the ledger: the ledger is a plan (``--dry-run`` prints it, a failed
write skips the rest), an Event is a fact about a write that succeeded. Why from the writes' *structured*
content — kind, Create vs PatchStatus, ``closureReason``, ``preemption``, ``state``, ``reason``,
``activation`` — and never from ``cause``: the cause is a sentence for the logs and may be reworded; a new
Reservation ``state`` or ``reason`` value maps generically.

What is said (docs/reconciler.md, "Events", has the table with example notes):

- a GPULease Create: ``Minted`` on the lease; per Run and batch one ``Admitted`` (some lease of the start
  width, reason Start) or ``Grown`` (only Grow leases) on the Run;
- a GPULease closure: ``<closureReason>`` on the lease (Warning for the preempting ones); on the Run, per Run,
  reason and Reservation in the batch, ``Preempted`` (RandomPreempt, ReclaimUnfunded), ``Shrunk`` (Shrink) or
  ``SpareDropped`` (DropSpare) — a run that completes or is deleted gets nothing more;
- a Reservation Create: ``ReservationCreated``; a Reservation ``state`` written: ``Activated``, ``Released``,
  ``ReservationFailed`` (Warning), any other state but Pending ``Reservation<State>`` on the Reservation, and
  for Activated and Failed also ``ReservationActivated``/``ReservationFailed`` on its Run.

Names are deterministic: ``<object name>.<16 hex of sha256(regarding, its uid, reason, the identity of the
decision)>``. The identity never holds a time or a sentence — a lease is minted once, closed once, a state is
entered once — so a resync, a retried write or a second replica says the same thing under the same name and
the API server answers 409 AlreadyExists (already said)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from ..engine.lottery import CLOSURE_REASON
from ..model import GPULease, Reservation, Snapshot
from .actions import AnyWrite, Create, ObjectRef, PatchStatus, ReportEvent

NORMAL, WARNING = "Normal", "Warning"
NOTE_LIMIT = 1024  # bytes: the API server refuses a longer note
NAME_ROOM = 200  # characters of the object's name kept in the Event's name (+ "." + 16 hex)

PREEMPTED, SHRUNK, SPARE_DROPPED = "Preempted", "Shrunk", "SpareDropped"
RUN_REASON = {"RandomPreempt": PREEMPTED, "ReclaimUnfunded": PREEMPTED, "Shrink": SHRUNK, "DropSpare": SPARE_DROPPED}
"""The lease closures a Run hears about, and under which reason: those an activation took (Completed and
RunDeleted say nothing the Run does not know)."""
RUN_WORDS = {PREEMPTED: "preempted", SHRUNK: "shrunk", SPARE_DROPPED: "spares dropped"}
WARNING_CLOSURES = frozenset({"RandomPreempt", "ReclaimUnfunded"})
RESERVATION_REASON = {"Activated": "Activated", "Released": "Released", "Failed": "ReservationFailed"}
RESERVATION_ACTION = {"Activated": "Activate", "Released": "Release", "Failed": "Fail"}
RUN_HEARS = {"Activated": "ReservationActivated", "Failed": "ReservationFailed"}
WARNING_STATES = frozenset({"Failed"})
ADMITTED, GROWN = "Admitted", "Grown"


def event_name(ref: ObjectRef, reason: str, identity: Iterable[str]) -> str:
    """``<name>.<hash>``: the same decision about the same object has the same name (a DNS subdomain, as the
    object's name is; a long name is cut)."""
    text = "|".join([ref.kind, ref.namespace, ref.name, ref.uid, reason, *identity])
    return f"{ref.name[:NAME_ROOM].rstrip('.-')}.{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def ledger_events(done: Sequence[tuple[AnyWrite, Any]], snapshot: Snapshot) -> list[ReportEvent]:
    """The Events for ``done``: (write, the object as the API server answered it or None) of the ledger writes
    that were made, in the order they were made. ``snapshot`` (the reconciler's cache) gives what the answers
    do not: the uid of a Run, the Reservation an activation recorded for a lease it shrank, a lease's spec when
    the answer is missing."""
    out: list[ReportEvent] = []
    minted: dict[str, list[GPULease]] = {}  # run -> the leases minted for it
    closed: dict[tuple[str, str, tuple[str, str]], list[GPULease]] = {}  # (run, closureReason, (reservation, seed))
    recorded = _recorded_actions(done, snapshot)
    for write, answer in done:
        if write.kind == "GPULease" and isinstance(write, Create):
            lease = answer if isinstance(answer, GPULease) else _lease_of(write.body)
            if lease is None:
                continue  # not a lease the model reads: nothing true to say about it
            out.append(_minted(lease, snapshot))
            minted.setdefault(lease.run_key, []).append(lease)
        elif write.kind == "GPULease" and isinstance(write, PatchStatus) and write.status.get("closed"):
            lease = answer if isinstance(answer, GPULease) else snapshot.leases_by_key.get(write.key)
            reason = str(write.status.get("closureReason") or "Closed")
            by = _preemption(write.status) or recorded.get(write.key, ("", ""))
            out.append(_closed(write, lease, reason, by, snapshot))
            if lease is not None and reason in RUN_REASON:
                closed.setdefault((lease.run_key, reason, by), []).append(lease)
        elif write.kind == "Reservation" and isinstance(write, Create):
            out.append(_reservation_created(write, answer, snapshot))
        elif write.kind == "Reservation" and isinstance(write, PatchStatus) and write.status.get("state"):
            reservation = answer if isinstance(answer, Reservation) else snapshot.reservations_by_key.get(write.key)
            out += _reservation_state(write, reservation, snapshot)
    out += [_admitted(run_key, leases, snapshot) for run_key, leases in minted.items()]
    out += [_taken(run_key, reason, by, leases, snapshot) for (run_key, reason, by), leases in closed.items()]
    return out


# --- leases -------------------------------------------------------------------------------------------------


def _minted(lease: GPULease, snapshot: Snapshot) -> ReportEvent:
    spec = lease.spec
    paid = "/".join(lease.payer) if lease.payer is not None else "nobody"
    note = (f"minted for run {lease.run_key} group {spec.group}: {lease.gpus} {spec.slice.role} GPUs "
            f"({slots_text(spec.slice.slots)}), paid by {paid}, reason {spec.reason}")
    return _event(_ref("GPULease", lease), "Minted", "Mint", note, NORMAL, ("Create",),
                  related=_run_ref(lease.run_key, snapshot))


def _closed(write: PatchStatus, lease: GPULease | None, reason: str, by: tuple[str, str],
            snapshot: Snapshot) -> ReportEvent:
    if lease is None:
        ref, what, run = ObjectRef(kind="GPULease", namespace=write.namespace, name=write.name), "its GPUs", None
    else:
        ref, run = _ref("GPULease", lease), _run_ref(lease.run_key, snapshot)
        what = f"{lease.gpus} GPUs ({slots_text(lease.spec.slice.slots)}) of run {lease.run_key} group {lease.spec.group}"
    note = f"closed ({reason}): {what}{_by(by)}"
    related = _reservation_ref(by[0], snapshot) if by[0] else run
    return _event(ref, reason, "Close", note, WARNING if reason in WARNING_CLOSURES else NORMAL, ("Close", reason),
                  related=related)


def _lease_list(leases: list[GPULease]) -> str:
    return ", ".join(f"{x.key} (group {x.spec.group}, {x.gpus} {x.spec.slice.role} GPUs: "
                     f"{slots_text(x.spec.slice.slots)})" for x in sorted(leases, key=lambda x: x.key))


def _admitted(run_key: str, leases: list[GPULease], snapshot: Snapshot) -> ReportEvent:
    """One Event on the Run for the leases a batch minted for it: Admitted when some are of its start width."""
    reason = ADMITTED if any(x.spec.reason == "Start" for x in leases) else GROWN
    gpus = sum(x.gpus for x in leases)
    note = f"{reason.lower()}: {gpus} GPUs in {_count(leases, 'lease')}: {_lease_list(leases)}"
    return _event(_run_ref(run_key, snapshot), reason, "Admit" if reason == ADMITTED else "Grow", note, NORMAL,
                  sorted(x.key for x in leases), related=_ref("GPULease", leases[0]) if len(leases) == 1 else None)


def _taken(run_key: str, reason: str, by: tuple[str, str], leases: list[GPULease], snapshot: Snapshot) -> ReportEvent:
    """One Event on the Run for the leases of one closure reason a batch closed for one activation."""
    run_reason = RUN_REASON[reason]
    gpus = sum(x.gpus for x in leases)
    note = (f"{RUN_WORDS[run_reason]} ({reason}){_by(by)}: {gpus} GPUs closed in {_count(leases, 'lease')}: "
            f"{_lease_list(leases)}")
    return _event(_run_ref(run_key, snapshot), run_reason, reason, note,
                  WARNING if reason in WARNING_CLOSURES else NORMAL, [reason, *by, *sorted(x.key for x in leases)],
                  related=_reservation_ref(by[0], snapshot) if by[0] else None)


def _preemption(status: Mapping[str, Any]) -> tuple[str, str] | None:
    preemption = status.get("preemption")
    if isinstance(preemption, Mapping) and preemption.get("reservation"):
        return str(preemption["reservation"]), str(preemption.get("seed") or "")
    return None


def _recorded_actions(done: Sequence[tuple[AnyWrite, Any]], snapshot: Snapshot) -> dict[str, tuple[str, str]]:
    """lease key -> (reservation, seed) of the activation that took it: from an activation written in this
    batch, else from one stored (the closures of Shrink and DropSpare carry no ``preemption``)."""
    out: dict[str, tuple[str, str]] = {}
    for reservation in snapshot.reservations:
        activation = reservation.status.activation
        if activation is not None:
            for action in activation.actions:
                if action.lease and action.kind in CLOSURE_REASON:
                    out[action.lease] = (reservation.key, activation.seed)
    for write, _answer in done:
        activation = write.status.get("activation") if isinstance(write, PatchStatus) else None
        if write.kind == "Reservation" and isinstance(activation, Mapping):
            for action in activation.get("actions") or ():
                if isinstance(action, Mapping) and action.get("lease"):
                    out[str(action["lease"])] = (write.key, str(activation.get("seed") or ""))
    return out


# --- reservations -------------------------------------------------------------------------------------------


def _reservation_created(write: Create, answer: Any, snapshot: Snapshot) -> ReportEvent:
    uid = answer.metadata.uid if isinstance(answer, Reservation) else ""
    ref = ObjectRef(kind="Reservation", namespace=write.namespace, name=write.name, uid=uid)
    spec = write.body.get("spec") or {}
    run = spec.get("runRef") or {}
    run_key = f"{run.get('namespace', write.namespace)}/{run.get('name', '')}"
    scope = spec.get("scope") or {}
    where = "/".join(str(scope[k]) for k in ("flavor", "domain") if scope.get(k))
    paying = spec.get("payingEnvelope") or {}
    payer = "/".join(str(paying[k]) for k in ("budget", "envelope") if paying.get(k)) or "nobody"
    note = (f"created for run {run_key}: {where or 'any'} GPUs from {spec.get('earliestStart', '?')}, paid by "
            f"{payer}{_detail(write.cause)}")
    return _event(ref, "ReservationCreated", "Reserve", note, NORMAL, ("Create",), related=_run_ref(run_key, snapshot))


def _reservation_state(write: PatchStatus, reservation: Reservation | None, snapshot: Snapshot) -> list[ReportEvent]:
    state = str(write.status["state"])
    if state == "Pending":
        return []  # a Reservation is Pending from its Create on: ReservationCreated said it
    status_reason = str(write.status.get("reason") or "")
    ref = _ref("Reservation", reservation) if reservation is not None else ObjectRef(
        kind="Reservation", namespace=write.namespace, name=write.name)
    run_key = reservation.spec.run_ref.key if reservation is not None else ""
    activation = write.status.get("activation")
    if state == "Activated" and isinstance(activation, Mapping):
        note = _activation_text(activation)
    else:
        detail = write.status.get("message") or write.cause
        note = f"{state.lower()}{f' ({status_reason})' if status_reason else ''}" \
               f"{f' for run {run_key}' if run_key else ''}{_detail(str(detail or ''))}"
    reason = RESERVATION_REASON.get(state, f"Reservation{_word(state)}")
    kind = WARNING if state in WARNING_STATES else NORMAL
    action = RESERVATION_ACTION.get(state, _word(state))
    identity = (state, status_reason)
    run_ref = _run_ref(run_key, snapshot) if run_key else None
    out = [_event(ref, reason, action, note, kind, identity, related=run_ref)]
    if run_ref is not None and state in RUN_HEARS:
        out.append(_event(run_ref, RUN_HEARS[state], action, f"reservation {ref.namespace}/{ref.name} {note}", kind,
                          (write.key, *identity), related=ref))
    return out


def _activation_text(activation: Mapping[str, Any]) -> str:
    taken: dict[str, int] = {}
    for action in activation.get("actions") or ():
        if isinstance(action, Mapping):
            kind = str(action.get("kind", ""))
            taken[kind] = taken.get(kind, 0) + int(action.get("gpus") or 0)
    summary = ", ".join(f"{kind} {gpus}" for kind, gpus in taken.items()) or "nothing taken"
    return (f"activated at {activation.get('at', '?')} with seed {activation.get('seed', '?')}: deficit "
            f"{activation.get('deficitGPUs', 0)} GPUs, freed {activation.get('freedGPUs', 0)} ({summary}), "
            f"conflict set {len(activation.get('conflictSet') or ())} groups")


# --- words and references -----------------------------------------------------------------------------------


def slots_text(slots: Sequence[str]) -> str:
    """``n1#0-7, n2#3``: the GPUs by node, runs of ordinals folded (a 64-GPU lease stays one short line)."""
    by_node: dict[str, list[int]] = {}
    odd: list[str] = []
    for slot in slots:
        node, _, ordinal = slot.rpartition("#")
        if node and ordinal.isdigit():
            by_node.setdefault(node, []).append(int(ordinal))
        else:
            odd.append(slot)
    parts = []
    for node, ordinals in by_node.items():
        ordinals = sorted(set(ordinals))
        spans: list[str] = []
        first = last = ordinals[0]
        for value in [*ordinals[1:], None]:
            if value is not None and value == last + 1:
                last = value
                continue
            spans.append(str(first) if first == last else f"{first}-{last}")
            if value is not None:
                first = last = value
        parts.append(f"{node}#{','.join(spans)}")
    return ", ".join(parts + odd)


def _by(by: tuple[str, str]) -> str:
    reservation, seed = by
    if not reservation:
        return ""
    return f" by reservation {reservation}" + (f" with seed {seed}" if seed else "")


def _detail(text: str) -> str:
    return f": {text}" if text else ""


def _count(items: Sequence[Any], word: str) -> str:
    return f"{len(items)} {word}{'' if len(items) == 1 else 's'}"


def _word(state: str) -> str:
    """A state as one CamelCase word (an Event reason is machine-readable)."""
    return "".join(part[:1].upper() + part[1:] for part in state.replace("-", " ").replace("_", " ").split())


def _ref(kind: str, obj: Any) -> ObjectRef:
    return ObjectRef(kind=kind, namespace=obj.namespace, name=obj.name, uid=obj.metadata.uid)


def _run_ref(run_key: str, snapshot: Snapshot | None) -> ObjectRef:
    namespace, _, name = run_key.partition("/")
    run = snapshot.runs_by_key.get(run_key) if snapshot is not None else None
    return ObjectRef(kind="Run", namespace=namespace, name=name, uid=run.metadata.uid if run is not None else "")


def _reservation_ref(key: str, snapshot: Snapshot | None) -> ObjectRef:
    namespace, _, name = key.partition("/")
    found = snapshot.reservations_by_key.get(key) if snapshot is not None else None
    return ObjectRef(kind="Reservation", namespace=namespace, name=name,
                     uid=found.metadata.uid if found is not None else "")


def _lease_of(body: Mapping[str, Any]) -> GPULease | None:
    try:
        return msgspec.convert({k: v for k, v in body.items() if k != "status"}, GPULease)
    except (msgspec.ValidationError, TypeError):
        return None


def _event(ref: ObjectRef, reason: str, action: str, note: str, kind: str, identity: Iterable[str], *,
           related: ObjectRef | None = None) -> ReportEvent:
    encoded = note.encode()
    if len(encoded) > NOTE_LIMIT:
        note = encoded[: NOTE_LIMIT - 4].decode(errors="ignore") + " …"
    return ReportEvent(kind=ref.kind, namespace=ref.namespace, name=ref.name, uid=ref.uid,
                       cause=f"event {reason} on {ref.kind} {ref.namespace}/{ref.name}",
                       event=event_name(ref, reason, identity), type=kind, reason=reason, verb=action[:128],
                       note=note, related=related)
