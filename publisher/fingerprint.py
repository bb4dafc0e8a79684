"""Fingerprinting the input data set, recorded in each manifest as ``source_fingerprint``.

The fingerprint is ``"files-sha256:"`` + the SHA-256 of: first one line per ``s3://``
input, its URL as given (not the objects under it), in the order given; then one line
per local input file, in the order the build reads the local inputs: the resolved path,
the size in bytes and the modification time in nanoseconds, tab-separated; then the key
type and the CSV and Parquet columns. (When S3 URLs and local paths are mixed, the build
reads them in the order given; the fingerprint keeps the URLs first, so fingerprints
already recorded stay comparable.) It is a metadata hash, not a content hash: it costs
no extra pass over the data, and it says which listing of which files a version was
built from. Whether a version changed is decided by the filter body's SHA-256, not by
this.
"""

from __future__ import annotations

import hashlib

from bloomswarm.common.errors import InputError

from .source_inputs import is_s3_url
from .sources import SourceSpec, expand_paths

PREFIX = "files-sha256:"


def source_fingerprint(source: SourceSpec) -> str:
    """The fingerprint of ``source``'s input files; InputError when one cannot be stat'ed."""
    digest = hashlib.sha256()
    local = [p for p in source.paths if not is_s3_url(p)]
    for url in (p for p in source.paths if is_s3_url(p)):
        digest.update(f"{url}\n".encode())
    for path in expand_paths(local) if local else []:
        try:
            stat = path.stat()
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
        line = f"{path.resolve()}\t{stat.st_size}\t{stat.st_mtime_ns}\n"
        digest.update(line.encode("utf-8", "surrogateescape"))
    digest.update(
        f"key_type={source.key_type}\tcsv_column={source.csv_column or ''}\t"
        f"parquet_column={source.parquet_column or ''}\n".encode()
    )
    return PREFIX + digest.hexdigest()
