"""A grpcio client with an A6 retry policy, for stagger's interop tests.

Usage: retry_client.py PORT CALLS

Sends CALLS concurrent grpc.health.v1.Health/Check calls to 127.0.0.1:PORT
on a channel whose service config retries UNAVAILABLE up to 5 attempts
(10 ms initial backoff), and prints the status name of each call, one JSON
list on one line.
"""

import json
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

CONFIG = {
    "methodConfig": [
        {
            "name": [{"service": "grpc.health.v1.Health"}],
            "retryPolicy": {
                "maxAttempts": 5,
                "initialBackoff": "0.01s",
                "maxBackoff": "0.05s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        }
    ]
}


def main():
    port, calls = int(sys.argv[1]), int(sys.argv[2])
    options = [
        ("grpc.enable_retries", 1),
        ("grpc.service_config", json.dumps(CONFIG)),
    ]
    with grpc.insecure_channel("127.0.0.1:%d" % port, options=options) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        pending = [
            stub.Check.future(health_pb2.HealthCheckRequest(), timeout=10)
            for _ in range(calls)
        ]
        out = []
        for f in pending:
            try:
                f.result()
                out.append("OK")
            except grpc.RpcError as e:
                out.append(e.code().name)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
