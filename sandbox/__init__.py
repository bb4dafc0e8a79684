"""A bloomswarm fleet on one machine, for the demo, the benchmarks and the functional tests.

Every part is a real server or process on loopback, started and stopped by its own PID:
moto's S3 server (:mod:`.s3server`), Debian's opentracker (:mod:`.tracker`), the one HTTP
origin (:mod:`.origin`: counting, Range, caps, faults, URL expiry; its Range parser is
:mod:`.http_range`), agents running ``bloomswarm agent run`` (:mod:`.agent_process`) and
the whole deployment of them (:mod:`.fleet`: :class:`~.fleet.LocalFleet`, swarm or
direct). Below the agents, :mod:`.swarm_worker` runs one bare swarm session in a process
and :mod:`.worker_swarm` a set of them downloading one torrent (the swarm tests and the
origin-policy benchmark). :mod:`.fuzz_targets` holds the parsers' fuzz targets (the
fuzzing tests and benchmarks/fuzz.py). Nothing here is used in production; the servers
need the ``demo`` extra (``moto[server]``).
"""
