//! The arrival histogram of a [`Report`] as text and as Prometheus
//! counters, what the live `/stats` and `/metrics` serve. The chart is drawn
//! by `stagger-report`; the proxy is handed it as [`super::Config::chart`].

use std::fmt::Write as _;

use super::record::Report;

impl Report {
    /// Requests that arrived.
    pub fn arrivals(&self) -> u64 {
        self.first_attempts + self.retries
    }

    /// The histogram as text: one line per second (first attempts and
    /// retries, a bar of each), faults marked.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} requests arrived: {} first attempts, {} retries ({} by x-retry-attempt, {} by \
             grpc-previous-rpc-attempts, {} by a repeated Idempotency-Key)",
            self.arrivals(),
            self.first_attempts,
            self.retries,
            self.retries_by.x_retry_attempt,
            self.retries_by.grpc_previous_rpc_attempts,
            self.retries_by.idempotency_key
        );
        let _ = writeln!(
            out,
            "forwarded {} (upstream 2xx {}, 5xx {}, unreachable {}); answered by faults: 503 {}, \
             429 {}, reset {}, blackholed {}; stalled {}, slowed {}, failovers {} (open connections \
             dropped {}; new ones refused by the kernel, not counted here); \
             keys answered 2xx twice: executed twice {}, replayed {} (marked \
             Idempotent-Replayed); answers no client received {} (it hung up first: \
             the upstream served them all the same)",
            self.forwarded,
            self.upstream_ok,
            self.upstream_5xx,
            self.upstream_errors,
            self.answered_503,
            self.answered_429,
            self.reset,
            self.blackholed,
            self.stalled,
            self.slowed,
            self.failovers,
            self.failover_dropped,
            self.duplicates,
            self.replayed,
            self.unclaimed
        );
        if !self.grpc_status.is_empty() {
            let by: Vec<String> = self
                .grpc_status
                .iter()
                .map(|(name, n)| format!("{name} {n}"))
                .collect();
            let _ = writeln!(
                out,
                "gRPC calls by grpc-status: {} (HTTP 200 all; only OK is in upstream 2xx)",
                by.join(", ")
            );
        }
        if let Some(why) = &self.first_upstream_error {
            let _ = writeln!(
                out,
                "no answer from the upstream ({}×), first: {why}",
                self.upstream_errors
            );
        }
        self.per_second(&mut out);
        out
    }

    /// The arrivals per second as bars of `#` (first attempts) and `+`
    /// (retries), each second marked with the faults holding in it.
    fn per_second(&self, out: &mut String) {
        let s = &self.series;
        let per_s = (1000 / self.bin_ms.max(1)).max(1) as usize;
        let secs: Vec<(u64, u64)> = s
            .first_attempts
            .chunks(per_s)
            .zip(s.retries.chunks(per_s))
            .map(|(f, r)| {
                (
                    f.iter().map(|&x| u64::from(x)).sum(),
                    r.iter().map(|&x| u64::from(x)).sum(),
                )
            })
            .collect();
        let top = secs.iter().map(|(f, r)| f + r).max().unwrap_or(0).max(1);
        let _ = writeln!(out, "arrivals per second (# first attempts, + retries):");
        let _ = writeln!(out, "{:>6}  {:>7}  {:>7}", "second", "first", "retries");
        for (i, (f, r)) in secs.iter().enumerate() {
            let bar = |n: u64| ((n * 50).div_ceil(top)) as usize;
            let t = i as f64;
            let marks: Vec<&str> = self
                .faults
                .iter()
                .filter(|w| t + 1.0 > w.start_s && w.end_s.is_none_or(|e| t < e))
                .map(|w| w.kind.as_str())
                .collect();
            let line = format!(
                "{i:>6}  {f:>7}  {r:>7}  {}{}{}",
                "#".repeat(bar(*f)),
                "+".repeat(bar(*r)),
                if marks.is_empty() {
                    String::new()
                } else {
                    format!("  [{}]", marks.join(", "))
                }
            );
            let _ = writeln!(out, "{}", line.trim_end());
        }
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
