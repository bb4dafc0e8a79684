"""bloomswarm: versioned Bloom filter files, distributed over BitTorrent, read through mmap.

    from bloomswarm import LiveFilter
    live = LiveFilter("/var/lib/bloomswarm")
    if b"user:42" in live: ...
"""

from bloomswarm.common import Filter, FilterBuilder, Layout, LiveFilter

__version__ = "0.1.0"

__all__ = ["Filter", "FilterBuilder", "Layout", "LiveFilter", "__version__"]
