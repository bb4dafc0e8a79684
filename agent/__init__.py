"""bloomswarm.agent: the sidecar that learns of new versions, fetches them peer-to-peer,
verifies them, hot-swaps the data directory's ``current`` link and seeds (docs/agent.md).

Entry point: ``bloomswarm agent run`` (``cli/agent_commands.py``), which builds an
:class:`~.daemon.AgentDaemon` from an :class:`~.config.AgentConfig`.
"""
