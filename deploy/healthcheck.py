"""Container health check: exit 0 when this container's Faust web server answers `/metrics`.

The images run it as their HEALTHCHECK with the image's own Python, so they need no curl; the
port comes from the same `Settings` the worker reads, so the two can never disagree.
"""

from __future__ import annotations

import sys
import urllib.request

from streams.settings import Settings


def main() -> int:
    url = f"http://127.0.0.1:{Settings.from_env().web_port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=4) as response:
            return 0 if response.status == 200 else 1
    except OSError as exc:
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
