"""kube-scheduler's own verdict on a pod, read back: its ``0/N nodes are available: …`` message (from the pod's
PodScheduled condition, or its latest FailedScheduling Event) parsed into the node count and the nodes per
reason, so that ``explain pod`` can put it beside ours and say where the two differ."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .model import Event, Pod

_VERDICT = re.compile(r"^0/(?P<nodes>\d+) nodes are available: (?P<reasons>.*?)\.(?: (?:still not schedulable, )?preemption: .*)?$", re.S)
_REASON = re.compile(r"(\d+) ((?:[^,{]|\{[^}]*\})+)")


@dataclass(frozen=True)
class SchedulerVerdict:
    message: str  # as the scheduler wrote it
    source: str  # "PodScheduled condition" or "FailedScheduling Event"
    nodes: int | None  # N of "0/N nodes": None when the message is not a filter verdict
    counts: dict[str, int]  # nodes per reason


def parse(message: str) -> tuple[int, dict[str, int]] | None:
    """(N, {reason: nodes}) of a ``0/N nodes are available: …`` message, or None for another message."""
    found = _VERDICT.match(message.strip())
    if not found:
        return None
    return int(found["nodes"]), {reason.strip(): int(n) for n, reason in _REASON.findall(found["reasons"])}


def scheduler_verdict(pod: Pod, events: tuple[Event, ...]) -> SchedulerVerdict | None:
    """The newest word of the scheduler on ``pod``: its FailedScheduling Event, else its PodScheduled=False
    condition; None when it has said nothing (another scheduler's pod, a gated pod, or not tried yet)."""
    mine = [e for e in events if e.reason == "FailedScheduling" and e.involved_object.name == pod.metadata.name
            and e.metadata.namespace == pod.metadata.namespace
            and (not e.involved_object.uid or not pod.metadata.uid or e.involved_object.uid == pod.metadata.uid)]
    if mine:
        latest = max(mine, key=lambda e: (e.when is not None, e.when or 0, e.count))
        return _verdict(latest.message, "FailedScheduling Event")
    condition = pod.condition("PodScheduled")
    if condition is not None and condition.status == "False" and condition.message:
        return _verdict(condition.message, "PodScheduled condition")
    return None


def _verdict(message: str, source: str) -> SchedulerVerdict:
    parsed = parse(message)
    return SchedulerVerdict(message, source, parsed[0] if parsed else None, parsed[1] if parsed else {})
