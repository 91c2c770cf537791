//! Request bodies that can be sent again.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

use crate::http::NotRetried;

/// The body the [`RetryService`](super::RetryService) hands its inner
/// service: a buffered copy for a body it can replay, or the original
/// stream (sent once) for one it cannot.
pub struct ReplayBody<B> {
    kind: Kind<B>,
}

enum Kind<B> {
    /// A buffered body: data then trailers.
    Full {
        data: Option<Bytes>,
        trailers: Option<HeaderMap>,
    },
    /// The original body, after any part already read into `head`.
    Stream {
        head: VecDeque<Bytes>,
        rest: Pin<Box<B>>,
    },
}

impl<B> fmt::Debug for ReplayBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Full { data, .. } => f
                .debug_struct("ReplayBody::Full")
                .field("len", &data.as_ref().map_or(0, Bytes::len))
                .finish(),
            Kind::Stream { head, .. } => f
                .debug_struct("ReplayBody::Stream")
                .field("buffered_chunks", &head.len())
                .finish(),
        }
    }
}

impl<B> ReplayBody<B> {
    /// A body of these bytes.
    pub fn full(data: Bytes) -> Self {
        ReplayBody {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
                trailers: None,
            },
        }
    }

    /// The buffered bytes, if this body was buffered.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match &self.kind {
            Kind::Full { data, .. } => Some(data.as_deref().unwrap_or(&[])),
            Kind::Stream { .. } => None,
        }
    }
}

impl<B> Body for ReplayBody<B>
where
    B: Body,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        // `Kind` holds only Unpin parts (the stream is boxed).
        match &mut self.get_mut().kind {
            Kind::Full { data, trailers } => {
                if let Some(d) = data.take() {
                    return Poll::Ready(Some(Ok(Frame::data(d))));
                }
                Poll::Ready(trailers.take().map(|t| Ok(Frame::trailers(t))))
            }
            Kind::Stream { head, rest } => {
                if let Some(d) = head.pop_front() {
                    return Poll::Ready(Some(Ok(Frame::data(d))));
                }
                match rest.as_mut().poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(
                        frame.map_data(|mut d| d.copy_to_bytes(d.remaining()))
                    ))),
                    Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
                    Poll::Ready(None) => Poll::Ready(None),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full { data, trailers } => data.is_none() && trailers.is_none(),
            Kind::Stream { head, rest } => head.is_empty() && rest.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Full { data, .. } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Stream { head, rest } => {
                let buffered: u64 = head.iter().map(|b| b.len() as u64).sum();
                let h = rest.size_hint();
                let mut out = SizeHint::new();
                out.set_lower(h.lower().saturating_add(buffered));
                if let Some(u) = h.upper() {
                    out.set_upper(u.saturating_add(buffered));
                }
                out
            }
        }
    }
}

/// A request body read for replay: either every attempt gets a copy, or the
/// call is limited to one attempt and why.
pub(crate) enum Prepared<B> {
    Replayable {
        data: Bytes,
        trailers: Option<HeaderMap>,
    },
    Once(ReplayBody<B>, NotRetried),
}

impl<B> Prepared<B> {
    /// A body for the next attempt (`None` once a one-shot body is spent).
    pub(crate) fn next(&mut self) -> Option<ReplayBody<B>> {
        match self {
            Prepared::Replayable { data, trailers } => Some(ReplayBody {
                kind: Kind::Full {
                    data: (!data.is_empty()).then(|| data.clone()),
                    trailers: trailers.clone(),
                },
            }),
            Prepared::Once(..) => {
                let taken = std::mem::replace(
                    self,
                    Prepared::Replayable {
                        data: Bytes::new(),
                        trailers: None,
                    },
                );
                match taken {
                    Prepared::Once(b, _) => Some(b),
                    Prepared::Replayable { .. } => None,
                }
            }
        }
    }
}

/// Reads `body` for replay. A body that is already at its end, or whose size
/// hint promises at most `limit` bytes, is buffered (and still checked
/// against `limit` while reading: a body that lied is sent once with what
/// was read put back in front). A body known to be larger, or of unknown
/// length (a stream), is not read at all and is sent once.
pub(crate) async fn prepare<B: Body>(body: B, limit: usize) -> Result<Prepared<B>, B::Error> {
    if body.is_end_stream() {
        return Ok(Prepared::Replayable {
            data: Bytes::new(),
            trailers: None,
        });
    }
    let hint = body.size_hint();
    let limit64 = limit as u64;
    match hint.upper() {
        Some(u) if u <= limit64 => {}
        _ => {
            let why = if hint.lower() > limit64 {
                NotRetried::BodyTooLarge { limit }
            } else {
                NotRetried::BodyStream
            };
            let once = ReplayBody {
                kind: Kind::Stream {
                    head: VecDeque::new(),
                    rest: Box::pin(body),
                },
            };
            return Ok(Prepared::Once(once, why));
        }
    }
    let mut body = Box::pin(body);
    let mut chunks: VecDeque<Bytes> = VecDeque::new();
    let mut total = 0usize;
    let mut trailers = None;
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame?;
        match frame.into_data() {
            Ok(mut d) => {
                let b = d.copy_to_bytes(d.remaining());
                total = total.saturating_add(b.len());
                chunks.push_back(b);
                if total > limit {
                    let once = ReplayBody {
                        kind: Kind::Stream {
                            head: chunks,
                            rest: body,
                        },
                    };
                    return Ok(Prepared::Once(once, NotRetried::BodyTooLarge { limit }));
                }
            }
            Err(frame) => {
                if let Ok(t) = frame.into_trailers() {
                    match &mut trailers {
                        None => trailers = Some(t),
                        Some(all) => all.extend(t),
                    }
                }
            }
        }
    }
    let data = if chunks.len() == 1 {
        chunks.pop_front().unwrap_or_default()
    } else {
        let mut all = Vec::with_capacity(total);
        for c in chunks {
            all.extend_from_slice(&c);
        }
        Bytes::from(all)
    };
    Ok(Prepared::Replayable { data, trailers })
}
