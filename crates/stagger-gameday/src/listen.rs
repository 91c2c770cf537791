//! The one accept loop of the game-day's server and the fault proxy, and
//! the failover both inject there.
//!
//! A failover is the listener going away: while it lasts new connections
//! are refused by the kernel and the open ones are dropped; when it ends
//! the same port is bound again. The game-day's server and the proxy mean
//! the same thing by it, so they share this loop and differ only in what
//! they do with a connection ([`accept_loop`]'s `serve`) and what they
//! count when the listener goes down (`down`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// When the listener is down, earliest first, overlapping spans merged
/// (`None` as an end: down to the end of the run).
#[derive(Debug, Clone, Default)]
pub(crate) struct Downtime(Vec<(Instant, Option<Instant>)>);

impl Downtime {
    /// The spans `(start, end)`, in any order; spans that overlap or touch
    /// become one.
    pub(crate) fn new(spans: impl IntoIterator<Item = (Instant, Option<Instant>)>) -> Downtime {
        let mut spans: Vec<_> = spans.into_iter().collect();
        spans.sort_by_key(|s| s.0);
        let mut merged: Vec<(Instant, Option<Instant>)> = Vec::with_capacity(spans.len());
        for (start, end) in spans {
            match merged.last_mut() {
                Some((_, last)) if last.is_none_or(|e| start <= e) => {
                    *last = match (*last, end) {
                        (Some(a), Some(b)) => Some(a.max(b)),
                        _ => None,
                    };
                }
                _ => merged.push((start, end)),
            }
        }
        Downtime(merged)
    }
}

/// Accepts connections on `listener` (bound to `addr`) until the task is
/// aborted, handing each to `serve` with a receiver that changes when open
/// connections must be dropped. At the start of each span of `downtime`
/// the listener is closed, `down` is called (the connections `serve` was
/// handed are all still open) and `kill` is bumped (every one of them ends); at its end `addr` is bound again. `who` names the
/// command in the one line printed if the port cannot be had back.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    addr: SocketAddr,
    downtime: Downtime,
    kill: watch::Sender<u64>,
    who: &'static str,
    mut down: impl FnMut(),
    mut serve: impl FnMut(TcpStream, watch::Receiver<u64>),
) {
    let mut listener = Some(listener);
    let mut spans = downtime.0.into_iter().peekable();
    loop {
        let Some(l) = listener.as_ref() else { return };
        let down_at = spans.peek().map(|s| s.0);
        tokio::select! {
            accepted = l.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                serve(stream, kill.subscribe());
            }
            _ = tokio::time::sleep_until(down_at.unwrap_or_else(Instant::now).into()), if down_at.is_some() => {
                let Some((_, end)) = spans.next() else { continue };
                drop(listener.take());
                // Counted before they are dropped: a dropped connection's
                // task may end at once.
                down();
                kill.send_modify(|g| *g += 1);
                let Some(end) = end else { return };
                tokio::time::sleep_until(end.into()).await;
                listener = rebind(addr, who).await;
            }
        }
    }
}

/// Binds `addr` again, trying for a second (the port was ours a moment ago).
async fn rebind(addr: SocketAddr, who: &str) -> Option<TcpListener> {
    for _ in 0..20 {
        if let Ok(l) = TcpListener::bind(addr).await {
            return Some(l);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("stagger {who}: could not bind {addr} again after the failover");
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_and_touching_failovers_keep_the_listener_down_until_the_last_ends() {
        let t = Instant::now();
        let s = |a: u64| t + Duration::from_secs(a);
        let d = Downtime::new([
            (s(10), Some(s(12))),
            (s(1), Some(s(3))),
            (s(2), Some(s(5))),
            (s(5), Some(s(6))),
        ]);
        assert_eq!(d.0, vec![(s(1), Some(s(6))), (s(10), Some(s(12)))]);
        let d = Downtime::new([(s(1), None), (s(4), Some(s(5)))]);
        assert_eq!(d.0, vec![(s(1), None)]);
    }

    #[tokio::test]
    async fn a_failover_refuses_connections_drops_open_ones_and_listens_again() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let start = Instant::now();
        let down_from = start + Duration::from_millis(300);
        let down_to = start + Duration::from_millis(700);
        let (kill, _) = watch::channel(0u64);
        let (went_down, mut downs) = watch::channel(0u32);
        let (conns, mut served) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(accept_loop(
            listener,
            addr,
            Downtime::new([(down_from, Some(down_to))]),
            kill,
            "test",
            move || went_down.send_modify(|n| *n += 1),
            move |stream, mut kill: watch::Receiver<u64>| {
                let conns = conns.clone();
                tokio::spawn(async move {
                    let _ = conns.send(());
                    let _ = kill.changed().await;
                    drop(stream);
                });
            },
        ));
        let open = TcpStream::connect(addr).await.unwrap();
        served.recv().await.unwrap();
        downs.wait_for(|n| *n == 1).await.unwrap();
        assert!(Instant::now() >= down_from);
        // The open connection is closed by the server: a read sees the end.
        let mut buf = [0u8; 1];
        open.readable().await.unwrap();
        assert!(matches!(open.try_read(&mut buf), Ok(0) | Err(_)));
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "refused while down"
        );
        tokio::time::sleep_until((down_to + Duration::from_millis(200)).into()).await;
        let _again = TcpStream::connect(addr)
            .await
            .expect("listening again after the failover");
        served.recv().await.unwrap();
        task.abort();
    }
}
