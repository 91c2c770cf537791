//! What the metastable model's server does with the work it is sent: the
//! strategies `--server` compares.

use std::fmt;
use std::str::FromStr;

use stagger::limit::{Algorithm, Limiter};

use crate::SimError;

/// How the simulated server treats arriving work.
///
/// ```
/// use stagger_sim::Server;
/// let s: Vec<Server> = Server::parse_list("fifo,deadline-drop,adaptive").unwrap();
/// assert_eq!(s[2].to_string(), "adaptive");
/// assert!(Server::parse_list("lifo").unwrap_err().to_string().contains("--server"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Server {
    /// Works on everything in arrival order, even work whose caller has
    /// given up.
    Fifo,
    /// Drops work whose caller's deadline has passed before starting it
    /// (deadline propagation).
    DeadlineDrop,
    /// Deadline drop plus the library's concurrency [`Limiter`]: work
    /// beyond the limit is answered at once with a `Retry-After` of 1 to 5
    /// s, retries first (they may use 80 % of the limit). `adaptive` is the
    /// latency gradient; `aimd`, `gradient` and `static:N` name the
    /// algorithm.
    Limited {
        /// The limiter's algorithm.
        algorithm: Algorithm,
        /// Spelled `adaptive` (the gradient under its summary name).
        adaptive: bool,
    },
}

impl Server {
    /// Parses a comma-separated list, e.g. `fifo,deadline-drop,adaptive`.
    pub fn parse_list(s: &str) -> Result<Vec<Server>, SimError> {
        let list = s
            .split(',')
            .map(str::parse)
            .collect::<Result<Vec<Server>, SimError>>()?;
        if list.is_empty() {
            return Err(SimError::new("server", "no server strategy given".into()));
        }
        Ok(list)
    }

    /// Whether work whose caller's deadline passed is dropped unstarted.
    pub(crate) fn drops_expired(&self) -> bool {
        !matches!(self, Server::Fifo)
    }

    /// A fresh limiter for one run (its jitter seeded from the run's seed).
    pub(crate) fn limiter(&self, seed: u64) -> Option<Limiter> {
        match self {
            Server::Limited { algorithm, .. } => Some(
                Limiter::builder(*algorithm)
                    .seed(seed)
                    .build()
                    .unwrap_or_else(|_| Limiter::fixed(1)),
            ),
            _ => None,
        }
    }
}

impl FromStr for Server {
    type Err = SimError;

    fn from_str(s: &str) -> Result<Self, SimError> {
        let limited = |algorithm, adaptive| {
            Ok(Server::Limited {
                algorithm,
                adaptive,
            })
        };
        match s.trim() {
            "fifo" => Ok(Server::Fifo),
            "deadline-drop" => Ok(Server::DeadlineDrop),
            "adaptive" => limited(stagger::limit::Gradient::new().into(), true),
            other => match other.parse::<Algorithm>() {
                Ok(a) => limited(a, false),
                Err(e) if other.starts_with("static:") => {
                    Err(SimError::new("server", e.problem().to_string()))
                }
                Err(_) => Err(SimError::new(
                    "server",
                    format!(
                        "unknown server `{other}` (expected fifo, deadline-drop, adaptive, \
                         aimd, gradient or static:N)"
                    ),
                )),
            },
        }
    }
}

impl fmt::Display for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Server::Fifo => f.write_str("fifo"),
            Server::DeadlineDrop => f.write_str("deadline-drop"),
            Server::Limited { adaptive: true, .. } => f.write_str("adaptive"),
            Server::Limited { algorithm, .. } => write!(f, "{algorithm}"),
        }
    }
}
