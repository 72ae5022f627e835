"""deploy/grafana/dedup.json asks only for metrics the workers export (streams/service/metrics.py), and shows them all.

A metric renamed in metrics.py and not on the dashboard leaves an empty panel in
production and no error anywhere; this test is where it fails instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.metrics import MetricWrapperBase

from streams.service import metrics

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "dedup.json"
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"), "gauge": ("",)}
"""The series prometheus_client exposes per metric type."""
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are no function, keyword or label."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings
    expr = re.sub(r"\{[^}]*\}", " ", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)  # label lists
    names = set()
    for match in IDENTIFIER.finditer(expr):
        word = match.group()
        if expr[match.end() :].lstrip().startswith("(") or word in PROMQL_WORDS:
            continue  # a function (or a keyword before its label list)
        if match.start() > 0 and (expr[match.start() - 1] == "$" or expr[match.start() - 1].isdigit()):
            continue  # a Grafana variable, or the exponent of a number
        names.add(word)
    return names


def exported() -> dict[str, str]:
    """Series name -> the metric of streams/service/metrics.py that exposes it."""
    names = {}
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            for family in value.describe():
                for suffix in SUFFIXES[family.type]:
                    names[family.name + suffix] = family.name
    return names


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r}", target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            label_values = re.fullmatch(r"\s*label_values\(\s*([^,]+),\s*\w+\s*\)\s*", text)
            yield f"variable {variable['name']!r}", label_values.group(1) if label_values else text


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def test_the_name_extraction_sees_what_a_query_reads() -> None:
    expr = (
        'sum by (stage) (rate(dedup_verdicts_total{job=~"$job", stage="semantic"}[$__rate_interval]))'
        " / ignoring (stage) group_left sum(rate(dedup_verdicts_total[5m])) * 1e3 + on (job) other_metric offset 5m"
    )
    assert metric_names(expr) == {"dedup_verdicts_total", "other_metric"}
    known = exported()
    assert "dedup_verdicts_total" in known and "dedup_group_size_bucket" in known and "dedup_verdicts" not in known
    # A renamed metric is seen as unknown.
    assert metric_names("histogram_quantile(0.99, sum by (le) (rate(dedup_latency_renamed_bucket[5m])))") - set(
        known
    ) == {"dedup_latency_renamed_bucket"}


def test_every_metric_the_dashboard_reads_is_exported_and_every_export_is_shown(dashboard: dict[str, Any]) -> None:
    known = exported()
    used: dict[str, list[str]] = {}
    for where, expr in queries(dashboard):
        names = metric_names(expr)
        assert names, f"{where}: no metric found in {expr!r}"
        for name in names:
            used.setdefault(name, []).append(where)
    unknown = {name: where for name, where in used.items() if name not in known}
    assert unknown == {}, f"metrics not in streams/service/metrics.py: {unknown}"
    shown = {known[name] for name in used}
    every = {family.name for v in vars(metrics).values() if isinstance(v, MetricWrapperBase) for family in v.describe()}
    assert every - shown == set(), "exported metrics without a panel"


def test_bucket_bounds_the_dashboard_names_exist(dashboard: dict[str, Any]) -> None:
    """A `le="500.0"` matcher must name a bucket bound as prometheus_client writes it, or it matches nothing."""
    bounds: dict[str, set[str]] = {}
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            for family in value.collect():
                for sample in family.samples:
                    if "le" in sample.labels:
                        bounds.setdefault(sample.name, set()).add(sample.labels["le"])
    found = 0
    for where, expr in queries(dashboard):
        for name, bound in re.findall(r'(\w+_bucket)\{[^}]*\ble="([^"]+)"', expr):
            found += 1
            assert bound in bounds.get(name, set()), f"{where}: {name} has no bucket le={bound!r}"
    assert found >= 1


def test_the_dashboard_is_importable(dashboard: dict[str, Any]) -> None:
    ids = [panel["id"] for panel in panels(dashboard["panels"])]
    assert len(ids) == len(set(ids))
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in panels(dashboard["panels"]):
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]) and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
            assert panel["targets"] and all('job=~"$job"' in target["expr"] for target in panel["targets"])
