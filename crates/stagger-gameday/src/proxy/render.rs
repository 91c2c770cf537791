//! A [`Report`]'s counters in the Prometheus text format, what the live
//! `/metrics` serves. The histogram's text and chart are drawn by
//! `stagger-report`; the proxy is handed them as [`super::Config::text`] and
//! [`super::Config::chart`].

use std::fmt::Write as _;

use super::record::Report;

impl Report {
    /// Requests that arrived.
    pub fn arrivals(&self) -> u64 {
        self.first_attempts + self.retries
    }

    /// The counters in the Prometheus text format (`--metrics-addr`).
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        let mut family = |name: &str, help: &str, rows: &[(&str, u64)]| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (labels, v) in rows {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        };
        family(
            "stagger_proxy_arrivals_total",
            "Requests arriving at the proxy, by attempt (first or retry).",
            &[
                ("{attempt=\"first\"}", self.first_attempts),
                ("{attempt=\"retry\"}", self.retries),
            ],
        );
        family(
            "stagger_proxy_forwarded_total",
            "Requests sent to the upstream.",
            &[("", self.forwarded)],
        );
        family(
            "stagger_proxy_upstream_responses_total",
            "Upstream answers, by class (ok: 2xx or gRPC OK, error: 5xx or a gRPC status other \
             than OK, unreachable: no answer).",
            &[
                ("{class=\"ok\"}", self.upstream_ok),
                (
                    "{class=\"error\"}",
                    self.upstream_5xx + self.upstream_grpc_errors,
                ),
                ("{class=\"unreachable\"}", self.upstream_errors),
            ],
        );
        family(
            "stagger_proxy_faulted_total",
            "Requests or connections a fault acted on, by fault.",
            &[
                ("{fault=\"503\"}", self.answered_503),
                ("{fault=\"429\"}", self.answered_429),
                ("{fault=\"reset\"}", self.reset),
                ("{fault=\"blackhole\"}", self.blackholed),
                ("{fault=\"stall\"}", self.stalled),
                ("{fault=\"slow\"}", self.slowed),
                ("{fault=\"failover\"}", self.failover_dropped),
            ],
        );
        out
    }
}
