"""Writes a cluster dump of N objects on stdout, as `kubectl get … -A -o yaml`
prints one (`kind: List`), for timing `stagger audit -` (see BENCHMARKS.md).

    python3 crates/stagger-cli/benches/audit_dump.py 10000 > /tmp/dump.yaml
    python3 crates/stagger-cli/benches/audit_dump.py 10000 --apps > /tmp/apps.yaml

Plain: a quarter each of mesh VirtualServices of two kinds, DestinationRules
capping their retries, and HTTPRoutes. With --apps, every group of four is
an HTTPRoute to an application, the application's resilience4j retry to a
database, the database's VirtualService and its DestinationRule: one
three-layer call path per group.
"""
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
apps = "--apps" in sys.argv
out = ["apiVersion: v1", "kind: List", "items:"]


def vs(name, ns, attempts):
    return [
        "- apiVersion: networking.istio.io/v1",
        "  kind: VirtualService",
        f"  metadata: {{name: {name}, namespace: {ns}}}",
        "  spec:",
        f"    hosts: [{name}]",
        "    http:",
        "    - route:",
        f"      - destination: {{host: {name}}}",
        f"      retries: {{attempts: {attempts}, perTryTimeout: 2s, retryOn: 5xx}}",
    ]


def dr(host, ns, max_retries):
    return [
        "- apiVersion: networking.istio.io/v1",
        "  kind: DestinationRule",
        f"  metadata: {{name: {host}, namespace: {ns}}}",
        "  spec:",
        f"    host: {host}",
        f"    trafficPolicy: {{connectionPool: {{http: {{maxRetries: {max_retries}}}}}}}",
    ]


def route(name, ns, backend):
    return [
        "- apiVersion: gateway.networking.k8s.io/v1",
        "  kind: HTTPRoute",
        f"  metadata: {{name: {name}, namespace: {ns}}}",
        "  spec:",
        "    parentRefs: [{name: public}]",
        "    rules:",
        f"    - backendRefs: [{{name: {backend}, port: 80}}]",
        "      retry: {attempts: 2, codes: [503]}",
    ]


def app(name, calls):
    return [
        "- spring: {application: {name: %s}}" % name,
        "  resilience4j.retry: {instances: {%s: {maxAttempts: 3, waitDuration: 100ms}}}" % calls,
    ]


for g in range(n // 4):
    ns = f"team-{g % 50}"
    if apps:
        out += route(f"route-{g}", ns, f"app-{g}")
        out += app(f"app-{g}", f"db-{g}")
        out += vs(f"db-{g}", ns, 1 + g % 3)
        out += dr(f"db-{g}", ns, 1 + g % 7)
    else:
        out += vs(f"svc-{g}-a", ns, 1 + g % 5)
        out += vs(f"svc-{g}-b", ns, 1 + (g + 1) % 5)
        out += dr(f"svc-{g}-a", ns, 1 + g % 7)
        out += route(f"route-{g}", ns, f"svc-{g}-b")
print("\n".join(out))
