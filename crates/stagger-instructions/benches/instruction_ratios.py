#!/usr/bin/env python3
"""Prints each layer's instruction count over its peer's, from the summaries
gungraun writes for `benches/instructions.rs` when run with
GUNGRAUN_SAVE_SUMMARY=json (see that file). Counts are per call: every
benchmark counts CALLS calls."""
import glob
import json
import os
import sys

CALLS = 100
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")
target = os.environ.get("CARGO_TARGET_DIR", os.path.join(root, "target"))
pattern = os.path.join(target, "gungraun", "stagger-instructions", "instructions", "*", "*", "summary.json")

counts = {}
for path in glob.glob(pattern):
    summary = json.load(open(path))
    ir = summary["profiles"][0]["data"]["total"]["metrics"]["Ir"]["values"]["new"]
    counts["%s.%s" % (summary["function_name"], summary["id"])] = ir / CALLS

if not counts:
    sys.exit("no instruction summaries under %s: run the instructions bench with "
             "GUNGRAUN_SAVE_SUMMARY=json first" % pattern)

missing = []


def get(name):
    if name not in counts:
        missing.append(name)
        return float("nan")
    return counts[name]


print("instructions per call")
for name in sorted(counts):
    print("  %-45s %9.0f" % (name, counts[name]))

per_retry = lambda f: (get(f + ".x10") - get(f + ".x1")) / 9
rows = [
    ("RetryLayer / tower Retry, cloning policy", get("http_stagger.stagger_retry_layer"),
     get("http_tower_cloning.tower_retry_cloning"), 1.1),
    ("RetryLayer / tower Retry, no-op policy", get("http_stagger.stagger_retry_layer"),
     get("http_tower_noop.tower_retry_noop"), 1.5),
    ("hedging (p95) / tower hedge (p95)", get("hedge_stagger.stagger_hedging_p95"),
     get("hedge_tower.tower_hedge_p95"), 1.0),
    ("ShedLayer AIMD / tower-acc Aimd", get("shed_stagger.stagger_shed_aimd"),
     get("shed_acc_aimd.tower_acc_aimd"), 1.0),
    ("ShedLayer AIMD / tower-acc Aimd, http request", get("shed_stagger.stagger_shed_aimd"),
     get("shed_acc_http.tower_acc_aimd_http"), 1.0),
    ("ShedLayer gradient / tower-acc Gradient2", get("shed_stagger.stagger_shed_gradient"),
     get("shed_acc_gradient.tower_acc_gradient2"), 1.0),
    ("gRPC layer / bare service", get("grpc_layer.stagger_grpc_layer"),
     get("grpc_bare.plain_service"), None),
    ("one more retry: stagger / backon", per_retry("retries_stagger"),
     per_retry("retries_backon"), 1.0),
]
print("ratios (same run; instructions)")
for label, ours, peer, target_ratio in rows:
    ratio = ours / peer
    if target_ratio is None:
        verdict = "+%.0f instructions per call" % (ours - peer)
    else:
        verdict = "target <= %.1fx: %s" % (target_ratio, "met" if ratio <= target_ratio else "missed")
    print("  %-47s %5.2fx  (%.0f vs %.0f)  %s" % (label, ratio, ours, peer, verdict))
if missing:
    sys.exit("missing benchmarks: %s" % ", ".join(sorted(set(missing))))
