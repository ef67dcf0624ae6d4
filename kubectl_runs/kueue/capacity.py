"""A request beyond a ClusterQueue's maximum capacity: more than the queue could ever get in a flavor (its
nominal quota plus what it may borrow from its cohort, with nothing in use anywhere — ``QuotaNode.potential``).
Kueue 0.12 says ``request > maximum capacity (32 > 20)`` for such a flavor. When every flavor a pod set could
use (the ones not excluded by a taint, node affinity or absence) is beyond its maximum, the workload can never be
admitted by that queue as configured: no preemption, no waiting, no other workload finishing changes that.
Pure."""

from __future__ import annotations

from dataclasses import dataclass

from .assign import EXCLUDED, TOO_BIG, Assignment, PodSetChoice


@dataclass(frozen=True)
class BeyondCapacity:
    """One pod set's request in one flavor, larger than the most the queue can ever admit there."""

    pod_set: str
    flavor: str
    resource: str
    request: int  # this pod set's request plus its earlier pod sets' in the flavor (Kueue's units: GPUs for GPUs)
    maximum: int  # the queue's maximum capacity there: the number after ">" in Kueue's message
    asked: int  # this pod set's own request (``request`` less the earlier pod sets')

    def asks(self, show) -> str:
        """``N resource`` and, when earlier pod sets add to it in the flavor, the total."""
        text = f"{show(self.asked, self.resource)} {self.resource}"
        if self.request != self.asked:
            text += f" ({show(self.request, self.resource)} with the earlier pod sets in {self.flavor})"
        return text


def beyond_capacity(assignment: Assignment) -> tuple[BeyondCapacity, ...]:
    """Every (pod set, flavor) Kueue's assigner found too big, with the resource that is, in the order tried."""
    out = []
    for choice in assignment.pod_sets:
        for attempt in choice.tries:
            if attempt.verdict != TOO_BIG or not attempt.resources:
                continue
            tried = attempt.resources[-1]  # the assigner stops at the first resource beyond the maximum
            out.append(BeyondCapacity(choice.pod_set, attempt.flavor, tried.resource, tried.request, tried.maximum,
                                      choice.requests.get(tried.resource, tried.request)))
    return tuple(out)


def never_fits(choice: PodSetChoice) -> bool:
    """Every flavor the pod set could use is too big for the queue (at least one was tried)."""
    verdicts = [t.verdict for t in choice.tries]
    return TOO_BIG in verdicts and all(v in (TOO_BIG, EXCLUDED) for v in verdicts)


def never_admitted(assignment: Assignment | None) -> bool:
    """The queue as configured can never admit the workload: some pod set fits no flavor's maximum capacity."""
    return assignment is not None and any(never_fits(c) for c in assignment.pod_sets)
