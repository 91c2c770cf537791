"""A grpcio health server that fails on purpose, for stagger's interop tests.

Usage: fault_server.py STEP[,STEP...]

Each Check request takes the next step; once they are spent, it answers
SERVING. Steps:
  ok                  answer SERVING
  unavailable         UNAVAILABLE before anything is sent (trailers-only)
  after_headers       send the response headers, then fail UNAVAILABLE
  pushback:MS         UNAVAILABLE with grpc-retry-pushback-ms: MS
  exhausted           RESOURCE_EXHAUSTED
  exhausted:MS        RESOURCE_EXHAUSTED with grpc-retry-pushback-ms: MS
  slow:MS             sleep MS milliseconds, then answer SERVING
  internal            INTERNAL (trailers-only)
  late:MS             sleep MS milliseconds, then UNAVAILABLE

Listens on 127.0.0.1 on a free port and prints `PORT <n>`; then prints one
line per request, `REQ prev=<grpc-previous-rpc-attempts or -> left_ms=<time
left or -> t=<ms since the server started>`. Stops when stdin closes.
"""

import sys
import threading
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

lock = threading.Lock()
START = time.monotonic()


class Faulty(health_pb2_grpc.HealthServicer):
    def __init__(self, steps):
        self.steps = list(steps)

    def Check(self, request, context):
        meta = dict(context.invocation_metadata())
        left = context.time_remaining()
        left = "-" if left is None or left > 1e6 else str(int(left * 1000))
        with lock:
            step = self.steps.pop(0) if self.steps else "ok"
            now_ms = (time.monotonic() - START) * 1000.0
            prev = meta.get("grpc-previous-rpc-attempts", "-")
            print("REQ prev=%s left_ms=%s t=%.1f" % (prev, left, now_ms), flush=True)
        name, _, arg = step.partition(":")
        if name == "unavailable":
            context.abort(grpc.StatusCode.UNAVAILABLE, "scripted")
        if name == "after_headers":
            context.send_initial_metadata(())
            context.abort(grpc.StatusCode.UNAVAILABLE, "scripted after headers")
        if name == "pushback":
            context.set_trailing_metadata((("grpc-retry-pushback-ms", arg),))
            context.abort(grpc.StatusCode.UNAVAILABLE, "scripted pushback")
        if name == "exhausted":
            if arg:
                context.set_trailing_metadata((("grpc-retry-pushback-ms", arg),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "scripted")
        if name == "internal":
            context.abort(grpc.StatusCode.INTERNAL, "scripted")
        if name == "late":
            time.sleep(int(arg) / 1000.0)
            context.abort(grpc.StatusCode.UNAVAILABLE, "scripted late")
        if name == "slow":
            time.sleep(int(arg) / 1000.0)
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


def main():
    steps = [s for s in sys.argv[1].split(",") if s] if len(sys.argv) > 1 else []
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    health_pb2_grpc.add_HealthServicer_to_server(Faulty(steps), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print("PORT %d" % port, flush=True)
    sys.stdin.read()
    server.stop(0)


if __name__ == "__main__":
    main()
