//! Why the upstream gave no answer, with a protocol mismatch named as one
//! every time.
//!
//! An HTTP/1.1 request sent to a server that speaks only HTTP/2 with prior
//! knowledge (h2c, as gRPC servers do) fails, but hyper tells the failure
//! in whichever way the race between the two ends went: a parse error
//! (the server's SETTINGS frame read as an HTTP/1.1 answer), "received
//! unexpected message from connection" (that frame arrived before the
//! request was written), a cancellation or a closed connection (the
//! server hung up first). The mirror case, HTTP/2 sent to an HTTP/1.1-only
//! server, is as varied. Reading the error would name the mismatch only
//! when the race went one way, so the proxy does not guess from it: once
//! an exchange fails after the connection was made, it asks the upstream
//! on a short connection of its own whether it answers HTTP/2's
//! connection preface and, only where that could name a mismatch, on
//! another whether it answers an HTTP/1.1 request (so an HTTP/1.1
//! upstream's log gains no request when an HTTP/1.1 exchange fails for
//! another reason). An upstream that answers only the other protocol is
//! named for it; any other failure is told in hyper's words.

use std::time::Duration;

use http::uri::Authority;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What the upstream did with one protocol's opening.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    /// It answered in that protocol.
    Spoken,
    /// It answered in another, or closed the connection.
    Refused,
    /// No connection, or no answer in time: nothing learned.
    Unknown,
}

/// The HTTP/1.1 question: a request every HTTP/1.1 server answers (with
/// a status of its choosing) and that does not keep the connection.
fn http1_opening(authority: &Authority) -> Vec<u8> {
    format!("OPTIONS * HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n").into_bytes()
}

/// The HTTP/2 question: the client connection preface (RFC 9113 §3.4),
/// its magic then an empty SETTINGS frame.
const HTTP2_OPENING: &[u8] =
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// Whether the first bytes of an answer are an HTTP/1.x status line.
fn is_http1_answer(first: &[u8]) -> bool {
    first.starts_with(b"HTTP/1.")
}

/// Whether the first bytes of an answer are the header of a server's
/// connection preface: a SETTINGS frame (type 4), not an acknowledgement,
/// on stream 0.
fn is_http2_answer(first: &[u8]) -> bool {
    first.len() >= 9
        && first[3] == 0x4
        && first[4] & 0x1 == 0
        // The stream identifier's top bit is reserved.
        && first[5] & 0x7f == 0
        && first[6..9] == [0, 0, 0]
}

/// Sends `opening` on a new connection to `authority` and judges the first
/// `need` bytes (or fewer, if the connection closes) with `spoken`.
async fn ask(
    authority: &Authority,
    opening: &[u8],
    need: usize,
    spoken: fn(&[u8]) -> bool,
    timeout: Duration,
) -> Heard {
    let exchange = async {
        let Ok(mut conn) = TcpStream::connect(authority.as_str()).await else {
            return Heard::Unknown;
        };
        // A server that closes at once may refuse the write; what it sent
        // before is still read below.
        let _ = conn.write_all(opening).await;
        let mut got = Vec::with_capacity(need);
        let mut buf = [0u8; 64];
        while got.len() < need {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        if spoken(&got) {
            Heard::Spoken
        } else {
            Heard::Refused
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Heard::Unknown)
}

/// The mismatch named by what the upstream did with each protocol, for a
/// request sent over HTTP/2 (`h2`) or HTTP/1.1.
fn mismatch(h2: bool, http1: Heard, http2: Heard) -> Option<&'static str> {
    match (h2, http1, http2) {
        (false, Heard::Refused, Heard::Spoken) => Some(
            "the upstream speaks HTTP/2 only (h2c with prior knowledge) and refuses HTTP/1.1: \
             send the proxy HTTP/2 with prior knowledge, as gRPC clients do",
        ),
        (true, Heard::Spoken, Heard::Refused) => Some(
            "the upstream speaks HTTP/1.1 only and refuses HTTP/2 (h2c): send the proxy HTTP/1.1",
        ),
        _ => None,
    }
}

/// hyper's words for a failed exchange: the innermost hyper error and
/// what it names as its cause, else the client's own error.
fn hyper_says(e: &hyper_util::client::legacy::Error) -> String {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(h) = c.downcast_ref::<hyper::Error>() {
            return match std::error::Error::source(h) {
                Some(inner) => format!("{h}: {inner}"),
                None => h.to_string(),
            };
        }
        cause = c.source();
    }
    e.to_string()
}

/// Why the upstream at `authority` gave no answer to a request sent over
/// HTTP/2 (`h2`) or HTTP/1.1, for the 502's body and the report. Each
/// question to the upstream is bounded by `timeout`.
pub(super) async fn why_no_answer(
    e: &hyper_util::client::legacy::Error,
    h2: bool,
    authority: &Authority,
    timeout: Duration,
) -> String {
    if e.is_connect() {
        let cause = std::error::Error::source(e).map_or(String::new(), |c| format!(": {c}"));
        return format!("cannot connect to it{cause}");
    }
    let hyper = hyper_says(e);
    let http2 = ask(authority, HTTP2_OPENING, 9, is_http2_answer, timeout).await;
    // HTTP/1.1 is asked about only when the answer could name a mismatch:
    // an HTTP/1.1 request to an upstream that speaks HTTP/2, or an HTTP/2
    // one to an upstream that does not.
    let http1 = match (h2, http2) {
        (false, Heard::Spoken) | (true, Heard::Refused) => {
            let opening = http1_opening(authority);
            ask(authority, &opening, 7, is_http1_answer, timeout).await
        }
        _ => Heard::Unknown,
    };
    match mismatch(h2, http1, http2) {
        Some(named) => format!("{named} (hyper: {hyper})"),
        None => hyper,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http1_status_line_is_told_from_http2_frames() {
        assert!(is_http1_answer(b"HTTP/1.1 400 Bad Request\r\n"));
        assert!(is_http1_answer(b"HTTP/1.0 200"));
        assert!(!is_http1_answer(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00"));
        assert!(!is_http1_answer(b"HTTP/"));
        assert!(!is_http1_answer(b""));
    }

    #[test]
    fn only_a_settings_frame_on_stream_zero_is_an_http2_answer() {
        // SETTINGS with 18 bytes of payload, no flags, stream 0.
        assert!(is_http2_answer(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00"));
        // An acknowledgement is not a server's preface.
        assert!(!is_http2_answer(b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"));
        // A GOAWAY (type 7) first, or a frame on stream 1.
        assert!(!is_http2_answer(b"\x00\x00\x08\x07\x00\x00\x00\x00\x00"));
        assert!(!is_http2_answer(b"\x00\x00\x00\x04\x00\x00\x00\x00\x01"));
        assert!(!is_http2_answer(b"HTTP/1.1 505 HTTP Version Not Supported"));
        assert!(!is_http2_answer(b"\x00\x00\x12\x04"));
    }

    #[test]
    fn a_mismatch_is_named_only_when_the_other_protocol_is_answered() {
        use Heard::{Refused, Spoken, Unknown};
        let h2_only = mismatch(false, Refused, Spoken).unwrap();
        assert!(h2_only.contains("speaks HTTP/2 only"), "{h2_only}");
        let h1_only = mismatch(true, Spoken, Refused).unwrap();
        assert!(h1_only.contains("speaks HTTP/1.1 only"), "{h1_only}");
        // An upstream that speaks both, or whose answers were not heard,
        // failed for another reason: hyper's words stand.
        for (h2, http1, http2) in [
            (false, Spoken, Spoken),
            (true, Spoken, Spoken),
            (false, Refused, Unknown),
            (false, Unknown, Spoken),
            (true, Unknown, Refused),
            (false, Spoken, Refused),
            (true, Refused, Spoken),
            (false, Refused, Refused),
        ] {
            assert_eq!(mismatch(h2, http1, http2), None, "{h2} {http1:?} {http2:?}");
        }
    }
}
