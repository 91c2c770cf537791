//! What a layer on the path receives from below when an attempt fails:
//! the vocabulary the mesh rules and the library's engine both read.

use std::fmt;

use serde::Serialize;

/// What a layer receives from below when an attempt fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// The connection could not be made.
    ConnectFailure,
    /// The connection or stream was reset before a response.
    Reset,
    /// An HTTP status.
    Http(u16),
    /// A gRPC status code.
    Grpc(u32),
    /// The layer's per-try timeout (or the deadline) ran out first.
    Timeout,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::ConnectFailure => f.write_str("connect-failure"),
            Failure::Reset => f.write_str("reset"),
            Failure::Http(s) => write!(f, "{s}"),
            Failure::Grpc(c) => {
                let name = stagger::classify::GRPC_CODE_NAMES
                    .get(*c as usize)
                    .copied()
                    .unwrap_or("?");
                f.write_str(name)
            }
            Failure::Timeout => f.write_str("timeout"),
        }
    }
}
