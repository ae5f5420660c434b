"""Table patterns: forms, globs, nested namespaces, regexes over the whole name, specificity."""

from __future__ import annotations

import pytest

from floe_dagster.core.basics.patterns import TablePattern
from floe_dagster.core.basics.tables import TableName


def t(text: str) -> TableName:
    parts = text.split(".")
    return TableName(parts[0], tuple(parts[1:-1]), parts[-1])


@pytest.mark.parametrize(
    "pattern, specificity",
    [
        ("*", 55),  # absent catalog and namespace count as wildcards
        ("", 55),
        ("orders", 56),
        ("sales.orders", 61),
        ("sales.*", 60),
        ("demo.sales.orders", 111),
        ("demo.sales.*", 110),
        ("demo.*.orders", 106),
        ("*.sales.orders", 61),
        ("*.*.*", 55),
        ("demo.eu.sales.orders", 111),
        ("demo.eu.*.orders", 106),
        ("demo.sales.order?", 111),  # a ?-only glob counts as exact, as in Floe
        (r"/demo\.sales\..*/", 55),  # a regex is a wildcard at every level
    ],
)
def test_specificity(pattern, specificity):
    assert TablePattern.parse(pattern).specificity == specificity


@pytest.mark.parametrize(
    "pattern, table, matches",
    [
        ("*", "demo.sales.orders", True),
        ("orders", "demo.sales.orders", True),
        ("orders", "demo.sales.orders2", False),
        ("sales.orders", "other.sales.orders", True),
        ("sales.orders", "demo.eu.sales.orders", False),  # a 2-part pattern's namespace is one level
        ("demo.sales.*", "demo.sales.orders", True),
        ("demo.sales.*", "demo.ops.orders", False),
        ("demo.sales.*", "prod.sales.orders", False),
        ("demo.sales.ord*", "demo.sales.orders", True),
        ("demo.sales.ord*", "demo.sales.events", False),
        ("demo.sal?s.orders", "demo.sales.orders", True),
        ("demo.s*.orders", "demo.sales.orders", True),
        # globs stay within one part
        ("demo.sales*.orders", "demo.sales.eu.orders", False),
        # a namespace part that is exactly * matches any namespace, nested included
        ("demo.*.orders", "demo.sales.orders", True),
        ("demo.*.orders", "demo.eu.sales.orders", True),
        ("*.*.*", "demo.eu.sales.orders", True),
        # four or more parts: the middle ones are a nested namespace
        ("demo.eu.sales.orders", "demo.eu.sales.orders", True),
        ("demo.eu.sales.orders", "demo.eu.orders", False),
        ("demo.eu.*.orders", "demo.eu.sales.orders", True),
        ("demo.eu.*.orders", "demo.us.sales.orders", False),
        ("demo.eu.*", "demo.eu.orders", True),
        ("demo.[x].t", "demo.[x].t", True),  # only * and ? are special
        ("demo.[x].t", "demo.x.t", False),
    ],
)
def test_matching(pattern, table, matches):
    assert TablePattern.parse(pattern).matches(t(table)) is matches


def test_regex_matches_the_whole_qualified_name_dots_included():
    pattern = TablePattern.parse(r"/demo\.prod_\d+\..*/")
    assert pattern.matches(t("demo.prod_1.orders"))
    assert pattern.matches(t("demo.prod_22.eu.orders"))
    assert not pattern.matches(t("demo.prod_x.orders"))
    # full match, not search
    assert not TablePattern.parse("/sales/").matches(t("demo.sales.orders"))
    assert TablePattern.parse("/.*sales.*/").matches(t("demo.sales.orders"))


@pytest.mark.parametrize(
    "pattern, message",
    [
        (r"/demo\.(sales/", "does not compile"),
        ("/" + "a" * 300 + "/", "at most 256"),
        ("/(a+)+b/", "exponential"),
        ("//", "empty"),
        ("/demo.sales", "start and end with '/'"),
        ("demo..orders", "empty part"),
        ("demo. sales.orders", "spaces"),
    ],
)
def test_bad_patterns(pattern, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("'", "'")):
        TablePattern.parse(pattern)


def test_table_name_is_the_core_identity():
    name = TableName.parse("demo.eu.sales.orders", "demo")
    assert name == TableName("demo", ("eu", "sales"), "orders")
    assert name.qualified == "demo.eu.sales.orders"
    assert TableName.parse("sales.orders", "demo").qualified == "demo.sales.orders"
