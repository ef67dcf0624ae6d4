"""`explain workload` on a request beyond the ClusterQueue's maximum capacity (nominal quota plus what it may
borrow, per flavor): the maximum as a typed field (``beyondCapacity[].maximumCapacity``, the number Kueue prints
after ">"), ``neverAdmitted`` when no flavor the pod set could use can ever hold it, the table's "Never:" line
and the remedy. tests/integration/test_kueue_manager.py checks the maximum against Kueue's own manager."""

from __future__ import annotations

import json
import re

import jsonschema
from kueue_builders import AMD, GPU, cluster_queue, flavor, group, local_queue, node, pod_set, quota, workload
from test_kueue_explain import EXAMPLE, explained, run
from test_kueue_report_bytes import ROOT

from kubectl_runs.kueue.model import QUEUE_KINDS
from kubectl_runs.kueue.reports import plain

SCHEMA = json.loads((ROOT / "docs" / "schemas" / "explain-workload.schema.json").read_text())
_MAX = re.compile(r"request > maximum capacity \((\d+) > (\d+)\)")


def _fleet(*workloads: dict, lender: bool = True) -> list[dict]:
    """team-a: h100 nominal 8, borrowing limit 4, lending limit 4; team-b: h100 nominal 8, lending limit 4 (both
    in cohort research unless ``lender`` is false); team-a also a100 nominal 2. team-a's maximum in h100 = 4 kept + min(cohort pool 8,
    8 − 4 + 4) = 12."""
    return [
        node("n1", {"gpu": "h100"}, 8), node("n2", {"gpu": "h100"}, 8), node("n3", {"gpu": "a100"}, 8),
        flavor("h100"), flavor("a100"),
        flavor("tainted", {"gpu": "t"}, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]),
        cluster_queue("team-a", group([GPU], ("tainted", [quota(GPU, 64)]), ("h100", [quota(GPU, 8, 4, 4)]),
                                      ("a100", [quota(GPU, 2)])), cohort="research"),
        cluster_queue("team-b", group([GPU], ("h100", [quota(GPU, 8, lending=4)])), cohort="research" if lender else ""),
        local_queue("ns", "q", "team-a"),
        *workloads,
    ]


def _snap(*objects):
    from kueue_builders import snapshot

    return snapshot(*objects)


def test_beyond_every_flavor_it_could_use_is_never_admitted():
    """32 GPUs: h100's maximum 12 (8 nominal, 4 of it kept, the cohort pool of 8 capped by the borrowing limit at
    8), a100's 2; the tainted flavor (64) is excluded, so it does not count as one that could hold it."""
    objects = _fleet(workload("ns", "huge", pod_set(4, {GPU: 8})))
    info = explained(_snap(*objects), "ns/huge")
    assert [(b.pod_set, b.flavor, b.resource, b.request, b.maximum) for b in info.beyond_capacity] == [
        ("main", "h100", GPU, 32, 12), ("main", "a100", GPU, 32, 2)]
    assert info.never_admitted is True
    report = plain(info.report)
    assert report["beyondCapacity"] == [
        {"podSet": "main", "flavor": "h100", "resource": GPU, "request": 32, "maximumCapacity": 12},
        {"podSet": "main", "flavor": "a100", "resource": GPU, "request": 32, "maximumCapacity": 2}]
    assert report["neverAdmitted"] is True
    jsonschema.validate(report, SCHEMA)
    # each maximum is the one in the message Kueue would write for that flavor
    for entry, reason in zip(report["beyondCapacity"], [f.reasons[0] for f in info.flavors if f.verdict == "TooBig"],
                             strict=True):
        assert _MAX.search(reason).groups() == (str(entry["request"]), str(entry["maximumCapacity"]))
    (remedy,) = [r for r in info.remedies if r.kind == "RaiseQuota"]
    assert remedy.gpus == 20 and "can never admit more than 12 in flavor h100" in remedy.message


def test_alone_in_its_cohort_the_maximum_is_what_it_keeps_plus_what_it_lends_itself():
    """team-b outside the cohort: research pools only team-a's lendable 4, so h100's maximum is 4 + 4 = 8."""
    info = explained(_snap(*_fleet(workload("ns", "w", pod_set(2, {GPU: 8})), lender=False)), "ns/w")
    assert [(b.flavor, b.request, b.maximum) for b in info.beyond_capacity] == [("h100", 16, 8), ("a100", 16, 2)]
    assert info.never_admitted is True


def test_too_big_in_one_flavor_but_not_another_is_not_never():
    """10 GPUs: beyond a100's maximum (2) but within h100's (12): Kueue may admit it in h100 one day."""
    objects = _fleet(workload("ns", "w", pod_set(1, {GPU: 10})))
    info = explained(_snap(*objects), "ns/w")
    assert info.never_admitted is False
    assert all(b.flavor != "h100" for b in info.beyond_capacity)
    assert plain(info.report)["neverAdmitted"] is False


def test_within_capacity_and_admitted_workloads_have_none():
    from kubectl_runs.sources.files import load_snapshot

    snap = load_snapshot([EXAMPLE])
    for key in ("team-a/a-eval-3", "team-b/b-mi-2", "team-a/a-train-1", "team-c/c-small-1"):
        report = plain(explained(snap, key).report)
        assert (report["beyondCapacity"], report["neverAdmitted"]) == ([], False), key


def test_the_table_says_it_can_never_be_admitted(capsys, tmp_path):
    objects = _fleet(workload("ns", "huge", pod_set(4, {GPU: 8})), workload("ns", "amd", pod_set(1, {AMD: 1})))
    path = tmp_path / "f.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {**o, "apiVersion": "v1" if o["kind"] == "Node" else
         ("kueue.x-k8s.io/v1beta1" if o["kind"] in QUEUE_KINDS else "v1")} for o in objects]}))
    code, out, err = run(capsys, "explain", "workload", "ns/huge", "--snapshot", str(path))
    assert (code, err) == (0, "")
    never = [line for line in out.splitlines() if line.startswith("Never:")]
    assert never, out
    text = " ".join(line.strip() for line in out.split("Never:")[1].split("\n\n")[0].splitlines())
    assert text.startswith("pod set main asks 32 nvidia.com/gpu, the most ClusterQueue team-a can ever admit is "
                           "12 in h100, 2 in a100 (nominal quota plus what it may borrow)")
    assert "Position:" in text  # the next labelled line follows
    assert "it can never be admitted by ClusterQueue team-a as configured" in text
    # a resource the queue does not cover is not "beyond capacity" (it has its own reason and remedy)
    code, out, _ = run(capsys, "explain", "workload", "ns/amd", "--snapshot", str(path), "-o", "json")
    data = json.loads(out)
    assert (data["beyondCapacity"], data["neverAdmitted"]) == ([], False)
    assert "amd.com/gpu unavailable in ClusterQueue" in data["message"]


def test_a_later_pod_set_and_a_resource_in_kueue_units():
    """Pod set b's 8 GPUs come after a's 2 in the only flavor: 10 > 8, said as "8 (10 with the earlier pod
    sets)". cpu is in millicores in JSON (Kueue's units) and in cores in the text, as Kueue prints it."""
    snap = _snap(
        node("n1", {"gpu": "h100"}, 8), flavor("h100"),
        cluster_queue("q", group(["cpu", GPU], ("h100", [quota("cpu", 1), quota(GPU, 8)]))),
        local_queue("ns", "q", "q"),
        workload("ns", "second", pod_set(1, {GPU: 2}, name="a"), pod_set(1, {GPU: 8}, name="b")),
        workload("ns", "cpu", pod_set(2, {"cpu": 1, GPU: 1})),
    )
    info = explained(snap, "ns/second")
    (b,) = info.beyond_capacity
    assert (b.pod_set, b.request, b.maximum, b.asked, info.never_admitted) == ("b", 10, 8, 8, True)
    assert info.may_use == {"a": "h100", "b": ""}
    (remedy,) = [r for r in info.remedies if r.kind == "RaiseQuota"]
    assert remedy.gpus == 2
    assert remedy.message.startswith("pod set b asks 8 nvidia.com/gpu (10 with the earlier pod sets in h100) but")
    info = explained(snap, "ns/cpu")
    assert plain(info.report)["beyondCapacity"] == [
        {"podSet": "main", "flavor": "h100", "resource": "cpu", "request": 2000, "maximumCapacity": 1000}]
    assert info.assignment_message.endswith("request > maximum capacity (2 > 1)")
    assert info.never_admitted is True
    assert not [r for r in info.remedies if r.kind == "RaiseQuota"]  # remedies are in GPUs: none for cpu
