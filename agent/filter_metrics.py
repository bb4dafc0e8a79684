"""One /metrics page for many filters: each filter's series labelled ``filter="NAME"``.

Every filter's daemon keeps its own :class:`~.metrics.AgentMetrics` (a registry of its
own, so a filter added or dropped on reload brings or takes its series and nothing
else). :class:`FilterMetricsCollector` merges them into one family per metric name, each
sample gaining the label ``filter``, as Prometheus requires (one family is one block of
the text format). Series of the agent as a whole (the index poll, the refused peers and
certificates of the one shared session) come unlabelled from ``agent_families``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

FILTER_LABEL = "filter"


class FilterMetricsCollector:
    """Collects ``registries()`` (filter name -> registry), each sample labelled with its
    filter, then ``agent_families()`` as they are."""

    def __init__(self, registries: Callable[[], Mapping[str, CollectorRegistry]],
                 agent_families: Callable[[], Iterable[Metric]] = tuple) -> None:
        self._registries = registries
        self._agent_families = agent_families

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for name, registry in sorted(self._registries().items()):
            for family in registry.collect():
                target = merged.get(family.name)
                if target is None:
                    target = merged[family.name] = Metric(family.name, family.documentation, family.type)
                for sample in family.samples:
                    target.add_sample(sample.name, {**sample.labels, FILTER_LABEL: name}, sample.value,
                                      sample.timestamp, sample.exemplar)
        yield from merged.values()
        yield from self._agent_families()


def filter_registry(registries: Callable[[], Mapping[str, CollectorRegistry]],
                    agent_families: Callable[[], Iterable[Metric]] = tuple) -> CollectorRegistry:
    """A registry serving :class:`FilterMetricsCollector` (what /metrics exposes)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FilterMetricsCollector(registries, agent_families))
    return registry


__all__ = ["FILTER_LABEL", "FilterMetricsCollector", "filter_registry"]
