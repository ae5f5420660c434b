"""floe.yaml declared once (settings.py): every problem of a file reported at once, one environment
rule for every key with the older names kept, the docs' key tables and the component's schema
derived from the same declaration."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from floe_dagster.component import FloeMaintenanceComponent
from floe_dagster.errors import SettingsError
from floe_dagster.iceberg import table_cache
from floe_dagster.core.basics.patterns import TablePattern
from floe_dagster.core.schedules.writers import WriterRule
from floe_dagster.settings import Key, all_keys, load_settings, reference_markdown, sections

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
REST_CATALOG = "catalog: {name: lake, properties: {type: rest, uri: 'http://127.0.0.1:1'}}\n"
# Keys whose values must satisfy a rule of their own; the others take one value per type below.
SPECIAL = {
    "spark.remote": ("sc://spark:15002", "sc://spark:15002"),
    "spark.iceberg-version": ("1.10.2", "1.10.2"),
    "api.keys-env": ("MY_KEYS", "MY_KEYS"),
    "batching.group-by": ("window", ("window",)),
    "shards": ('[{"name": "east", "tables": "lake.east.*"}]', (("east", "lake.east.*"),)),
    "writers": ('[{"tables": "lake.east.*", "asset": "etl/{table}"}]',
                (WriterRule(TablePattern.parse("lake.east.*"), "etl/{table}"),)),
    "fair-shares.by": ("tag:team", "tag:team"),
    "fair-shares.weights": ('{"sales": 2, "a.b": "0.5"}', {"sales": 2.0, "a.b": 0.5}),
    "envelope.allowed-table-properties": ("write.data.path,gc.enabled", ("write.data.path", "gc.enabled")),
    "scheduler.max-compute-hours-per-hour": ("2.5", 2.5),
}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "floe.yaml"
    path.write_text(text)
    return path


def a_value_for(key: Key) -> tuple[str, object]:
    """An environment value for the key and the setting it must give (never the default)."""
    if key.dotted in SPECIAL:
        return SPECIAL[key.dotted]
    if key.kind is bool:
        return ("false", False) if key.default else ("true", True)
    if key.kind in (int, float):
        return "7", 7
    if getattr(key.kind, "__origin__", None) is dict:
        return '{"a.b": "c"}', {"a.b": "c"}
    if getattr(key.kind, "__origin__", None) is tuple:
        if key.rules.get("path"):
            return os.pathsep.join(["/p/one", "/p/two"]), ("/p/one", "/p/two")
        return "one,two", ("one", "two")
    return "/some/value", "/some/value"


def setting_of(settings, key: Key):
    owner = getattr(settings, key.section.replace("-", "_")) if key.section else settings
    return getattr(owner, key.field.name)


@pytest.mark.parametrize("key", list(all_keys()), ids=lambda k: k.dotted)
def test_every_key_follows_the_one_environment_rule(tmp_path, key):
    text, expected = a_value_for(key)
    name = key.env_names[0]
    assert name == "FLOE_" + "__".join(p.upper().replace("-", "_") for p in (key.section, key.name) if p)
    settings = load_settings(write(tmp_path, REST_CATALOG), environ={name: text})
    assert setting_of(settings, key) == expected


OLDER_NAMES = {
    "FLOE_SPARK_MASTER": "spark.master", "FLOE_SPARK_REMOTE": "spark.remote", "FLOE_JARS_CACHE": "spark.jars-cache",
    "FLOE_JAVA_HOME": "spark.java-home", "FLOE_COORDINATION_URL": "coordination.url",
    "FLOE_DATA_DIR": "data-dir", "FLOE_POLICIES": "policies", "FLOE_REFRESH_TABLES": "refresh-tables",
    "FLOE_SCHEDULER_MAX_TABLES_PER_POLL": "scheduler.max-tables-per-poll",
    "FLOE_SCHEDULER_ENABLED": "scheduler.enabled",
    "FLOE_SCHEDULER_ZERO_CHANGE_FREQUENCY_REDUCTION_PERCENT": "scheduler.zero-change-frequency-reduction-percent",
}


@pytest.mark.parametrize("name, dotted", OLDER_NAMES.items())
def test_the_older_variable_names_still_work(tmp_path, name, dotted):
    key = next(k for k in all_keys() if k.dotted == dotted)
    text, expected = a_value_for(key)
    if key.dotted == "policies":  # FLOE_POLICIES: relative to the working folder, as always
        text, expected = "mine", (str(Path.cwd() / "mine"),)
    settings = load_settings(write(tmp_path, REST_CATALOG), environ={name: text})
    assert setting_of(settings, key) == expected
    assert name in key.env_names


def test_the_rules_name_wins_over_an_older_one(tmp_path):
    environ = {"FLOE_SPARK__MASTER": "local[4]", "FLOE_SPARK_MASTER": "local[1]"}
    assert load_settings(write(tmp_path, ""), environ=environ).spark.master == "local[4]"


def test_every_problem_of_a_file_is_listed_at_once(tmp_path):
    path = write(tmp_path, """
schedular: {}
scheduler: {max-tables-per-poll: lots, enabled: maybe}
spark: {mastr: local, iceberg-version: latest}
maintenance: {retention-days: -1}
batching: {max-tables: 0}
shards: [{name: 1bad, tables: "lake.*"}]
""")
    with pytest.raises(SettingsError) as raised:
        load_settings(path, environ={"FLOE_HEALTH__CHECKS": "sometimes"})
    assert sorted(line.split(": ")[1] for line in raised.value.errors) == sorted([
        "schedular", "spark.mastr", "spark.iceberg-version", "scheduler.max-tables-per-poll", "scheduler.enabled",
        "maintenance.retention-days", "batching.max-tables", "environment FLOE_HEALTH__CHECKS", "shards[0].name",
    ])
    assert all(line.startswith(f"{path}: ") for line in raised.value.errors)
    assert str(raised.value) == "\n".join(raised.value.errors)


def test_a_component_lists_every_problem_too(tmp_path):
    (tmp_path / "defs.yaml").write_text("type: floe_dagster.component.FloeMaintenanceComponent\n")
    component = FloeMaintenanceComponent.from_attributes_dict(attributes={
        "catalog": {"name": "lake", "properties": {"type": "sql"}},
        "scheduler": {"max-tables-per-pol": 5}, "debt": {"cap": "high"}})
    with pytest.raises(SettingsError) as raised:
        component.settings(tmp_path, project_root=tmp_path, environ={})
    assert [line.split(": ")[1] for line in raised.value.errors] == ["scheduler.max-tables-per-pol", "debt.cap"]
    assert "did you mean 'max-tables-per-poll'" in raised.value.errors[0]


def test_the_docs_key_tables_are_the_declaration():
    doc = DOC.read_text()
    generated = re.search(r"<!-- keys: begin -->\n(.*)<!-- keys: end -->", doc, re.S)
    assert generated, "docs/configuration.md lost its generated key tables"
    assert generated.group(1) == reference_markdown(), (
        "docs/configuration.md's key tables differ from settings.py: paste settings.reference_markdown() in")


def test_the_docs_example_file_uses_only_declared_keys():
    example = re.search(r"```yaml\n(.*?)```", DOC.read_text(), re.S).group(1)
    section = None
    for line in example.splitlines():
        name = re.match(r"(\s*)([a-z][a-z-]*):", line)
        if not name or line.strip().startswith("#"):
            continue
        indent, word = name.groups()
        if not indent:
            section = word if word in sections() else None
            assert word in {k.name for k in all_keys() if not k.section} | set(sections()), word
        elif section and len(indent) == 2:
            assert word in {k.name for k in all_keys() if k.section == section}, f"{section}.{word}"


def test_the_components_schema_shows_each_sections_keys_and_types():
    for schema in (FloeMaintenanceComponent.model_json_schema(), FloeMaintenanceComponent.model().model_json_schema()):
        scheduler = schema["$defs"]["SchedulerSettingsAttributes"]["properties"]
        assert {k.name for k in all_keys() if k.section == "scheduler"} == set(scheduler)
        assert {"type": "integer"} in scheduler["max-tables-per-poll"]["anyOf"]
        assert scheduler["max-tables-per-poll"]["description"] == "tables admitted per tick"
        assert schema["$defs"]["BatchSettingsAttributes"]["properties"]["max-tables"]["minimum"] == 1


def test_refresh_tables_comes_from_the_settings(tmp_path, monkeypatch):
    listed = []
    monkeypatch.setattr(table_cache, "refresh_table_cache", lambda settings: listed.append(settings) or [])
    path = write(tmp_path, f"data-dir: {tmp_path}\n" + REST_CATALOG)
    settings = load_settings(path, environ={})
    table_cache.write_cached_tables(settings, [])
    assert table_cache.tables_for_code_location(settings) == [] and not listed
    table_cache.tables_for_code_location(load_settings(path, environ={"FLOE_REFRESH_TABLES": "1"}))
    assert len(listed) == 1
