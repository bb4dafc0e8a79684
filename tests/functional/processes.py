"""Re-exports :mod:`bloomswarm.sandbox.processes` for the functional tests."""

from bloomswarm.sandbox.processes import Service, free_port, stop_process, wait_for_http

__all__ = ["Service", "free_port", "stop_process", "wait_for_http"]
