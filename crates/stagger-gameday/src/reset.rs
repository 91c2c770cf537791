//! A connection the server can reset: the `reset` fault's tool.
//!
//! A reset (RST) is the answer a client can learn least from: the request
//! went out, no response came back, and the work may or may not have been
//! done. Closing a socket normally sends FIN; closing it with `SO_LINGER`
//! set to zero sends RST instead. Hyper owns the socket while it serves a
//! connection, so the socket is wrapped: a handler flips the flag through a
//! [`ResetHandle`] in the request's extensions, the wrapper then fails every
//! read and write (hyper gives up on the connection and drops it), and the
//! drop closes it with a zero linger.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Asks for the connection a request came on to be reset.
#[derive(Debug, Clone)]
pub struct ResetHandle(Arc<AtomicBool>);

impl ResetHandle {
    /// Resets the connection instead of answering: nothing more is written
    /// on it, and it closes with RST.
    pub fn reset(&self) {
        self.0.store(true, Relaxed);
    }
}

/// A TCP stream that closes with RST once its [`ResetHandle`] asks.
#[derive(Debug)]
pub struct Resettable {
    inner: TcpStream,
    reset: Arc<AtomicBool>,
}

impl Resettable {
    /// Wraps an accepted stream.
    pub fn new(inner: TcpStream) -> Self {
        Resettable {
            inner,
            reset: Arc::default(),
        }
    }

    /// A handle for handlers serving requests on this stream.
    pub fn handle(&self) -> ResetHandle {
        ResetHandle(self.reset.clone())
    }

    fn check(&self) -> io::Result<()> {
        if self.reset.load(Relaxed) {
            Err(io::ErrorKind::ConnectionReset.into())
        } else {
            Ok(())
        }
    }
}

impl Drop for Resettable {
    fn drop(&mut self) {
        if self.reset.load(Relaxed) {
            // Zero linger: the close that follows sends RST, at once.
            let _ = self.inner.set_zero_linger();
        }
    }
}

impl AsyncRead for Resettable {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Resettable {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // No FIN after a reset: the drop sends RST.
        self.check()?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_reset_connection_closes_with_rst() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(b"ping").await.unwrap();
            let mut buf = [0u8; 16];
            c.read(&mut buf).await
        });
        let (sock, _) = listener.accept().await.unwrap();
        let mut s = Resettable::new(sock);
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await.unwrap();
        s.handle().reset();
        assert!(s.write_all(b"pong").await.is_err());
        drop(s);
        let got = client.await.unwrap();
        assert_eq!(
            got.map_err(|e| e.kind()),
            Err(io::ErrorKind::ConnectionReset)
        );
    }
}
