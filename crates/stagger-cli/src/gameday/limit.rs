//! The game-day's server-side shedding flags: a concurrency limit in front
//! of the server and an overload ramp to push it past its capacity.

use stagger::limit::Algorithm;

use crate::args::UsageError;

/// `--server-limit` and `--ramp-to`, flattened into `stagger gameday`.
#[derive(Debug, Clone, clap::Args)]
pub struct LimitArgs {
    /// A concurrency limit in front of the server, the library's ShedLayer
    /// with a Limiter: none | static:N | aimd | gradient. What is over the
    /// limit is answered 503 with a Retry-After of 1 to 5 s, retries first
    /// (they may use 80 % of it); aimd and gradient follow the latency of
    /// the work admitted (e.g. `--server-limit gradient --drop-expired`).
    #[arg(long, value_name = "L", default_value = "none")]
    pub server_limit: String,
    /// An overload ramp: the fleet's rate grows linearly from --rate at the
    /// start to this at the end of the traffic (e.g. `--rate 100 --ramp-to
    /// 400` against capacity 200).
    #[arg(long, value_name = "R")]
    pub ramp_to: Option<f64>,
}

impl LimitArgs {
    /// The limit's algorithm, `None` for `none`.
    pub fn algorithm(&self) -> anyhow::Result<Option<Algorithm>> {
        match self.server_limit.trim() {
            "none" => Ok(None),
            s => s
                .parse::<Algorithm>()
                .map(Some)
                .map_err(|e| UsageError(format!("--server-limit: {}", e.problem())).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(s: &str) -> anyhow::Result<Option<Algorithm>> {
        LimitArgs {
            server_limit: s.into(),
            ramp_to: None,
        }
        .algorithm()
    }

    #[test]
    fn each_limit_parses_and_a_bad_one_names_the_flag() {
        assert_eq!(limit("none").unwrap(), None);
        assert_eq!(limit("static:40").unwrap(), Some(Algorithm::Fixed(40)));
        assert_eq!(limit("aimd").unwrap().unwrap().to_string(), "aimd");
        assert_eq!(limit("gradient").unwrap().unwrap().to_string(), "gradient");
        for bad in ["static:0", "fifo", ""] {
            let e = limit(bad).unwrap_err().to_string();
            assert!(e.starts_with("--server-limit"), "{bad}: {e}");
        }
    }
}
