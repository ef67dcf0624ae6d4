"""`explain workload` / `explain kaiwojob`: the flavor a workload may use and why the others were ruled out
(in Kueue's words), the shortfall split into own quota, cohort borrowing and nodes, its place in the queue, and
remedies naming objects; and the commands themselves (exact output, exit codes), beside `explain RUN`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kueue_builders import (
    AMD,
    GPU,
    cluster_queue,
    flavor,
    group,
    local_queue,
    node,
    pod_set,
    quota,
    snapshot,
    workload,
)

from kubectl_runs.cli.main import main
from kubectl_runs.kueue.explain import explain_workload
from kubectl_runs.sources.files import load_snapshot

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "kueue-fleet.yaml")


def explained(snap, key):
    found = next(w for w in snap.queues.workloads if w.key == key)
    return explain_workload(snap, found)


def test_example_pending_workloads_match_kueue_messages():
    """Each pending workload of the example carries the QuotaReserved message Kueue wrote; ours is the same."""
    snap = load_snapshot([EXAMPLE])
    for key in ("team-a/a-eval-3", "team-a/a-eval-4", "team-b/b-mi-2", "team-c/c-small-1"):
        info = explained(snap, key)
        assert info.matches_kueue is True, (key, info.assignment_message, info.kueue_message)


def test_shortfall_split_own_cohort_and_nodes():
    """team-b/b-mi-2 asks 2 pods × 8 amd.com/gpu = 16 in mi300x. Own quota: 16 nominal − 8 reserved = 8 free,
    short 8; the cohort lends nothing more (team-b is the only mi300x member): Kueue's "8 more needed". Nodes:
    two of 8; b-mi-1's 8-GPU pod fills one, so 1 of the 2 pods fits: short 1 pod = 8 GPUs."""
    (s,) = explained(load_snapshot([EXAMPLE]), "team-b/b-mi-2").shortfalls
    assert (s.flavor, s.resource, s.needed, s.own_free, s.own_short, s.cohort_free, s.quota_short) == (
        "mi300x", AMD, 16, 8, 8, 0, 8)
    assert (s.pods, s.pods_fit, s.physical_short, s.nodes) == (2, 1, 8, 2)


def test_ruled_out_flavors_say_why_in_kueues_words():
    """Flavors in order: tainted (untolerated), missing, another zone (affinity), too small for ever (4 < 6),
    then one that fits by borrowing from the cohort (whenCanBorrow: Borrow stops there)."""
    snap = snapshot(
        node("n1", {"gpu": "big", "zone": "a"}, 8),
        flavor("tainted", {"gpu": "t", "zone": "a"}, taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]),
        flavor("elsewhere", {"gpu": "e", "zone": "b"}),
        flavor("small", {"gpu": "s", "zone": "a"}),
        flavor("big", {"gpu": "big", "zone": "a"}),
        cluster_queue("q", group([GPU], ("tainted", [quota(GPU, 8)]), ("ghost", [quota(GPU, 8)]),
                                 ("elsewhere", [quota(GPU, 8)]), ("small", [quota(GPU, 4)]),
                                 ("big", [quota(GPU, 2)])), cohort="c"),
        cluster_queue("lender", group([GPU], ("big", [quota(GPU, 8)])), cohort="c"),
        local_queue("ns", "q", "q"),
        workload("ns", "w", pod_set(1, {GPU: 6}, nodeSelector={"zone": "a"})),
    )
    info = explained(snap, "ns/w")
    assert [(f.flavor, f.verdict, f.reasons) for f in info.flavors] == [
        ("tainted", "Excluded", ("untolerated taint dedicated=ml:NoSchedule in flavor tainted",)),
        ("ghost", "Excluded", ("flavor ghost not found",)),
        ("elsewhere", "Excluded", ("flavor elsewhere doesn't match node affinity",)),
        ("small", "TooBig", ("insufficient quota for nvidia.com/gpu in flavor small, request > maximum capacity "
                             "(6 > 4)",)),
        ("big", "FitsByBorrowing", ()),
    ]
    assert info.may_use == {"main": "big"}
    assert info.assignment_message == ""  # it fits: Kueue admits it at its next pass
    assert info.notes == ("it fits ClusterQueue q now: Kueue admits it at its next scheduling pass",)


def test_when_can_borrow_try_next_flavor_prefers_own_quota():
    """whenCanBorrow: TryNextFlavor: h100 would need borrowing (own 2 < 4), so Kueue moves on to a100, where
    its own quota (4) suffices."""
    snap = snapshot(
        flavor("h100"), flavor("a100"),
        cluster_queue("q", group([GPU], ("h100", [quota(GPU, 2)]), ("a100", [quota(GPU, 4)])), cohort="c",
                      flavorFungibility={"whenCanBorrow": "TryNextFlavor"}),
        cluster_queue("lender", group([GPU], ("h100", [quota(GPU, 8)])), cohort="c"),
        local_queue("ns", "q", "q"),
        workload("ns", "w", pod_set(1, {GPU: 4})),
    )
    info = explained(snap, "ns/w")
    assert [(f.flavor, f.verdict) for f in info.flavors] == [("h100", "FitsByBorrowing"), ("a100", "Fits")]
    assert info.pod_sets[0].flavors == {GPU: "a100"}


def test_a_resource_the_queue_does_not_cover():
    snap = snapshot(flavor("h100"), cluster_queue("q", group([GPU], ("h100", [quota(GPU, 8)]))),
                    local_queue("ns", "q", "q"), workload("ns", "w", pod_set(1, {GPU: 1, "cpu": 2})))
    info = explained(snap, "ns/w")
    assert info.assignment_message == "couldn't assign flavors to pod set main: resource cpu unavailable in ClusterQueue"
    assert info.remedies[0].message.startswith("ClusterQueue q covers no cpu")


def test_queue_position_priority_then_creation_time():
    """Pending in q: hi (priority 10, created 12:00), old (0, 09:00), new (0, 11:00). Kueue's order: hi, old, new;
    `new` is third with 1 + 2 = 3 GPUs ahead of it."""
    snap = snapshot(
        flavor("h100"), cluster_queue("q", group([GPU], ("h100", [quota(GPU, 0)]))), local_queue("ns", "q", "q"),
        workload("ns", "new", pod_set(1, {GPU: 4}), priority=0, created="2025-11-20T11:00:00Z"),
        workload("ns", "old", pod_set(1, {GPU: 2}), priority=0, created="2025-11-20T09:00:00Z"),
        workload("ns", "hi", pod_set(1, {GPU: 1}), priority=10, created="2025-11-20T12:00:00Z"),
    )
    position = explained(snap, "ns/new").position
    assert (position.position, position.pending, position.ahead, position.gpus_ahead) == (
        3, 3, ("ns/hi", "ns/old"), 3)


def test_remedies_name_lenders_preemption_and_borrowing_limit():
    """q (nominal 4, borrowingLimit 2, preempts LowerPriority) holds 4 with a priority-0 workload and borrows
    2 more with another; it asks 4 at priority 5. The cohort: lender (nominal 8, lendingLimit 2) uses 0, so it keeps
    6 behind its lending limit and lends 2 — which q already borrows. Available to q: 0. Remedies: preempt the two
    priority-0 workloads (the newest first), raise lender's lendingLimit (6 locked), raise q's nominal quota. The
    one 16-GPU node has 16 − 6 = 10 free: no node pool to grow."""
    snap = snapshot(
        node("n1", {"gpu": "h100"}, 16), flavor("h100"),
        cluster_queue("q", group([GPU], ("h100", [quota(GPU, 4, borrowing=2)])), cohort="c",
                      preemption={"withinClusterQueue": "LowerPriority"}),
        cluster_queue("lender", group([GPU], ("h100", [quota(GPU, 8, lending=2)])), cohort="c"),
        local_queue("ns", "q", "q"),
        workload("ns", "low-old", pod_set(1, {GPU: 4}), priority=0, created="2025-11-20T08:00:00Z", admitted_in="q",
                 flavors=[{GPU: "h100"}]),
        workload("ns", "low-new", pod_set(1, {GPU: 2}), priority=0, created="2025-11-20T09:00:00Z", admitted_in="q",
                 flavors=[{GPU: "h100"}]),
        workload("ns", "want", pod_set(1, {GPU: 4}), priority=5),
    )
    info = explained(snap, "ns/want")
    (s,) = info.shortfalls
    assert (s.own_free, s.cohort_free, s.quota_short) == (0, 0, 4)
    kinds = [(r.kind, r.gpus, r.objects) for r in info.remedies]
    assert kinds == [
        ("Preempt", 4, ("Workload ns/low-new", "Workload ns/low-old")),
        ("Lend", 4, ("ClusterQueue lender",)),
        ("RaiseQuota", 4, ("ClusterQueue q",)),
    ]
    assert info.remedies[1].message == ("ClusterQueue lender keeps 6 nvidia.com/gpu of flavor h100 unused behind "
                                        "lendingLimit 2: raising it to 6 lends 4")


def test_the_borrowing_limit_remedy_when_it_binds():
    """q nominal 0, borrowingLimit 2; lender lends 8 and uses none. q holds 2 (borrowed) and asks 4 more: the
    cohort has 6 free but q's limit leaves 0. Raising the limit by 4 covers it."""
    snap = snapshot(
        flavor("h100"),
        cluster_queue("q", group([GPU], ("h100", [quota(GPU, 0, borrowing=2)])), cohort="c"),
        cluster_queue("lender", group([GPU], ("h100", [quota(GPU, 8)])), cohort="c"),
        local_queue("ns", "q", "q"),
        workload("ns", "held", pod_set(1, {GPU: 2}), admitted_in="q", flavors=[{GPU: "h100"}]),
        workload("ns", "want", pod_set(1, {GPU: 4})),
    )
    info = explained(snap, "ns/want")
    assert info.assignment_message == ("couldn't assign flavors to pod set main: insufficient quota for "
                                       "nvidia.com/gpu in flavor h100, request > maximum capacity (4 > 2)")
    assert info.may_use == {"main": ""}  # too big for ever, as long as the limit stays


# --- the commands ------------------------------------------------------------------------------------------


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_workload_table(capsys):
    code, out, err = run(capsys, "explain", "workload", "c-small-1", "-n", "team-c", "--snapshot", EXAMPLE)
    assert (code, err) == (0, "")
    assert out.splitlines()[:6] == [
        "Workload:   team-c/c-small-1, Pending, priority 100 (low)",
        "Queue:      team-c/default -> ClusterQueue team-c in cohort research",
        "Asks:       pod set main: 1 × 4 nvidia.com/gpu",
        "Flavor:     pod set main: h100",
        'Kueue says: Pending: "couldn\'t assign flavors to pod set main: flavor a100 doesn\'t match node',
        '            affinity, insufficient unused quota for nvidia.com/gpu in flavor h100, 4 more needed"',
    ]
    assert "main     a100    Excluded      flavor a100 doesn't match node affinity" in out
    assert all(len(line) <= 100 for line in out.splitlines())


def test_explain_kaiwojob_resolves_its_workload(capsys):
    code, out, err = run(capsys, "explain", "kaiwojob", "team-b/mi-finetune", "--snapshot", EXAMPLE, "-o", "json")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert (data["kaiwo"], data["workload"], data["kueue"]["matches"]) == (
        "KaiwoJob team-b/mi-finetune", "team-b/b-mi-2", True)
    assert data["shortfalls"][0]["quotaShort"] == 8


def test_explain_workload_not_found_and_kaiwojob_without_workload(capsys, tmp_path):
    code, out, err = run(capsys, "explain", "workload", "nope", "-n", "team-a", "--snapshot", EXAMPLE)
    assert (code, out, err) == (1, "", "error: workload team-a/nope not found\n")
    lonely = tmp_path / "k.yaml"
    lonely.write_text("kind: KaiwoJob\napiVersion: kaiwo.silogen.ai/v1alpha1\nmetadata: {name: j, namespace: ml}\n")
    code, out, err = run(capsys, "explain", "kaiwojob", "j", "-n", "ml", "--snapshot", str(lonely))
    assert (code, out) == (1, "")
    assert err == ("error: KaiwoJob ml/j has no Workload (none in ml is labelled kaiwo.silogen.ai/name=j): Kaiwo "
                   "has not queued it\n")


def test_explain_still_takes_a_run_and_refuses_three_words(capsys):
    code, _out, err = run(capsys, "explain", "a", "b", "c", "--snapshot", EXAMPLE)
    assert code == 2
    assert err.splitlines()[0] == "error: explain takes RUN, or workload NAME, or kaiwojob NAME; got 'a b c'"


def test_queues_usage_json_and_csv(capsys):
    code, out, err = run(capsys, "queues", "usage", "--snapshot", EXAMPLE, "-o", "json", "--flavor", "mi300x")
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["clusterQueues"] == [{
        "clusterQueue": "team-b", "cohort": "research", "flavor": "mi300x", "resource": "amd.com/gpu",
        "nominalQuota": 16, "borrowingLimit": None, "lendingLimit": None, "reserved": 8, "admitted": 8,
        "pending": 16, "pendingWorkloads": 1, "headroom": 8, "cohortCanLend": 0, "available": 8, "maximum": 16,
        "nodes": 2, "nodeGPUs": 16, "kueueReserved": None, "kueueAdmitted": None}]
    code, out, err = run(capsys, "queues", "usage", "--snapshot", EXAMPLE, "-o", "csv", "--flavor", "a100")
    assert out.splitlines() == [
        "CLUSTERQUEUE,COHORT,FLAVOR,RESOURCE,NOMINAL,BORROW-LIMIT,LEND-LIMIT,RESERVED,ADMITTED,PENDING,HEADROOM,"
        "COHORT-LENDS,MAX,NODES,NODE-GPUS,KUEUE-RESERVED",
        "team-c,research,a100,nvidia.com/gpu,8,,,0,0,0,8,0,8,0,0,",
    ]


def test_queues_usage_table_fits_100_columns(capsys):
    code, out, _err = run(capsys, "queues", "usage", "--snapshot", EXAMPLE)
    assert code == 0
    assert out.splitlines()[:2] == [
        "ClusterQueues: 3 queues, 5 flavor rows, 4 findings",
        "GPUs: 24 reserved of 40 nominal; 26 pending; 16 available now (16 own, 0 from cohorts)",
    ]
    assert "team-a        h100    nvidia.com/gpu        8        12  6 (2)           0             0         16" in out
    assert all(len(line) <= 100 for line in out.splitlines())


def test_queues_usage_without_queues(capsys, tmp_path):
    empty = tmp_path / "e.json"
    empty.write_text('{"kind": "List", "items": []}')
    code, out, err = run(capsys, "queues", "usage", "--snapshot", str(empty))
    assert (code, out, err) == (0, "", "No ClusterQueues found.\n")
    code, out, err = run(capsys, "queues", "usage", "--snapshot", str(empty), "-o", "json")
    assert json.loads(out) == {"clusterQueues": [], "cohorts": [], "findings": []}


@pytest.mark.parametrize("word", ["workload", "kaiwojob"])
def test_explain_queued_help_mentions_them(capsys, word):
    code, out, _err = run(capsys, "explain", "--help")
    assert code == 0 and f"explain {word}" in out


def test_the_docs_page_shows_what_the_commands_print(capsys, monkeypatch):
    """Each `$ kubectl runs …` block of docs/kueue.md is what the command prints today."""
    import re
    import shlex

    root = Path(EXAMPLE).parents[1]
    monkeypatch.chdir(root)
    blocks = re.findall(r"```console\n(.*?)```", (root / "docs" / "kueue.md").read_text(), re.S)
    assert len(blocks) == 2
    for block in blocks:
        command, *expected = block.rstrip("\n").split("\n")
        assert command.startswith("$ kubectl runs ")
        code = main(shlex.split(command)[3:])
        out, _ = capsys.readouterr()
        assert code == 0
        assert out.rstrip("\n").split("\n") == expected, command


def test_every_queue_report_validates_against_its_schema(capsys):
    """docs/schemas/queues-usage and explain-workload (generated from kubectl_runs/kueue/reports.py): every
    workload of the Kueue example, admitted or pending, through `explain workload` and `explain kaiwojob`."""
    import jsonschema

    from kubectl_runs.engine import schemas

    def validator(stem):
        data = json.loads((schemas.DIRECTORY / f"{stem}.schema.json").read_text())
        return jsonschema.validators.validator_for(data)(data)

    code, out, _ = run(capsys, "queues", "usage", "--snapshot", EXAMPLE, "-o", "json")
    validator("queues-usage").validate(json.loads(out))
    snap = load_snapshot([EXAMPLE])
    argvs = [["explain", "workload", w.key] for w in snap.queues.workloads]
    argvs += [["explain", "kaiwojob", j.key] for j in snap.queues.kaiwo_jobs]
    for argv in argvs:
        code, out, err = run(capsys, *argv, "--snapshot", EXAMPLE, "-o", "json")
        assert code == 0, err
        validator("explain-workload").validate(json.loads(out))
    code, out, err = run(capsys, "explain", "workload", "team-b/b-mi-2", "--snapshot", EXAMPLE, "-o", "json")
    data = json.loads(out)
    data["shortfalls"][0]["extra"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validator("explain-workload").validate(data)


def test_snapshot_save_of_a_kueue_fleet_fits_the_snapshot_schema(capsys):
    import jsonschema

    schema = json.loads((Path(EXAMPLE).parents[1] / "docs" / "schemas" / "snapshot.schema.json").read_text())
    code, out, _ = run(capsys, "snapshot", "save", "--snapshot", EXAMPLE)
    assert code == 0
    jsonschema.validators.validator_for(schema)(schema).validate(json.loads(out))
