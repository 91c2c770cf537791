"""grpcio's own A6 client, the reference for stagger's differential tests.

Usage: a6_client.py PORT CONFIG_JSON CALLS TIMEOUT_S

Makes CALLS grpc.health.v1.Health/Check calls to 127.0.0.1:PORT, one after
another, on one channel whose service config is CONFIG_JSON (retries
enabled), each with a deadline of TIMEOUT_S seconds, and prints the final
status name of each call as one JSON list on one line.
"""

import json
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main():
    port, config, calls, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    json.loads(config)  # a bad config is the test's mistake: fail loudly
    options = [
        ("grpc.enable_retries", 1),
        ("grpc.service_config", config),
    ]
    out = []
    with grpc.insecure_channel("127.0.0.1:%s" % port, options=options) as channel:
        grpc.channel_ready_future(channel).result(timeout=10)
        stub = health_pb2_grpc.HealthStub(channel)
        for _ in range(calls):
            try:
                stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout)
                out.append("OK")
            except grpc.RpcError as e:
                out.append(e.code().name)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
