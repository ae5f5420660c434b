"""When an SLA check result is reported (defs/sla_reporting.py: a verdict, contract or target change, or an
hour), and how ``floe_sla_breached`` renders a hostile owner (api/prometheus.py). The clock is injected."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from floe_dagster.api.prometheus import sla_gauge
from floe_dagster.core.plan.planner import Decision
from floe_dagster.core.schedules.sla import SlaContract, evaluate_sla
from floe_dagster.defs.sla_reporting import _needs_report, sla_state
from floe_dagster_tests.unit.test_planner import NOW, RDF, A

HOSTILE = '</script><b onmouseover="x">team</b> \\ "q"'


def _decision(last_success, severity="ERROR", owner="team-x") -> Decision:
    verdict = evaluate_sla(SlaContract(timedelta(days=1), severity, owner), last_success, None, NOW)
    return Decision(A, RDF, "p", "skip", ("not_due",), None, 0.0, {}, 0, None, None, sla=verdict)


def test_reported_on_a_change_of_verdict_contract_or_target_and_hourly():
    breached = sla_state(_decision(NOW - timedelta(days=2)), None, 7)
    reported = {**breached, "reportedAt": NOW.isoformat()}
    assert _needs_report(None, breached, NOW)
    assert not _needs_report(reported, breached, NOW + timedelta(minutes=59))
    assert _needs_report(reported, breached, NOW + timedelta(hours=1))
    met = sla_state(_decision(NOW - timedelta(hours=1)), None, 7)
    assert _needs_report(reported, met, NOW + timedelta(minutes=1))
    assert _needs_report(reported, sla_state(_decision(NOW - timedelta(days=2), "WARN"), None, 7), NOW)
    assert _needs_report(reported, sla_state(_decision(NOW - timedelta(days=2), owner="other"), None, 7), NOW)
    newer = sla_state(_decision(NOW - timedelta(days=2)), None, 8)  # the asset has a newer materialization
    assert _needs_report(reported, newer, NOW)


def test_the_gauge_escapes_a_hostile_owner_onto_one_line():
    state = sla_state(_decision(NOW - timedelta(days=2), owner=HOSTILE), NOW, None)

    class One:
        def collect(self):
            yield sla_gauge({"default": {"x": state}})

    registry = CollectorRegistry(auto_describe=False)
    registry.register(One())
    text = generate_latest(registry).decode()
    lines = [line for line in text.splitlines() if line.startswith("floe_sla_breached{")]
    assert len(lines) == 1 and lines[0].endswith(" 1.0")
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    assert [(s.labels["owner"], s.labels["table"], s.labels["operation"], s.value) for s in samples] == [
        (HOSTILE, A.qualified, "rewrite_data_files", 1.0)]
