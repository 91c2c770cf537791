//! Request bodies that can be sent again.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
#[cfg(feature = "grpc")]
use std::sync::{Arc, Mutex};
#[cfg(feature = "grpc")]
use std::task::Waker;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

use crate::outcome::NotRetried;

/// The body the [`RetryService`](super::RetryService) hands its inner
/// service: a buffered copy for a body it can replay, or the original
/// stream (sent once) for one it cannot.
///
/// So the service under a [`RetryLayer`](super::RetryLayer) takes
/// `Request<ReplayBody<B>>`, not `Request<B>`: a request that goes out
/// again must be rebuilt from the layer's copy. `ReplayBody<B>` is an
/// `http_body::Body` with `Bytes` data and `B`'s error, so hyper's client
/// takes it as its body type (`Client<_, ReplayBody<B>>`). A service that
/// wants a body type of its own gets it with a `map_request` below the
/// layer (tonic's channel: the gRPC layer's `.body(tonic::body::Body::new)`):
///
/// ```
/// use bytes::Bytes;
/// use http::{Request, Response};
/// use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
/// use stagger::tower::{ReplayBody, RetryLayer};
/// use stagger::Policy;
/// use std::convert::Infallible;
/// use tower::ServiceBuilder;
///
/// // A service that takes its own body type, not the layer's.
/// type Boxed = UnsyncBoxBody<Bytes, Infallible>;
/// let inner = tower::service_fn(|_: Request<Boxed>| async {
///     Ok::<_, Infallible>(Response::new(()))
/// });
/// let client = ServiceBuilder::new()
///     .layer(RetryLayer::new(Policy::default()))
///     .map_request(|r: Request<ReplayBody<Full<Bytes>>>| r.map(BodyExt::boxed_unsync))
///     .service(inner);
/// # let _ = client;
/// ```
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
    /// One attempt's view of a body read as it is sent (see [`Replay`]).
    #[cfg(feature = "grpc")]
    Tee {
        tee: Arc<Mutex<Tee<B>>>,
        /// Data frames this attempt has yielded.
        pos: usize,
        generation: u64,
        trailers_sent: bool,
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
            #[cfg(feature = "grpc")]
            Kind::Tee { pos, .. } => f
                .debug_struct("ReplayBody::Tee")
                .field("frames_sent", pos)
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

    /// The original body, sent once as it is.
    pub(crate) fn once(body: B) -> Self {
        ReplayBody {
            kind: Kind::Stream {
                head: VecDeque::new(),
                rest: Box::pin(body),
            },
        }
    }

    /// The buffered bytes, if this body was buffered.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match &self.kind {
            Kind::Full { data, .. } => Some(data.as_deref().unwrap_or(&[])),
            _ => None,
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
            #[cfg(feature = "grpc")]
            Kind::Tee {
                tee,
                pos,
                generation,
                trailers_sent,
            } => {
                let mut t = tee.lock().unwrap_or_else(|p| p.into_inner());
                t.poll_for(cx, pos, *generation, trailers_sent)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Full { data, trailers } => data.is_none() && trailers.is_none(),
            Kind::Stream { head, rest } => head.is_empty() && rest.is_end_stream(),
            #[cfg(feature = "grpc")]
            Kind::Tee {
                tee,
                pos,
                trailers_sent,
                ..
            } => {
                let t = tee.lock().unwrap_or_else(|p| p.into_inner());
                t.done && *pos >= t.frames() && (*trailers_sent || t.trailers.is_none())
            }
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
            #[cfg(feature = "grpc")]
            Kind::Tee { .. } => SizeHint::new(),
        }
    }
}

/// A request body read as it is sent and kept, up to a limit, so the next
/// attempt can send it again: gRPC's replay buffer ([A6](https://github.com/grpc/proposal/blob/master/A6-client-retries.md)). Nothing is read
/// before the first attempt sends it, so a stream flows as it is produced;
/// each attempt replays what earlier ones sent, then reads on from the
/// source. Once the kept bytes pass the limit they are dropped and the body
/// has [`outgrown`](Replay::outgrown) the buffer: the attempt in flight goes
/// on, and no later attempt can be made.
#[cfg(feature = "grpc")]
pub(crate) struct Replay<B> {
    tee: Arc<Mutex<Tee<B>>>,
}

#[cfg(feature = "grpc")]
pub(crate) struct Tee<B> {
    source: Pin<Box<B>>,
    /// Data frames `base..base + kept.len()`; frames before `base` were
    /// dropped when the buffer was outgrown.
    kept: Vec<Bytes>,
    base: usize,
    kept_len: usize,
    limit: usize,
    trailers: Option<HeaderMap>,
    done: bool,
    outgrown: bool,
    /// Bumped for every attempt: only the newest attempt reads the source.
    generation: u64,
    /// Hedged attempts run side by side: whichever is ahead reads the
    /// source and the others catch up from the kept frames.
    side_by_side: bool,
    /// The attempt (generation) whose read outgrew the buffer: side by
    /// side, it alone goes on.
    leader: Option<u64>,
    /// Woken when the buffer is outgrown (see [`Replay::poll_outgrown`]).
    watcher: Option<Waker>,
}

#[cfg(feature = "grpc")]
impl<B: Body> Replay<B> {
    /// Keeps up to `limit` bytes of `body` for replay.
    pub(crate) fn new(body: B, limit: usize) -> Self {
        let done = body.is_end_stream();
        Replay {
            tee: Arc::new(Mutex::new(Tee {
                source: Box::pin(body),
                kept: Vec::new(),
                base: 0,
                kept_len: 0,
                limit,
                trailers: None,
                done,
                outgrown: false,
                generation: 0,
                side_by_side: false,
                leader: None,
                watcher: None,
            })),
        }
    }

    /// Like [`new`](Self::new), for hedged attempts that run at the same
    /// time: any of them may read on from the source.
    pub(crate) fn side_by_side(body: B, limit: usize) -> Self {
        let r = Self::new(body, limit);
        r.tee.lock().unwrap_or_else(|p| p.into_inner()).side_by_side = true;
        r
    }

    /// The body for the next attempt, or `None` once the buffer was
    /// outgrown. Earlier attempts' bodies stop reading the source.
    pub(crate) fn next(&self) -> Option<ReplayBody<B>> {
        let mut t = self.tee.lock().unwrap_or_else(|p| p.into_inner());
        if t.outgrown {
            return None;
        }
        t.generation += 1;
        Some(ReplayBody {
            kind: Kind::Tee {
                tee: self.tee.clone(),
                pos: 0,
                generation: t.generation,
                trailers_sent: false,
            },
        })
    }

    /// Whether the body outgrew the buffer (or its source failed), so it
    /// cannot be sent again.
    #[cfg(test)]
    pub(crate) fn outgrown(&self) -> bool {
        self.tee.lock().unwrap_or_else(|p| p.into_inner()).outgrown
    }

    /// Ready once the body outgrew the buffer (or its source failed), with
    /// the attempt that read on past it: the `n`-th body [`next`](Self::next)
    /// gave is attempt `n`. Until then `cx` is woken when it happens. Side by
    /// side, every other attempt's body stops there and waits, never ending
    /// early: a cut-off request must not reach a server as if complete, so
    /// those attempts are to be cancelled.
    pub(crate) fn poll_outgrown(&self, cx: &mut Context<'_>) -> Poll<Option<u64>> {
        let mut t = self.tee.lock().unwrap_or_else(|p| p.into_inner());
        if t.outgrown {
            return Poll::Ready(t.leader);
        }
        if !t.watcher.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            t.watcher = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

#[cfg(feature = "grpc")]
impl<B: Body> Tee<B> {
    fn frames(&self) -> usize {
        self.base + self.kept.len()
    }

    /// The buffer is outgrown by attempt `generation`'s read.
    fn outgrow(&mut self, generation: u64) {
        self.outgrown = true;
        self.leader = Some(generation);
        if let Some(w) = self.watcher.take() {
            w.wake();
        }
    }

    fn poll_for(
        &mut self,
        cx: &mut Context<'_>,
        pos: &mut usize,
        generation: u64,
        trailers_sent: &mut bool,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if self.side_by_side && self.outgrown && self.leader != Some(generation) {
            // Only the leader can still send the whole body; this attempt
            // waits to be cancelled rather than end its request early.
            return Poll::Pending;
        }
        if *pos < self.frames() {
            if *pos < self.base {
                // Dropped when the buffer was outgrown: this attempt is over.
                return Poll::Ready(None);
            }
            let d = self.kept[*pos - self.base].clone();
            *pos += 1;
            return Poll::Ready(Some(Ok(Frame::data(d))));
        }
        if self.done {
            if *trailers_sent {
                return Poll::Ready(None);
            }
            *trailers_sent = true;
            return Poll::Ready(self.trailers.clone().map(|t| Ok(Frame::trailers(t))));
        }
        if generation != self.generation && !self.side_by_side {
            // A newer attempt owns the source.
            return Poll::Ready(None);
        }
        match self.source.as_mut().poll_frame(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                self.done = true;
                *trailers_sent = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                // What was read cannot be completed: no attempt can follow.
                self.outgrow(generation);
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(mut d) => {
                    let b = d.copy_to_bytes(d.remaining());
                    if self.outgrown {
                        self.base += 1;
                    } else {
                        self.kept_len = self.kept_len.saturating_add(b.len());
                        self.kept.push(b.clone());
                        if self.kept_len > self.limit {
                            self.outgrow(generation);
                            self.base += self.kept.len();
                            self.kept = Vec::new();
                        }
                    }
                    *pos += 1;
                    Poll::Ready(Some(Ok(Frame::data(b))))
                }
                Err(frame) => match frame.into_trailers() {
                    Ok(t) => {
                        self.done = true;
                        self.trailers = Some(t.clone());
                        *trailers_sent = true;
                        Poll::Ready(Some(Ok(Frame::trailers(t))))
                    }
                    // A frame of a kind neither data nor trailers: skip it.
                    Err(_) => {
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                },
            },
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

#[cfg(all(test, feature = "grpc"))]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};
    use std::convert::Infallible;

    fn source(
        chunks: &[&'static [u8]],
        trailer: bool,
    ) -> impl Body<Data = Bytes, Error = Infallible> {
        let mut frames: Vec<Result<Frame<Bytes>, Infallible>> = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::from_static(c))))
            .collect();
        if trailer {
            let mut t = HeaderMap::new();
            t.insert("x-sum", http::HeaderValue::from_static("7"));
            frames.push(Ok(Frame::trailers(t)));
        }
        StreamBody::new(tokio_stream::iter(frames))
    }

    async fn read<B: Body<Data = Bytes, Error = Infallible>>(b: ReplayBody<B>) -> (Vec<u8>, bool) {
        let c = b.collect().await.unwrap();
        let has_trailers = c.trailers().is_some_and(|t| t.contains_key("x-sum"));
        (c.to_bytes().to_vec(), has_trailers)
    }

    #[tokio::test]
    async fn a_replay_sends_what_was_read_then_reads_on() {
        let replay = Replay::new(source(&[b"ab", b"cd", b"ef"], true), 100);
        // The first attempt reads two frames, then is abandoned.
        let mut first = replay.next().unwrap();
        let a = first.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&a[..], b"ab");
        first.frame().await.unwrap().unwrap();
        // The second replays them and reads the rest, trailers included.
        let second = replay.next().unwrap();
        assert_eq!(read(second).await, (b"abcdef".to_vec(), true));
        // The first, now stale, only replays what was kept, in order.
        assert_eq!(read(first).await, (b"ef".to_vec(), true));
        // A third replays all of it.
        assert_eq!(
            read(replay.next().unwrap()).await,
            (b"abcdef".to_vec(), true)
        );
        assert!(!replay.outgrown());
    }

    #[tokio::test]
    async fn a_stale_attempt_never_reads_the_source() {
        let replay = Replay::new(source(&[b"ab", b"cd"], false), 100);
        let mut first = replay.next().unwrap();
        first.frame().await.unwrap().unwrap();
        let second = replay.next().unwrap();
        // The first has sent all that was kept; the source is the second's.
        assert!(first.frame().await.is_none());
        assert_eq!(read(second).await, (b"abcd".to_vec(), false));
    }

    #[tokio::test]
    async fn outgrowing_the_buffer_sends_on_but_allows_no_other_attempt() {
        let replay = Replay::new(source(&[b"abc", b"def", b"ghi"], false), 5);
        assert_eq!(
            read(replay.next().unwrap()).await,
            (b"abcdefghi".to_vec(), false)
        );
        assert!(replay.outgrown());
        assert!(replay.next().is_none());
    }
}
