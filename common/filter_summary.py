"""The filter's parameters as a manifest records them (its ``filter`` object)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .document_fields import Fields, check_int, require
from .header import FilterHeader
from .params import FilterParams, HashId, Layout, params_problem

HASH_NAME = "murmur3_x64_128"
"""The only hash function a filter uses."""


@dataclass(frozen=True)
class FilterSummary:
    """The filter's parameters as recorded in the manifest; must equal the file's header.

    Construction validates every field and raises FormatError on a bad value. Strict:
    unknown fields are refused, because a filter parameter this code does not know
    means it cannot read the filter (that change comes with a new header format).
    """

    layout: str
    """"blocked" or "standard"."""
    num_bits: int
    num_probes: int
    hash_seed: int
    key_count: int
    """Keys actually inserted."""
    capacity: int
    """Keys the filter was sized for."""
    target_fpp: float
    """False-positive rate the filter was sized for, in (0, 1)."""
    hash: str = HASH_NAME
    """The hash function; only "murmur3_x64_128" exists."""

    def __post_init__(self) -> None:
        require(self.layout in ("blocked", "standard"), f"unknown layout {self.layout!r:.40}")
        require(self.hash == HASH_NAME, f"unknown hash {self.hash!r:.40}")
        for name in ("num_bits", "num_probes", "hash_seed", "key_count"):
            check_int(getattr(self, name), f"filter.{name}")
        check_int(self.capacity, "filter.capacity", 1)
        require(
            isinstance(self.target_fpp, float) and 0.0 < self.target_fpp < 1.0,
            f"filter.target_fpp must be a number in (0, 1), got {self.target_fpp!r:.40}",
        )
        layout = Layout.parse(self.layout)
        problem = params_problem(layout, self.num_bits, self.num_probes, self.hash_seed)
        require(problem is None, f"filter: {problem}")

    def to_params(self) -> FilterParams:
        """The :class:`FilterParams` these values describe."""
        return FilterParams(
            Layout.parse(self.layout),
            self.num_bits,
            self.num_probes,
            self.hash_seed,
            HashId.MURMUR3_X64_128,
        )

    @classmethod
    def from_header(cls, header: FilterHeader) -> FilterSummary:
        """The summary of a filter file's header."""
        return cls(
            layout=header.params.layout.label,
            num_bits=header.params.num_bits,
            num_probes=header.params.num_probes,
            hash_seed=header.params.hash_seed,
            key_count=header.key_count,
            capacity=header.capacity,
            target_fpp=header.target_fpp,
            hash=header.params.hash_id.name.lower(),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object form."""
        return {name: getattr(self, name) for name in _SUMMARY_FIELDS}

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> FilterSummary:
        """Parse the JSON object form strictly; FormatError on any fault."""
        r = Fields(obj, "manifest filter")
        values = {name: r.value(name) for name in _SUMMARY_FIELDS}
        unknown = sorted(r.rest())
        require(not unknown, f"manifest filter: unknown fields {unknown!r:.100}")
        return cls(**values)


_SUMMARY_FIELDS = tuple(f.name for f in fields(FilterSummary))

__all__ = ["HASH_NAME", "FilterSummary"]
