"""Re-exports :mod:`bloomswarm.sandbox.agent_process` for the functional tests."""

from bloomswarm.sandbox.agent_process import AgentProcess

__all__ = ["AgentProcess"]
