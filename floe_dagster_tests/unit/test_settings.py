"""floe.yaml: sections, Floe's scheduler keys and defaults, environment overrides, clear errors."""

import pytest

from floe_dagster.core.facts.debt import DebtWeights
from floe_dagster.errors import SettingsError
from floe_dagster.settings import load_settings


def write(tmp_path, text):
    path = tmp_path / "floe.yaml"
    path.write_text(text)
    return path


def test_defaults_are_the_embedded_lakehouse(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = load_settings(environ={})
    assert settings.source == "<defaults>"
    assert settings.catalog.properties["type"] == "sql"
    assert settings.catalog.properties["uri"] == f"sqlite:///{tmp_path / '.floe' / 'catalog.db'}?timeout=60"
    assert settings.scheduler.max_bytes_per_hour == 0 and settings.scheduler.failure_backoff_threshold == 3
    assert settings.scheduler.zero_change_frequency_reduction_percent == 50


def test_sections_and_relative_paths(tmp_path):
    path = write(tmp_path, """
catalog:
  name: lake
  properties: {type: sql, uri: "sqlite:////x/c.db", warehouse: "file:///x/wh"}
spark:
  master: "spark://127.0.0.1:7077"
  conf: {spark.executor.memory: 2g}
  jars: [extra/driver.jar]
policies: [policies]
scheduler:
  max-tables-per-poll: 4
  condition-based-triggering-enabled: false
""")
    settings = load_settings(path, environ={})
    assert settings.catalog.name == "lake" and settings.catalog.properties["uri"] == "sqlite:////x/c.db"
    assert settings.spark.master == "spark://127.0.0.1:7077"
    assert settings.spark.jars == (str(tmp_path / "extra" / "driver.jar"),)
    assert settings.policies == (str(tmp_path / "policies"),)
    assert settings.scheduler.max_tables_per_poll == 4
    assert settings.scheduler.condition_based_triggering_enabled is False


def test_environment_overrides_scheduler_keys(tmp_path):
    path = write(tmp_path, "scheduler:\n  max-bytes-per-hour: 10\n")
    settings = load_settings(path, environ={"FLOE_SCHEDULER_MAX_BYTES_PER_HOUR": "500",
                                            "FLOE_SCHEDULER_ENABLED": "false"})
    assert settings.scheduler.max_bytes_per_hour == 500 and settings.scheduler.enabled is False


@pytest.mark.parametrize("text, message", [
    ("schedular: {}\n", "schedular: unknown key (did you mean 'scheduler'?)"),
    ("scheduler:\n  max-table-per-poll: 1\n", "scheduler.max-table-per-poll: unknown key (did you mean 'max-tables-per-poll'?)"),
    ("scheduler:\n  max-tables-per-poll: lots\n", "scheduler.max-tables-per-poll: expected a whole number"),
    ("scheduler:\n  failure-backoff-hours: -1\n", "scheduler.failure-backoff-hours: expected a number ≥ 0"),
    ("scheduler:\n  enabled: maybe\n", "scheduler.enabled: expected true or false"),
    ("spark:\n  mastr: local\n", "spark.mastr: unknown key (did you mean 'master'?)"),
    ("catalog: [1, 2]\n", "catalog: expected a mapping"),
    ("catalog:\n  name: x\n  properties: {type: [1]}\n", "catalog.properties.type: expected a string"),
    ("scheduler: {enabled: true\n", "not valid YAML"),
])
def test_bad_settings_name_file_key_and_what_is_allowed(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(SettingsError) as error:
        load_settings(path, environ={})
    assert str(path) in str(error.value)
    assert message in str(error.value)


def test_bad_environment_override_is_named(tmp_path):
    path = write(tmp_path, "")
    with pytest.raises(SettingsError, match="environment FLOE_SCHEDULER_ZERO_CHANGE_THRESHOLD: expected a whole number"):
        load_settings(path, environ={"FLOE_SCHEDULER_ZERO_CHANGE_THRESHOLD": "x"})


def test_missing_named_file(tmp_path):
    with pytest.raises(SettingsError, match="settings file not found"):
        load_settings(tmp_path / "nope.yaml", environ={})


def test_debt_weights_are_checked_at_load(tmp_path):
    good = load_settings(write(tmp_path, "debt:\n  critical: 200\n  per-day-since-write: 1\n"), environ={})
    assert good.debt == DebtWeights(critical=200, per_day_since_write=1)
    with pytest.raises(SettingsError, match="debt.critcal: unknown key \\(did you mean .critical.\\?\\)"):
        load_settings(write(tmp_path, "debt:\n  critcal: 200\n"), environ={})
