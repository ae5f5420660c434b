"""The Dagster component's attributes: the same settings as floe.yaml, read by the same loader, and
bad ``defs.yaml`` files stopped with a message naming the file and the field (no catalog is opened
and no Spark started: every error here comes before either)."""

from __future__ import annotations

import dataclasses
import os
import textwrap
from pathlib import Path

import pytest
import yaml
from dagster.components.testing import create_defs_folder_sandbox

from floe_dagster.component import (
    CONFIG_FIELD,
    FloeMaintenanceComponent,
    keep_floe_state_beside_instance,
)
from floe_dagster.core.policies.policy import PolicyError
from floe_dagster.errors import SettingsError
from floe_dagster.policies import load_policy_set
from floe_dagster.settings import Settings, load_settings
from floe_dagster.settings_schema import keys_of

SECTIONS = {
    "catalog": {"name": "lake", "properties": {"type": "sql", "uri": "sqlite:///lake.db", "warehouse": "file:///wh"}},
    "policies": ["policies"],
    "scheduler": {"max-tables-per-poll": 5, "failure-backoff-threshold": 2},
    "spark": {"master": "local[1]", "conf": {"spark.executor.memory": "2g"}},
    "maintenance": {"retention-days": 7},
    "batching": {"max-tables": 3},
}
POLICY = """\
- name: lake-all
  tablePattern: "lake.*.*"
  rewriteDataFiles: {strategy: BINPACK}
  rewriteDataFilesSchedule: {cronExpression: "0 3 * * *"}
"""


def component(attributes: dict) -> FloeMaintenanceComponent:
    return FloeMaintenanceComponent.from_attributes_dict(attributes=attributes)


def test_attributes_give_the_settings_of_the_same_floe_yaml(tmp_path):
    folder = tmp_path / "defs" / "lake"
    folder.mkdir(parents=True)
    (folder / "floe.yaml").write_text(yaml.safe_dump({**SECTIONS, "data-dir": str(tmp_path / ".floe")}))

    from_component = component(SECTIONS).settings(folder, project_root=tmp_path, environ={})
    from_file = load_settings(folder / "floe.yaml", environ={})

    assert dataclasses.replace(from_component, source=from_file.source) == from_file
    assert from_component.policies == (str(folder / "policies"),)  # relative to the defs.yaml's folder
    assert from_component.data_dir == str(tmp_path / ".floe")  # default: the project root's .floe
    assert from_component.scheduler.max_tables_per_poll == 5


def test_config_reads_an_existing_floe_yaml(tmp_path):
    (tmp_path / "floe.yaml").write_text(yaml.safe_dump(SECTIONS))
    settings = component({"config": "floe.yaml"}).settings(tmp_path, project_root=tmp_path, environ={})
    assert settings == load_settings(tmp_path / "floe.yaml", environ={})


@pytest.mark.parametrize("attributes, field, says", [
    ({"config": "floe.yaml", "scheduler": {"enabled": False}}, "config", "cannot be combined with scheduler"),
    ({"config": "missing.yaml"}, "config", "is not a file"),
    ({"policies": ["policies"]}, "catalog", "missing"),
    ({**SECTIONS, "scheduler": {"max-tables-per-pol": 5}}, "scheduler.max-tables-per-pol",
     "did you mean 'max-tables-per-poll'"),
    ({**SECTIONS, "maintenance": {"retention-days": -1}}, "maintenance.retention-days", "expected a number ≥ 0"),
    ({**SECTIONS, "catalog": {"name": "lake", "properties": {"uri": ["a", "b"]}}}, "catalog.properties.uri",
     "expected a string"),
])
def test_bad_attributes_name_the_defs_yaml_and_the_field(tmp_path, attributes, field, says):
    (tmp_path / "defs.yaml").write_text("type: floe_dagster.component.FloeMaintenanceComponent\n")
    with pytest.raises(SettingsError) as raised:
        component(attributes).settings(tmp_path, project_root=tmp_path, environ={})
    assert str(raised.value).startswith(f"{tmp_path / 'defs.yaml'} (attributes): {field}: ")
    assert says in str(raised.value)


def _load_error(defs_yaml: str, policy: str = POLICY) -> str:
    """What Dagster reports when the project's defs folder is loaded: the chain of exception messages."""
    with create_defs_folder_sandbox() as sandbox:
        folder = sandbox.defs_folder_path / "lake"
        (folder / "policies").mkdir(parents=True)
        (folder / "policies" / "lake.yaml").write_text(policy)
        (folder / "defs.yaml").write_text(textwrap.dedent(defs_yaml))
        with pytest.raises(Exception) as raised, sandbox.build_all_defs():
            pass
        messages, exc = [], raised.value
        while exc is not None:
            messages.append(str(exc))
            exc = exc.__cause__ or exc.__context__
        return "\n".join(messages).replace(str(folder), "<folder>")


DEFS = """\
type: floe_dagster.component.FloeMaintenanceComponent
attributes:
  catalog: {name: lake, properties: {type: sql, uri: "sqlite:///lake.db"}}
  policies: [policies]
"""


def test_an_unknown_attribute_is_refused_by_dagster_with_the_file_and_line(dagster_home):
    message = _load_error(DEFS.replace("  policies:", "  policy-folders:"))
    assert "attributes.policy-folders at <folder>/defs.yaml:4" in message
    assert "Extra inputs are not permitted" in message


def test_a_missing_policy_folder_names_the_defs_yaml_and_policies(dagster_home):
    message = _load_error(DEFS.replace("[policies]", "[policy-folder]"))
    assert "<folder>/defs.yaml (attributes): policies: <folder>/policy-folder: no such file or folder" in message


def test_a_bad_policy_file_names_the_defs_yaml_policies_and_the_policy_file(dagster_home):
    message = _load_error(DEFS, POLICY.replace("BINPACK", "SHUFFLE"))
    assert "<folder>/defs.yaml (attributes): policies: <folder>/policies/lake.yaml" in message
    assert "rewriteDataFiles.strategy: must be one of BINPACK, SORT, ZORDER, got 'SHUFFLE'" in message


def test_floe_state_stays_beside_the_instance_named_by_dagster_home(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    assert keep_floe_state_beside_instance(tmp_path / "project") == tmp_path / "home"
    assert not (tmp_path / "project").exists()


def test_without_dagster_home_floe_state_goes_to_the_project_root(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", "")  # restored after the test, which sets it
    monkeypatch.chdir(tmp_path)  # not the working folder's .floe: an absolute path under the project
    home = keep_floe_state_beside_instance(tmp_path / "project")
    assert home == tmp_path / "project" / ".floe" / "dagster_home" and home.is_dir()
    assert Path(os.environ["DAGSTER_HOME"]) == home


def test_one_policy_path_may_be_given_as_text_as_in_floe_yaml(tmp_path):
    attributes = {**SECTIONS, "policies": "policies"}
    settings = component(attributes).settings(tmp_path, project_root=tmp_path, environ={})
    assert settings.policies == (str(tmp_path / "policies"),)


def test_every_attribute_but_config_is_a_floe_yaml_section():
    sections = {field.alias or name for name, field in FloeMaintenanceComponent.model_fields.items()
                if name != CONFIG_FIELD}
    assert sections == {key.name for key in keys_of(Settings)} - {"api", "shards"}


ATTACK = """\
- name: lake-orphans
  tablePattern: "lake.*.*"
  orphanCleanup: {location: "file:///wh", retentionPeriodInDays: 1}
  tableProperties: {write.data.path: "file:///elsewhere"}
"""


def test_the_component_refuses_a_policy_outside_the_safety_envelope(dagster_home):
    message = _load_error(DEFS, ATTACK)
    assert ("<folder>/policies/lake.yaml: policy 'lake-orphans': orphanCleanup.location: 'file:///wh' is "
            "absolute") in message
    assert "tableProperties.write.data.path: 'write.data.path' is refused by the safety envelope" in message


def test_the_components_envelope_attribute_allows_a_named_table_property(tmp_path):
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "lake.yaml").write_text(
        'name: p\ntablePattern: "lake.*.*"\ntableProperties: {write.data.path: "file:///elsewhere"}\n')
    refused = component(SECTIONS).settings(tmp_path, project_root=tmp_path, environ={})
    with pytest.raises(PolicyError, match="tableProperties.write.data.path: 'write.data.path' is refused"):
        load_policy_set(refused)
    allowed = component({**SECTIONS, "envelope": {"allowed-table-properties": ["write.data.path"]}}).settings(
        tmp_path, project_root=tmp_path, environ={})
    assert allowed.envelope.allowed_table_properties == ("write.data.path",)
    assert load_policy_set(allowed).get("p") is not None
