//! `google.rpc.RetryInfo`: the "come back in N" of Google's APIs, carried
//! in the `details` of the `google.rpc.Status` a gRPC server sends as
//! `grpc-status-details-bin` (google/rpc/error_details.proto). prost
//! decodes the messages; the types mirror the published `.proto` files.

use std::time::Duration;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::{alphabet, Engine};
use prost::{Message, Name};
use prost_types::Any;

use super::InvalidHint;

/// `google.rpc.Status` (google/rpc/status.proto).
#[derive(Clone, PartialEq, Message)]
struct Status {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<Any>,
}

/// `google.rpc.RetryInfo` (google/rpc/error_details.proto).
#[derive(Clone, PartialEq, Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<prost_types::Duration>,
}

impl Name for RetryInfo {
    const NAME: &'static str = "RetryInfo";
    const PACKAGE: &'static str = "google.rpc";

    /// The URL Google's APIs write (any prefix before the last `/` is read
    /// as the same type).
    fn type_url() -> String {
        format!("type.googleapis.com/{}", Self::full_name())
    }
}

/// gRPC sends a `-bin` value in base64, with or without padding (gRPC
/// over HTTP/2, "Custom-Metadata").
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Reads the wait a `grpc-status-details-bin` value asks for: the
/// `retry_delay` of a `google.rpc.RetryInfo` among the status's details,
/// `None` when it carries none. A value that is not base64 of a
/// `google.rpc.Status`, or a `RetryInfo` without a delay or with a negative
/// one, is malformed.
pub(crate) fn parse_status_details(value: &[u8]) -> Result<Option<Duration>, InvalidHint> {
    let bad = || {
        InvalidHint::expecting(
            "grpc-status-details-bin",
            &String::from_utf8_lossy(value),
            "base64 of a google.rpc.Status",
        )
    };
    let bytes = BASE64.decode(value.trim_ascii()).map_err(|_| bad())?;
    let status = Status::decode(bytes.as_slice()).map_err(|_| bad())?;
    let wanted = RetryInfo::full_name();
    let Some(info) = status
        .details
        .iter()
        .find(|any| any.type_url.rsplit('/').next() == Some(wanted.as_str()))
    else {
        return Ok(None);
    };
    let info: RetryInfo = info.to_msg().map_err(|_| bad())?;
    let delay = info.retry_delay.ok_or_else(bad)?;
    Duration::try_from(delay).map(Some).map_err(|_| bad())
}

/// The base64 `grpc-status-details-bin` value of a status with these
/// details, for tests: what a server would send.
#[cfg(test)]
pub(crate) fn encode_for_test(code: i32, retry_delay: Option<(i64, i32)>, other: bool) -> String {
    let mut details = Vec::new();
    if other {
        details.push(Any {
            type_url: "type.googleapis.com/google.rpc.ErrorInfo".into(),
            value: vec![10, 3, b'b', b'a', b'd'],
        });
    }
    if let Some((seconds, nanos)) = retry_delay {
        let info = RetryInfo {
            retry_delay: Some(prost_types::Duration { seconds, nanos }),
        };
        details.push(Any::from_msg(&info).unwrap());
    }
    let status = Status {
        code,
        message: "busy".into(),
        details,
    };
    BASE64.encode(status.encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_parse_status_details() {
        // `google.rpc.Status { code: 8 }`, no details: no wait asked for.
        assert_eq!(parse_status_details(b"CAg"), Ok(None));
        assert!(parse_status_details(b"not base64!").is_err());
    }

    #[test]
    fn retry_info_gives_its_delay() {
        let v = encode_for_test(8, Some((2, 500_000_000)), true);
        assert_eq!(
            parse_status_details(v.as_bytes()),
            Ok(Some(Duration::from_millis(2500)))
        );
        // Unpadded, as gRPC often sends it, and padded alike.
        let trimmed = v.trim_end_matches('=');
        assert_eq!(
            parse_status_details(trimmed.as_bytes()),
            Ok(Some(Duration::from_millis(2500)))
        );
    }

    #[test]
    fn the_fixture_the_layer_tests_use_is_what_prost_encodes() {
        // tests/server_hints.rs sends this value; written out by hand from
        // the .proto field numbers, it must be the same bytes prost makes.
        const FIXTURE: &str =
            "CAgSBGJ1c3kaNgoodHlwZS5nb29nbGVhcGlzLmNvbS9nb29nbGUucnBjLlJldHJ5SW5mbxIKCggIARCAyrXuAQ==";
        assert_eq!(encode_for_test(8, Some((1, 500_000_000)), false), FIXTURE);
    }

    #[test]
    fn a_status_without_retry_info_asks_for_no_wait() {
        let v = encode_for_test(14, None, true);
        assert_eq!(parse_status_details(v.as_bytes()), Ok(None));
    }

    #[test]
    fn malformed_details_are_invalid() {
        let negative = encode_for_test(8, Some((-1, 0)), false);
        assert!(parse_status_details(negative.as_bytes()).is_err());
        for v in [&b"%%%"[..], b"////", b"AAAA"] {
            let e = parse_status_details(v).expect_err("malformed");
            assert_eq!(e.header(), "grpc-status-details-bin");
        }
        // A RetryInfo whose bytes are not a RetryInfo.
        let mut status = Status::default();
        status.details.push(Any {
            type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
            value: vec![0xff, 0xff],
        });
        let v = BASE64.encode(status.encode_to_vec());
        assert!(parse_status_details(v.as_bytes()).is_err());
    }
}
