"""bloomswarm: versioned Bloom filter files, distributed over BitTorrent, read through mmap.

    from bloomswarm import LiveFilter
    live = LiveFilter("/var/lib/bloomswarm")
    if b"user:42" in live: ...
"""

from typing import TYPE_CHECKING

from bloomswarm.common import Layout

if TYPE_CHECKING:
    from bloomswarm.common import Filter, FilterBuilder, LiveFilter

__version__ = "0.1.0"

__all__ = ["Filter", "FilterBuilder", "Layout", "LiveFilter", "__version__"]


if not TYPE_CHECKING:  # the type checker sees the imports above

    def __getattr__(name: str) -> object:
        """Filter, FilterBuilder and LiveFilter, imported (with numpy) on first use: the
        ``bloomswarm`` command imports this package, and ``--help`` needs none of them."""
        if name in ("Filter", "FilterBuilder", "LiveFilter"):
            from bloomswarm import common

            value = getattr(common, name)
            globals()[name] = value
            return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
