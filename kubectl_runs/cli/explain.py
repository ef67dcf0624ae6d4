"""``kubectl runs explain RUN``: everything about one run on one screen (API.md §5); ``explain workload NAME``
and ``explain kaiwojob NAME``: Kueue's view of one pending workload (views/queues.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from ..engine.explain import explain_run
from ..errors import UsageError, UserError
from ..views.explain import explain_document
from .completion import complete_runs
from .options import Command, RunCommand, global_options
from .watch_flags import watch_options

if TYPE_CHECKING:
    from ..model import Snapshot
    from ..render import Document

# `explain workload NAME` / `explain kaiwojob NAME`: Kueue's view (views/queues.py), beside `explain RUN`.
QUEUED_KINDS = {"workload": "Workload", "workloads": "Workload", "wl": "Workload", "kaiwojob": "KaiwoJob",
                "kaiwojobs": "KaiwoJob", "kaiwoservice": "KaiwoService", "kaiwoservices": "KaiwoService"}
POD_WORDS = ("pod", "pods", "po")


@click.command("explain")
@click.argument("words", metavar="RUN", nargs=-1, required=True, shell_complete=complete_runs)
@global_options
@watch_options
@click.pass_context
def explain(ctx: click.Context, words: tuple[str, ...]) -> int:
    """Everything about RUN on one screen: its phase and width, how its GPUs are funded (owned, shared,
    borrowed, unfunded, and from which lenders), its plan (as `kubectl runs plan`), its reservation, its
    leases, and its preemption history — each preempting reservation with its seed, checked as
    `kubectl runs seeds verify` does. Against a cluster it also shows the run's recent Events.

    RUN is NAME or NAMESPACE/NAME; NAME is looked up in the namespace of -n, else of the kubeconfig context,
    else default; with -A in every namespace (it must be unique there).

    `explain pod NAME` explains a pending GPU pod: kube-scheduler's own verdict beside its filters recomputed here,
    node by node for the nodes nearest to fitting, the deficit (not enough GPUs anywhere, or fragmented), and
    remedies that name the pods holding GPUs, the taint, the cordoned node or the label. NAME may be the pod's
    workload (a Deployment, a Job, a Run…): its oldest pending pod, or, when a ResourceQuota refuses its pods, the
    quota and how much to raise it.

    `explain workload NAME` and `explain kaiwojob NAME` explain a Kueue Workload instead (a KaiwoJob through
    the Workload Kaiwo made for it): the GPUs it asks, the flavor it may use and why the others were ruled out,
    its shortfall (own quota, cohort borrowing, nodes), its place in the queue, Kueue's own message and remedies.

    \b
    Examples:
      kubectl runs explain pretrain-32 -n rai-sys
      kubectl runs explain lab-scratch-8 -n shared-lab -o yaml
      kubectl runs explain pretrain-32 -n rai-sys --snapshot fleet.yaml --at 2025-11-20T12:00:00Z
      kubectl runs explain workload a-eval-3 -n team-a
      kubectl runs explain kaiwojob mi-finetune -n team-b -o json
      kubectl runs explain pod research/train-0
      kubectl runs explain pod research/train        # the Job train
    """
    if len(words) == 2 and words[0].lower() in POD_WORDS:
        return ExplainPodOptions(words[0].lower(), words[1]).run(ctx)
    if len(words) == 2 and words[0].lower() in QUEUED_KINDS:
        return ExplainQueuedOptions(words[0].lower(), words[1]).run(ctx)
    if len(words) != 1:
        raise UsageError(f"explain takes RUN, or workload NAME, or kaiwojob NAME; got {' '.join(words)!r}")
    return ExplainOptions(words[0]).run(ctx)


@dataclass
class ExplainOptions(RunCommand):
    def evaluate(self, snapshot: Snapshot) -> Document:
        opts = self.opts
        run = self.run_of(snapshot)
        namespace = run.metadata.namespace
        at = opts.evaluation_time(snapshot)
        events = None
        if not opts.snapshots:  # live: the run's Events too (a snapshot has none)
            from ..sources.cluster import recent_events

            events = recent_events(opts.source(namespace), namespace, "Run", run.metadata.name, uid=run.metadata.uid)
        return explain_document(explain_run(snapshot, run, at, events=events, read=opts.wall_clock), self.fmt)


@dataclass
class ExplainQueuedOptions(Command):
    """``explain workload NAME`` / ``explain kaiwojob NAME`` / ``explain kaiwoservice NAME``."""

    kind_word: str
    name: str
    queues = True

    def validate(self) -> None:
        self.opts.object_ref(self.kind_word, self.name)

    def evaluate(self, snapshot: Snapshot) -> Document:
        from ..kueue.explain import NoWorkload, explain_workload, workload_of_kaiwo
        from ..views.queues import workload_document

        kind = QUEUED_KINDS[self.kind_word]
        kaiwo = None
        if kind == "Workload":
            workload = self.opts.find("workload", self.name, {w.key: w for w in snapshot.queues.workloads})
        else:
            objects = snapshot.queues.kaiwo_jobs if kind == "KaiwoJob" else snapshot.queues.kaiwo_services
            found = self.opts.find(kind.lower(), self.name, {o.key: o for o in objects})
            try:
                workload = workload_of_kaiwo(snapshot, kind, found.namespace, found.name)
            except NoWorkload as exc:
                raise UserError(str(exc)) from None
            kaiwo = f"{kind} {found.key}"
        return workload_document(explain_workload(snapshot, workload, kaiwo=kaiwo), self.fmt)


@dataclass
class ExplainPodOptions(Command):
    """``explain pod NAME``: one pending GPU pod (kubectl_runs.pods.explain)."""

    kind_word: str
    name: str

    def validate(self) -> None:
        self.opts.object_ref("pod", self.name)

    pods = True

    def load(self) -> Snapshot:
        return self.opts.load(None, pods=True)

    def evaluate(self, snapshot: Snapshot) -> Document:
        from ..pods.explain import explain_pod
        from ..pods.model import Pod
        from ..views.pod import pod_document

        pods = {p.key: p for p in snapshot.pods.pods}
        namespace, short = self.opts.object_ref("pod", self.name)
        if not (namespace is not None and f"{namespace}/{short}" in pods):
            by_workload = _workload_target(snapshot, namespace, short)
            if by_workload is not None:
                if not isinstance(by_workload, Pod):
                    from ..pods.explain import explain_refused

                    return pod_document(explain_refused(snapshot, by_workload))
                pods = {**pods, f"{namespace or by_workload.metadata.namespace}/{short}": by_workload}
        pod = self.opts.find("pod", self.name, pods)
        events = ()
        if not self.opts.snapshots:  # live: the pod's FailedScheduling Events (a snapshot holds its own)
            events = _scheduling_events(self.opts, pod)
        return pod_document(explain_pod(snapshot, pod, events))


def _workload_target(snapshot: Snapshot, namespace: str | None, name: str):
    """``explain pod WORKLOAD``: the workload's oldest pending GPU pod (GPUs asked or claimed through DRA), else (no pod of it exists) its controller's
    quota refusal (kubectl_runs.pods.quota), else None."""
    from ..pods.claim_reasons import claiming_pods
    from ..pods.claims import ClaimIndex, gpu_claims
    from ..pods.owners import workload_of
    from ..pods.pending import is_pending_gpu_pod
    from ..pods.quota import rejections

    pods = snapshot.pods
    index = ClaimIndex.of(pods)
    claiming = {id(p) for p in claiming_pods(pods.pods) if gpu_claims(p, pods, index)}  # GPUs claimed through DRA
    mine = [p for p in pods.pods if (is_pending_gpu_pod(p) or id(p) in claiming) and workload_of(p).name == name
            and namespace in (None, p.metadata.namespace)]
    if mine:
        return min(mine, key=lambda p: (p.metadata.creation_timestamp is None, p.metadata.creation_timestamp
                                        or 0, p.metadata.name))
    return next((r for r in rejections(snapshot.pods.events, snapshot.pods.pods)
                 if r.owner_name == name and namespace in (None, r.namespace)), None)


def _scheduling_events(opts, pod) -> tuple:
    import msgspec

    from ..pods.model import Event
    from ..sources.cluster import recent_events

    meta = pod.metadata
    found = recent_events(opts.source(meta.namespace), meta.namespace, "Pod", meta.name, uid=meta.uid)
    return tuple(msgspec.convert({
        "kind": "Event", "metadata": {"name": f"{meta.name}.{i}", "namespace": meta.namespace},
        "involvedObject": {"kind": "Pod", "name": meta.name, "namespace": meta.namespace, "uid": meta.uid},
        "reason": e["reason"], "message": e["message"], "count": e["count"],
        "lastTimestamp": e["at"] if e["at"].endswith("Z") else None}, Event)
        for i, e in enumerate(found) if e["reason"] == "FailedScheduling")
