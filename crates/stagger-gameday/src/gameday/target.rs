//! `--target`: the game-day against a real upstream.
//!
//! The fleet is the game-day's (pods, rate, strategies, the drill); the
//! server is the user's, and an embedded fault proxy ([`crate::proxy`]) on
//! 127.0.0.1 in front of it injects the fault on the game-day's timeline:
//! `stall` holds requests, `failover` refuses connections, `dead` answers
//! 503 for the whole run, `throttle` 429 with `Retry-After`, `slow` adds
//! nine service times (the game-day's ×10) before forwarding, `reset`
//! resets connections after forwarding every other request. What arrives
//! is counted at the proxy, first attempts and retries told apart as
//! [`crate::proxy::record`] does; `dup` counts keys the upstream answered
//! with success twice without marking the second `Idempotent-Replayed`
//! (writes applied twice), and a marked replay counts as deduplicated.
//! The upstream's capacity is what `--workers` ÷ `--service-time` state.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use http::uri::Uri;

use super::{fleet, Arrived, Config, Method, Plan};
use crate::bins::Timeline;
use crate::fault::Window;
use crate::proxy::{self, Proxy, Upstream};
use crate::{Error, ErrorKind};

/// A checked `--target`.
#[derive(Debug, Clone)]
pub(super) struct Target {
    upstream: Upstream,
    path: String,
}

impl Target {
    /// Checks `--target` against the rest of the game-day's flags.
    pub fn check(url: &str, a: &Config) -> Result<Target, Error> {
        let bad = |m: String| Error::usage(format!("--target: {m}"));
        let uri: Uri = url.parse().map_err(|_| {
            bad(format!(
                "`{url}` is not a URL (e.g. http://127.0.0.1:8080/work)"
            ))
        })?;
        let path = uri
            .path_and_query()
            .map_or("/".to_string(), |p| p.as_str().to_string());
        let base = match (uri.scheme_str(), uri.authority()) {
            (Some(s), Some(h)) => format!("{s}://{h}"),
            _ => {
                return Err(bad(format!(
                    "`{url}` needs a scheme and a host (e.g. http://127.0.0.1:8080/work)"
                )))
            }
        };
        let upstream = proxy::upstream("--target", &base).map_err(Error::usage)?;
        if a.shed_retries || a.drop_expired || a.server_limit.is_some() {
            return Err(bad(
                "--shed-retries, --drop-expired and --server-limit are layers of the \
                 game-day's own server; a target brings its own"
                    .into(),
            ));
        }
        if let Some(f) = a.fault.filter(|f| f.kernel_only()) {
            return Err(Error::usage(format!(
                "--fault: {} is a kernel fault of --hosts; in front of a target the proxy \
                 injects every other fault",
                f.name()
            )));
        }
        if a.soak {
            return Err(bad("a soak runs against the game-day's own server".into()));
        }
        Ok(Target { upstream, path })
    }

    /// The fault as a proxy window on the game-day's timeline.
    fn faults(plan: &Plan) -> Vec<Window> {
        let s = &plan.server;
        let never_ends = plan.params.outage_end_s.is_none();
        s.fault
            .map(|kind| Window {
                kind,
                start: s.fault_start,
                length: (!never_ends).then(|| s.fault_end.saturating_sub(s.fault_start)),
            })
            .into_iter()
            .collect()
    }

    /// One strategy's fleet through a fresh proxy in front of the target.
    pub async fn run(
        &self,
        plan: &Plan,
        fleet_cfg: fleet::Config,
        grace: Duration,
    ) -> Result<(fleet::Outcome, Arrived), Error> {
        let start = Instant::now() + Duration::from_millis(200);
        let span = plan.fleet.duration + grace;
        let line = Timeline::new(start, span);
        let mut cfg = proxy::Config::new(
            (std::net::Ipv4Addr::LOCALHOST, 0).into(),
            self.upstream.clone(),
        );
        cfg.faults = Target::faults(plan);
        cfg.span = span;
        let p = Proxy::start_at(cfg, start).await.map_err(|e| {
            Error::with(
                ErrorKind::Run,
                "cannot start the fault proxy on 127.0.0.1",
                e,
            )
        })?;
        let url = format!("http://{}{}", p.addr, self.path);
        let out = fleet::run(fleet_cfg, &url, line, grace).await;
        let rec = p.recorder();
        let n = line.len;
        let note = one_answer(&rec.statuses(), rec.upstream_name(), plan.fleet.method);
        let report = p.report();
        let mut notes: Vec<String> = note.into_iter().collect();
        notes.extend(forwarding(&report, rec.upstream_name()));
        let seen = Arrived {
            first: rec.first(),
            retries: rec.retries(),
            completed: rec.successes(),
            abandoned: vec![0; n],
            rejected: rec.rejected(),
            duplicates: report.duplicates,
            deduplicated: report.replayed,
            shed: None,
            notes,
        };
        p.stop();
        Ok((out?, seen))
    }
}

/// A line when what the upstream served differs from what arrived: the
/// attempts held by a fault until their clients hung up (never sent on),
/// and the answers that reached no client (the upstream served them, and
/// they count in `dup`, but nobody saw them). Its `forwarded` is the number
/// of requests the upstream's access log should hold.
fn forwarding(r: &proxy::Report, server: Option<&str>) -> Option<String> {
    let arrived = r.first_attempts + r.retries;
    // Answered by the proxy's faults without forwarding: every 503, 429 and
    // blackhole, and every other reset.
    let answered = r.answered_503 + r.answered_429 + r.blackholed + r.reset / 2;
    let dropped = arrived.saturating_sub(r.forwarded + answered);
    if dropped == 0 && r.unclaimed == 0 {
        return None;
    }
    Some(format!(
        "the proxy forwarded {} of the {arrived} attempts that arrived to {}: {dropped} were held \
         by the fault until their clients hung up and never sent on, {answered} were answered by \
         the fault itself; {} answers reached no client (it had hung up first), though the \
         upstream served them and they count in dup",
        r.forwarded,
        server.unwrap_or("the target"),
        r.unclaimed
    ))
}

/// A line when the upstream gave one answer other than a success to most
/// of what was forwarded (more than half): the strategies' numbers are
/// then about that answer, not about the fault, and the line says what to
/// check.
fn one_answer(
    statuses: &BTreeMap<u16, u64>,
    server: Option<&str>,
    method: Method,
) -> Option<String> {
    let total: u64 = statuses.values().sum();
    let (&status, &n) = statuses.iter().max_by_key(|(_, &n)| n)?;
    if (200..300).contains(&status) || n * 2 <= total {
        return None;
    }
    let hint = match status {
        405 => format!(
            "does the endpoint accept {}? (--method GET for a read, POST for a write)",
            method.as_str()
        ),
        404 | 410 => "is the path in --target right?".to_string(),
        401 | 403 => "does the endpoint need credentials? the fleet sends none".to_string(),
        300..=399 => "it redirects; give --target the URL it redirects to".to_string(),
        500..=599 => "it fails without any fault; check it before a game-day".to_string(),
        _ => format!("does the endpoint take the fleet's {}s?", method.as_str()),
    };
    let pct = 100.0 * n as f64 / total as f64;
    Some(format!(
        "{} answered {status} to {pct:.0} % of the requests it was sent ({n} of {total}): {hint}",
        server.unwrap_or("the target")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_answering_405_to_most_requests_is_named_with_what_to_check() {
        let all = BTreeMap::from([(405, 400)]);
        let line = one_answer(&all, Some("nginx"), Method::Post).unwrap();
        assert_eq!(
            line,
            "nginx answered 405 to 100 % of the requests it was sent (400 of 400): does the \
             endpoint accept POST? (--method GET for a read, POST for a write)"
        );
        let most = BTreeMap::from([(200, 30), (404, 70)]);
        let line = one_answer(&most, None, Method::Get).unwrap();
        assert!(
            line.starts_with("the target answered 404 to 70 %"),
            "{line}"
        );
        assert!(line.contains("path"), "{line}");
    }

    #[test]
    fn successes_or_no_majority_leave_no_line() {
        assert_eq!(one_answer(&BTreeMap::new(), None, Method::Get), None);
        let ok = BTreeMap::from([(200, 99), (503, 1)]);
        assert_eq!(one_answer(&ok, None, Method::Get), None);
        // Half is not most.
        let split = BTreeMap::from([(200, 50), (503, 50)]);
        assert_eq!(one_answer(&split, None, Method::Get), None);
        let mixed = BTreeMap::from([(200, 20), (500, 40), (503, 40)]);
        assert_eq!(one_answer(&mixed, None, Method::Get), None);
    }
}
