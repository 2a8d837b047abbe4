"""The Grafana dashboard and Prometheus alert rules shipped under deploy/ (issue 26) ask only for metrics a real
frontend exports: both files parse, and every `corral_*` / `localai_*` name in every expression (dashboard panels and
variables, alert rules) is a sample name `/metrics` declares, scraped from a frontend with a worker. With promtool
on the machine (Debian's `prometheus` package), the rules pass `promtool check rules` and every dashboard panel's
expression parses as PromQL too."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from support.cluster import Cluster
from support.faults import write_sim_model
from support.waiting import wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "corral-dashboard.json"
ALERTS = ROOT / "deploy" / "prometheus" / "corral-alerts.yml"
NAME = re.compile(r"\b(?:corral|localai)_[a-z0-9_]+")
TYPE_LINE = re.compile(r"^# TYPE (\S+) (\S+)$", re.MULTILINE)
SUFFIXES = {
    "counter": ("_total", ""),  # a counter with no sample yet is declared with its `_total` name
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count", ""),
    "gauge": ("",),
    "untyped": ("",),
}
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$model": ".*", "$node": ".*"}  # as Grafana fills them in


def panel_exprs() -> list[str]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def dashboard_exprs() -> list[str]:
    """The panels' PromQL and the variables' queries (Grafana's `label_values(metric, label)`)."""
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return panel_exprs() + [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]


def alert_exprs() -> list[str]:
    rules: dict[str, Any] = yaml.safe_load(ALERTS.read_text())
    return [str(rule["expr"]) for group in rules["groups"] for rule in group["rules"]]


def exported_names(text: str) -> set[str]:
    """Every sample name the exposition declares: a family's `# TYPE` line with its type's suffixes (a labelled
    family with no child yet has no sample line, and is exported all the same)."""
    names = {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")
    }
    for family, kind in TYPE_LINE.findall(text):
        names.update(family + suffix for suffix in SUFFIXES.get(kind, ("",)))
    return names


@pytest.fixture(scope="module")
def cluster(state_root: Path, make_database: Callable[[], str], nats_url: str) -> Iterator[Cluster]:
    c = Cluster(root=state_root / "e2e-deploy-dashboards", database_url=make_database(), nats_url=nats_url)
    write_sim_model(c.models_dir, "dash-sim")
    yield from c.serving("w1")


@pytest.fixture(scope="module")
def metrics_text(cluster: Cluster) -> str:
    chat = {"model": "dash-sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    answer = httpx.post(f"{cluster.frontend_url}/v1/chat/completions", json=chat, timeout=120)
    assert answer.status_code == 200, answer.text

    def scrape() -> str:
        return httpx.get(f"{cluster.frontend_url}/metrics", timeout=10).text

    # the xmin age is sampled in the background: its gauge appears with the first sample
    wait_for(lambda: "localai_control_plane_oldest_xmin_age" in scrape(), "the xmin age gauge", timeout_s=30)
    return scrape()


def test_both_files_parse_and_ask_for_something() -> None:
    assert len(dashboard_exprs()) >= 20
    assert len(alert_exprs()) >= 6
    assert json.loads(DASHBOARD.read_text())["uid"] == "corral-overview"


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_every_metric_name_in_the_expressions_is_exported(source: str, metrics_text: str) -> None:
    exprs = dashboard_exprs() if source == "dashboard" else alert_exprs()
    exported = exported_names(metrics_text)
    missing = {name: expr for expr in exprs for name in NAME.findall(expr) if name not in exported}
    assert not missing, f"{source} asks for metrics /metrics does not export: {missing}"


def test_the_alerts_cover_what_an_operator_must_hear_of() -> None:
    names = {
        rule["alert"] for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]
    }
    assert {
        "CorralNodeOffline",
        "CorralLoadFailing",
        "CorralQueueWaitOverTarget",
        "CorralDiskHeadroomLow",
        "CorralEventLoopStalls",
        "CorralPostgresXminAgeHigh",
    } <= names


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian: prometheus)")
def test_promtool_accepts_the_rules_and_every_dashboard_expression(tmp_path: Path) -> None:
    checked = subprocess.run(["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    records = []
    for i, expr in enumerate(panel_exprs()):
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        records.append({"record": f"dashboard:expr_{i}", "expr": expr})
    rules = tmp_path / "dashboard-rules.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    checked = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
