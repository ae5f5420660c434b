"""The metric families ``/metrics`` serves (api/prometheus.py), built from plain values: counters and gauges
from ``{(sample name, label values): value}``, and a summary over a window's values; Floe's operation label."""

from __future__ import annotations

import math
from typing import Iterable, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

QUANTILES = (0.5, 0.9, 0.99)
Key = tuple[str, tuple[str, ...]]  # (sample name, label values)


def operation_label(name: str) -> str:
    """Floe's operation label: lowercase (``rewrite_data_files``)."""
    return name.lower()


def quantiles(values: list[float]) -> list[tuple[float, float]]:
    ordered = sorted(values)
    if not ordered:
        return [(q, math.nan) for q in QUANTILES]
    return [(q, ordered[max(0, math.ceil(q * len(ordered)) - 1)]) for q in QUANTILES]


def window_summary(name: str, documentation: str, values: list[float]) -> Metric:
    """A summary over the window: quantiles, and ``_count``/``_sum`` of the same runs (their mean;
    they are not cumulative, so ``rate()`` does not apply)."""
    family = Metric(name, documentation, "summary")
    for q, value in quantiles(values):
        family.add_sample(name, {"quantile": f"{q:g}"}, value)
    family.add_sample(name + "_count", {}, float(len(values)))
    family.add_sample(name + "_sum", {}, float(sum(values)))
    return family


def counter(name: str, documentation: str, labels: Iterable[str], values: Mapping[Key, float]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=list(labels))
    wanted = name + "_total"
    for (sample_name, label_values), value in sorted(values.items()):
        if sample_name == wanted:
            family.add_metric(list(label_values), value)
    return family


def gauge(name: str, documentation: str, value: float | None = None, labels: Iterable[str] = (),
           values: Mapping[tuple[str, ...], float] | None = None) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, value=value, labels=None if value is not None else list(labels))
    for label_values, sample in sorted((values or {}).items()):
        family.add_metric(list(label_values), sample)
    return family
