//! Where `stagger http` writes the final response: stdout or `-o FILE`,
//! the head first with `-i`, or nowhere (an HTTP error without
//! `--fail-with-body`, or `--format json` without `-o`).
//!
//! The body is passed on chunk by chunk as it arrives, so memory stays flat
//! however much a server sends, and reading it counts against the deadline.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Why the final response's body was not read in full.
pub enum BodyError {
    /// Still arriving when the deadline passed.
    Deadline {
        /// Bytes read by then.
        read: u64,
    },
    /// The connection failed mid-body.
    Transport {
        /// Bytes read by then.
        read: u64,
        /// What the connection said.
        error: String,
    },
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::Deadline { read } => {
                write!(
                    f,
                    "body: still arriving at the deadline ({read} bytes read)"
                )
            }
            BodyError::Transport { read, error } => {
                write!(f, "body: failed after {read} bytes read: {error}")
            }
        }
    }
}

/// Where the response goes.
pub enum Dest {
    /// Standard output.
    Stdout,
    /// A file (`-o FILE`).
    File(PathBuf),
    /// Read and dropped.
    Nowhere,
}

/// A write to the destination failed (curl's exit 23).
#[derive(Debug)]
pub struct WriteError(pub String);

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WriteError {}

/// An open destination.
pub struct Out {
    w: Option<Box<dyn Write>>,
    name: String,
}

impl Out {
    /// Opens `dest` (a file is created, or truncated, only now: when there
    /// is something to write).
    pub fn open(dest: &Dest) -> Result<Out, WriteError> {
        let (w, name): (Option<Box<dyn Write>>, String) = match dest {
            Dest::Stdout => (Some(Box::new(io::stdout().lock())), "stdout".into()),
            Dest::File(p) => (Some(Box::new(create(p)?)), format!("-o {}", p.display())),
            Dest::Nowhere => (None, String::new()),
        };
        Ok(Out { w, name })
    }

    /// Writes `bytes` and flushes them (a slow body shows as it comes).
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), WriteError> {
        if let Some(w) = &mut self.w {
            w.write_all(bytes)
                .and_then(|()| w.flush())
                .map_err(|e| WriteError(format!("{}: cannot write: {e}", self.name)))?;
        }
        Ok(())
    }
}

fn create(p: &Path) -> Result<File, WriteError> {
    File::create(p).map_err(|e| WriteError(format!("-o: cannot create {}: {e}", p.display())))
}

/// The status line and headers as `-i` prints them.
pub fn head(resp: &reqwest::Response) -> Vec<u8> {
    let reason = resp.status().canonical_reason().unwrap_or("");
    let mut out = format!(
        "{:?} {} {reason}\r\n",
        resp.version(),
        resp.status().as_u16()
    )
    .into_bytes();
    for (k, v) in resp.headers() {
        out.extend_from_slice(k.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Reads the body chunk by chunk into `out` until it ends, fails, or
/// `deadline` passes. Never holds more than one chunk.
pub async fn read_body(
    mut resp: reqwest::Response,
    deadline: Option<tokio::time::Instant>,
    out: &mut Out,
) -> Result<Result<(), BodyError>, WriteError> {
    let mut read = 0u64;
    loop {
        let next = match deadline {
            Some(d) => match tokio::time::timeout_at(d, resp.chunk()).await {
                Ok(next) => next,
                Err(_) => return Ok(Err(BodyError::Deadline { read })),
            },
            None => resp.chunk().await,
        };
        match next {
            Ok(Some(chunk)) => {
                read += chunk.len() as u64;
                out.write(&chunk)?;
            }
            Ok(None) => return Ok(Ok(())),
            Err(e) => {
                let error = stagger::http::error_chain(&e);
                return Ok(Err(BodyError::Transport { read, error }));
            }
        }
    }
}
