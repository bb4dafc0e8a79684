"""A bloomswarm fleet on one machine, for the demo, the benchmarks and the functional tests.

Every part is a real server or process on 127.0.0.1, started and stopped by its own PID:
moto's S3 server (:mod:`.s3server`), Debian's opentracker (:mod:`.tracker`) and agents
running ``bloomswarm agent run`` (:mod:`.agent_process`). Nothing here is used in
production; it needs the ``demo`` extra (``moto[server]``).
"""
