"""The worker subprocess the integration tests start (the same one `barcast demo` runs)."""

from streams.process import FAUST, WorkerProcess

Worker = WorkerProcess

__all__ = ["FAUST", "Worker"]
