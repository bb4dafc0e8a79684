"""Run ``bloomswarm ARGS`` with every S3 request announced on stderr, optionally delayed, and
optionally held until a go signal: lets the functional tests kill a publisher between any
two requests (or during one), and make racing publishers overlap.

    python tests/functional/publisher_driver.py publish keys.txt --config ...

Environment:

    BSW_TEST_REQUEST_DELAY  seconds to sleep before each S3 request (default 0)
    BSW_TEST_GO_FILE        print "bsw-test: ready" on stderr, then wait until this file
                            exists before running the command

Each request prints ``bsw-test: request <n> <operation> <key's last part>`` on stderr
before its delay.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

REQUEST_MARK = "bsw-test: request"
READY_MARK = "bsw-test: ready"


def main() -> int:
    from bloomswarm.common import storage
    from bloomswarm.main import main as bloomswarm_main

    delay = float(os.environ.get("BSW_TEST_REQUEST_DELAY", "0"))
    count = 0

    def announce(event_name: str, params: dict[str, Any] | None = None, **_kwargs: Any) -> None:
        nonlocal count
        count += 1
        key = str((params or {}).get("Key", "-")).rsplit("/", 1)[-1]
        operation = event_name.rsplit(".", 1)[-1]
        print(f"{REQUEST_MARK} {count} {operation} {key}", file=sys.stderr, flush=True)
        if delay:
            time.sleep(delay)

    original_init = storage.S3ObjectStore.__init__

    def init_announcing(self: storage.S3ObjectStore, config: storage.S3Config) -> None:
        original_init(self, config)
        self._client.meta.events.register("before-parameter-build.s3.*", announce)

    storage.S3ObjectStore.__init__ = init_announcing  # type: ignore[method-assign]
    go_file = os.environ.get("BSW_TEST_GO_FILE")
    if go_file:
        print(READY_MARK, file=sys.stderr, flush=True)
        while not Path(go_file).exists():
            time.sleep(0.002)
    return bloomswarm_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
