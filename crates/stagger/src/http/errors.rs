//! A transport error (no response) as the engine's facts: its class,
//! whether the request surely never left, and the error told on one line.

use std::error::Error as StdError;
use std::io;

use crate::classify;
use crate::outcome::{Class, Failure};

/// A transport error (no response) as the engine's [`Failure`]: its class
/// and the fact whether the request surely never left (a refused
/// connection or stream, a name lookup that failed for now).
pub fn error_failure(error: &(dyn StdError + 'static)) -> Failure {
    let f = Failure::new(error_class(error));
    if never_sent(error) {
        f.not_sent()
    } else {
        f
    }
}

/// The class of a transport error (no response): a DNS lookup that failed
/// for now (a temporary resolver failure) is transient; otherwise the first
/// [`std::io::Error`] in its `source()` chain decides (refused or reset
/// connections are transient, a timeout is unknown); an error with no I/O
/// cause is "result unknown", so only idempotent calls repeat it.
pub(crate) fn error_class(error: &(dyn StdError + 'static)) -> Class {
    if dns_failed_for_now(error) {
        return Class::Transient;
    }
    match find_io(error) {
        Some(e) => classify::io_kind(e.kind()),
        None => Class::Unknown,
    }
}

/// Whether a transport error certainly happened before the request was
/// sent (the connection was refused, or the name did not resolve for now),
/// so even a non-idempotent request can be repeated safely.
pub(crate) fn never_sent(error: &(dyn StdError + 'static)) -> bool {
    find_io(error).is_some_and(|e| e.kind() == io::ErrorKind::ConnectionRefused)
        || dns_failed_for_now(error)
        || refused_stream(error)
}

/// Whether an HTTP/2 stream was refused before the server processed it
/// (REFUSED_STREAM, which is also how a GOAWAY reports the streams it did
/// not process): for HTTP over h2 and gRPC alike, the request never left.
fn refused_stream(error: &(dyn StdError + 'static)) -> bool {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(error);
    // The same bound as `find_io`: a chain is never walked without end.
    for _ in 0..=32 {
        let Some(e) = cur else { break };
        // h2 spells REFUSED_STREAM this way in its errors.
        let text = e.to_string().to_ascii_lowercase();
        if text.contains("refused stream") || text.contains("refused_stream") {
            return true;
        }
        cur = e.source();
    }
    false
}

/// The start of the message std gives every failed `getaddrinfo` lookup,
/// followed by the resolver's own words (`gai_strerror`).
const LOOKUP_FAILED: &str = "failed to lookup address information";

/// Whether a transport error is a DNS lookup that failed for now and may
/// work on the next try (docs/behaviour.md §2: "DNS temporary failure: retry").
///
/// Neither std nor hyper-util gives such failures an error kind of their
/// own, so the check reads the words of the `source()` chain:
///
/// - an [`io::Error`] whose message starts with "failed to lookup address
///   information" (std's lookup error) decides by the resolver's words: a
///   temporary failure (`EAI_AGAIN`: "Temporary failure in name resolution"
///   in glibc, "Try again" in musl) is one, a name that does not exist
///   ("Name or service not known", "Name does not resolve") is not;
/// - without such an error, a link that reads "dns error" (hyper-util's
///   connector wrapping whatever its resolver returned) is taken as a
///   failure for now: the resolver's words cannot be read, and the request
///   never left.
fn dns_failed_for_now(error: &(dyn StdError + 'static)) -> bool {
    let mut dns = false;
    let mut cur: Option<&(dyn StdError + 'static)> = Some(error);
    // The same bound as `find_io`: a chain is never walked without end.
    for _ in 0..=32 {
        let Some(e) = cur else { break };
        if let Some(io) = e.downcast_ref::<io::Error>() {
            let text = io.to_string().to_ascii_lowercase();
            if text.starts_with(LOOKUP_FAILED) {
                return crate::classify::is_temporary_dns_failure(&text);
            }
        } else if e.to_string().eq_ignore_ascii_case("dns error") {
            dns = true;
        }
        cur = e.source();
    }
    dns
}

fn find_io<'a>(error: &'a (dyn StdError + 'static)) -> Option<&'a io::Error> {
    let mut e: Option<&(dyn StdError + 'static)> = Some(error);
    let mut depth = 0;
    while let Some(cur) = e {
        if let Some(io) = cur.downcast_ref::<io::Error>() {
            // An io::Error may itself wrap the real cause.
            if let Some(inner) = io.get_ref().and_then(|i| {
                let i: &(dyn StdError + 'static) = i;
                i.downcast_ref::<io::Error>()
            }) {
                return Some(inner);
            }
            return Some(io);
        }
        depth += 1;
        if depth > 32 {
            return None;
        }
        e = cur.source();
    }
    None
}

/// An error and its causes on one line (`outer: inner: …`), skipping
/// causes whose text the outer error already shows.
pub fn error_chain(error: &(dyn StdError + 'static)) -> String {
    let mut out = error.to_string();
    let mut cur = error.source();
    let mut depth = 0;
    while let Some(e) = cur {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        depth += 1;
        if depth > 16 {
            break;
        }
        cur = e.source();
    }
    out
}

/// The error of an attempt that ran out of time (its result is unknown).
#[derive(Debug, Clone, Copy, Default)]
pub struct AttemptTimedOut;

impl std::fmt::Display for AttemptTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("attempt timed out")
    }
}

impl StdError for AttemptTimedOut {}
