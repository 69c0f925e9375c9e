"""Print why HOST:PORT cannot be listened on (nothing when it can); used by launch_vllm.sh and run.sh.

    python scripts/port_problem.py HOST PORT

A listener already there would make vLLM load the whole model (or the gateway start its
lifespan) and only then fail. Standard library only: any Python runs it.
"""

import socket
import sys

host, port = sys.argv[1], int(sys.argv[2])
try:
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    with socket.socket(family, kind, proto) as probe:
        # The same option uvicorn sets: only a live listener makes the bind fail.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(address)
except OSError as exc:
    print(exc.strerror or exc)
