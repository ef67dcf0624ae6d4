"""The Grafana dashboard (deploy/grafana/kubectl-runs-reconciler.json) asks only for what the reconciler exports.

Every PromQL expression of the dashboard (panel targets and template variables) is read by a small tokenizer,
not by regular expressions over the text: each metric selector must name a series the reconciler really exports
— collected from a live ReconcilerMetrics registry after a real activation driven in-process
(metrics_driver.py), with the sample names Prometheus stores (``_total``, ``_bucket``, ``_count``, ``_sum``,
``_gcount``, ``_gsum``) — and every label in a ``{label=…}`` matcher, a ``by (…)``/``without (…)`` clause, an
``on (…)``/``ignoring (…)`` clause and a ``{{label}}`` legend must exist on the metrics it applies to (or be a
label Prometheus adds to every target). The negative cases prove the check fails where it should."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from metrics_driver import driven
from prometheus_client.parser import text_string_to_metric_families

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "kubectl-runs-reconciler.json"
#: labels the scrape adds to every series (job/instance always; pod, service, endpoint, container from the
#: Prometheus Operator's ServiceMonitor). Not ``namespace``: the ServiceMonitor honours ours (honorLabels).
TARGET_LABELS = frozenset({"job", "instance", "pod", "service", "endpoint", "container"})
AGGREGATORS = frozenset({"sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
                         "count_values", "group", "limitk", "limit_ratio"})
KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                      "offset", "atan2"})

TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<number>\d+(?:\.\d+)?(?:e[+-]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<var>\$\{?\w+\}?)
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=,(){}@])
""", re.X)


def tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if m is None:
            raise ValueError(f"cannot read {expr[pos:]!r} in {expr!r}")
        pos = m.end()
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group()))
    return out


@dataclass
class Query:
    selectors: list[tuple[str, set[str]]] = field(default_factory=list)  # (metric, labels in its matchers)
    clauses: list[tuple[str, list[str], set[str]]] = field(default_factory=list)  # (by|…, labels, metrics under it)


def _close(toks: list[tuple[str, str]], i: int) -> int:
    """The index of the parenthesis closing the one at ``i``."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j][1] == "(":
            depth += 1
        elif toks[j][1] == ")":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced parentheses")


def _open(toks: list[tuple[str, str]], j: int) -> int:
    """The index of the parenthesis opened by the one closing at ``j``."""
    depth = 0
    for i in range(j, -1, -1):
        if toks[i][1] == ")":
            depth += 1
        elif toks[i][1] == "(":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced parentheses")


def parse(expr: str) -> Query:
    toks = tokens(expr)
    query = Query()
    metric_at: dict[int, str] = {}
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        following = toks[i + 1][1] if i + 1 < len(toks) else ""
        if kind == "ident" and text in ("by", "without", "on", "ignoring", "group_left", "group_right"):
            if following != "(":
                i += 1
                continue
            end = _close(toks, i + 1)
            labels = [t for k, t in toks[i + 2:end] if k == "ident"]
            query.clauses.append((text, labels, set()))
            metric_at[i] = f"#clause{len(query.clauses) - 1}"
            i = end + 1
            continue
        if kind == "ident" and text not in KEYWORDS and following != "(" and text not in AGGREGATORS:
            labels: set[str] = set()
            if following == "{":
                end = next(j for j in range(i + 1, len(toks)) if toks[j][1] == "}")
                body = toks[i + 2:end]
                labels = {body[j][1] for j in range(len(body)) if body[j][0] == "ident" and j + 1 < len(body)
                          and body[j + 1][1] in ("=", "!=", "=~", "!~")}
                query.selectors.append((text, labels))
                metric_at[i] = text
                i = end + 1
                continue
            query.selectors.append((text, labels))
            metric_at[i] = text
        i += 1
    # the metrics each clause applies to: an aggregation's argument (``sum by (x) (arg)`` or ``sum (arg) by
    # (x)``); for on/ignoring/group_*, both sides (the whole expression)
    for index, (word, _labels, metrics) in enumerate(query.clauses):
        at = next(i for i, name in metric_at.items() if name == f"#clause{index}")
        if word in ("by", "without"):
            after = _close(toks, at + 1) + 1
            if after < len(toks) and toks[after][1] == "(":
                span = range(after, _close(toks, after) + 1)
            else:  # sum (arg) by (x)
                before = at - 1
                span = range(_open(toks, before), before + 1)
        else:
            span = range(len(toks))
        metrics |= {metric_at[i] for i in span if i in metric_at and not metric_at[i].startswith("#")}
    return query


def exported() -> dict[str, set[str]]:
    """Sample name -> its label names, as the reconciler's /metrics text shows them after a real activation."""
    body, _ = driven().exposition()
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def problems(exprs: list[str], names: dict[str, set[str]]) -> list[str]:
    found = []
    for expr in exprs:
        query = parse(expr)
        for metric, labels in query.selectors:
            if metric not in names:
                found.append(f"{expr}: metric {metric} is not exported")
                continue
            found += [f"{expr}: {metric} has no label {label}" for label in sorted(labels - names[metric] -
                                                                                    TARGET_LABELS - {"__name__"})]
        for word, labels, metrics in query.clauses:
            for metric in sorted(m for m in metrics if m in names):
                missing = set(labels) - names[metric] - TARGET_LABELS
                found += [f"{expr}: {word} ({label}) but {metric} has no label {label}" for label in sorted(missing)]
    return found


def legend_problems(expr: str, legend: str, names: dict[str, set[str]]) -> list[str]:
    """A ``{{label}}`` legend must name a label the result keeps: one of the outermost ``by`` list, else one
    every metric of the expression has."""
    used = re.findall(r"\{\{\s*(\w+)\s*\}\}", legend or "")
    query = parse(expr)
    outer = next((labels for word, labels, _ in query.clauses if word == "by"), None)
    out = []
    for label in used:
        if outer is not None:
            ok = label in outer
        else:
            ok = all(label in names.get(m, set()) | TARGET_LABELS for m, _ in query.selectors)
        if not ok:
            out.append(f"{expr}: legend {{{{{label}}}}} is not a label of the result")
    return out


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def targets(dash: dict) -> list[tuple[str, str]]:
    def walk(panels):
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels", ()))

    return [(t["expr"], t.get("legendFormat", "")) for p in walk(dash["panels"]) for t in p.get("targets", [])]


def variable_queries(dash: dict) -> list[str]:
    """The PromQL inside ``label_values(<selector>, <label>)`` of the template variables, as a selector with a
    ``by`` clause on the label (so the label is checked too)."""
    out = []
    for variable in dash["templating"]["list"]:
        query = variable.get("query")
        text = query.get("query", "") if isinstance(query, dict) else ""
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", text)
        if m:
            out.append(f"sum by ({m.group(2)}) ({m.group(1)})")
    return out


@pytest.fixture(scope="module")
def names():
    return exported()


def test_the_exported_names_include_every_family_with_its_suffixes(names):
    for name in ("jobtree_resolver_actions_total", "jobtree_preempted_gpus_total",
                 "jobtree_reservation_activations_total", "jobtree_reconcile_duration_seconds_bucket",
                 "jobtree_reconcile_duration_seconds_count", "jobtree_reconcile_duration_seconds_sum",
                 "jobtree_reservation_eta_seconds_bucket", "jobtree_reservation_eta_seconds_gcount",
                 "jobtree_budget_aggregate_headroom_gpus", "jobtree_reservation_backlog"):
        assert name in names, name
    assert names["jobtree_resolver_actions_total"] == {"kind", "flavor", "scope", "namespace"}
    assert names["jobtree_reservation_eta_seconds_bucket"] == {"flavor", "le"}


def test_every_panel_query_uses_exported_metrics_and_labels(names):
    dash = dashboard()
    exprs = [expr for expr, _legend in targets(dash)] + variable_queries(dash)
    assert len(exprs) >= 20
    assert problems(exprs, names) == []
    legends = [p for expr, legend in targets(dash) for p in legend_problems(expr, legend, names)]
    assert legends == []


def test_the_dashboard_has_the_panels_admins_ask_for():
    dash = dashboard()
    titles = {p["title"]: p for p in dash["panels"]}
    for wanted in ("Budget headroom per envelope", "Reservation backlog",
                   "Reservation ETA buckets (time until earliestStart)", "Preemption rate by scope",
                   "Resolver actions by kind", "Reconcile latency", "API writes", "Writing replicas (must be 1)"):
        assert wanted in titles, wanted
    (scope_expr,) = [t["expr"] for t in titles["Preemption rate by scope"]["targets"]]
    assert parse(scope_expr).clauses[0][:2] == ("by", ["scope"])
    assert "--no-leader-elect" in titles["Writing replicas (must be 1)"]["description"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dash["templating"]["list"]}
    for expr, _ in targets(dash):
        for var in re.findall(r"\$\{?(\w+)", expr):
            assert var in variables or var.startswith("__"), var


@pytest.mark.parametrize("expr, complaint", [
    ("sum(jobtree_leaders)", "metric jobtree_leaders is not exported"),
    ("rate(jobtree_resolver_actions[5m])", "metric jobtree_resolver_actions is not exported"),
    ("sum by (domain) (rate(jobtree_resolver_actions_total[5m]))", "by (domain) but jobtree_resolver_actions_total"),
    ("sum(rate(jobtree_preempted_gpus_total{run=\"x\"}[5m]))", "jobtree_preempted_gpus_total has no label run"),
    ("sum(rate(jobtree_api_writes_total[5m])) by (scope)", "by (scope) but jobtree_api_writes_total"),
    ("sum without (kind) (jobtree_budget_gpus)", "without (kind) but jobtree_budget_gpus"),
    ("jobtree_leader and on (flavor) jobtree_ready", "on (flavor) but jobtree_leader"),
    ("max by (pod) (jobtree_workqueue_depth) + up", "metric up is not exported"),
])
def test_a_query_naming_a_missing_metric_or_label_fails(names, expr, complaint):
    found = problems([expr], names)
    assert any(complaint in p for p in found), found


def test_a_legend_naming_a_label_the_query_drops_fails(names):
    assert legend_problems("sum by (kind) (rate(jobtree_resolver_actions_total[5m]))", "{{scope}}", names)
    assert not legend_problems("sum by (kind) (rate(jobtree_resolver_actions_total[5m]))", "{{kind}}", names)


def test_a_dashboard_with_a_broken_panel_fails(names):
    """The whole check, on a copy of the dashboard with one panel's label misspelt."""
    dash = dashboard()
    panel = next(p for p in dash["panels"] if p["title"] == "Preemption rate by scope")
    panel["targets"][0]["expr"] = panel["targets"][0]["expr"].replace("by (scope)", "by (scopes)")
    found = problems([expr for expr, _ in targets(dash)], names)
    assert len(found) == 1 and "by (scopes)" in found[0], found


def test_the_tokenizer_reads_selectors_clauses_and_ranges():
    q = parse('histogram_quantile(0.99, sum by (le) (rate(jobtree_reconcile_duration_seconds_bucket'
              '[$__rate_interval])))')
    assert q.selectors == [("jobtree_reconcile_duration_seconds_bucket", set())]
    assert q.clauses == [("by", ["le"], {"jobtree_reconcile_duration_seconds_bucket"})]
    q = parse('sum(max by (a) (x{b=~"$v", c!="1"})) by (d) / 3600')
    assert q.selectors == [("x", {"b", "c"})]
    assert [(w, labels) for w, labels, _ in q.clauses] == [("by", ["a"]), ("by", ["d"])]
    assert all(metrics == {"x"} for _, _, metrics in q.clauses)


def test_the_service_monitor_keeps_the_metrics_own_namespace_label():
    """Without honorLabels Prometheus renames the series' namespace to exported_namespace, and every panel
    grouping by namespace would show the reconciler's own namespace."""
    import yaml

    path = DASHBOARD.parents[1] / "components" / "prometheus-operator" / "servicemonitor.yaml"
    monitor = yaml.safe_load(path.read_text())
    assert [e.get("honorLabels") for e in monitor["spec"]["endpoints"]] == [True]
