//! A client's connection as the lane's routes see it: its and our address (what the proxy's
//! request object shows), and a second handle on its socket to notice the client leaving while
//! the lane waits for the provider (hyper reads nothing from a connection while its request is
//! being served).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The client's address on a forwarded request (the app behind the lane sees a Unix socket
/// peer; the Python layer puts this address back into the request). Stripped from clients'.
pub const PEER_HEADER: &str = "x-fastpath-lane-peer";
/// How often a waiting request checks that its client is still there.
const CLIENT_CHECK_INTERVAL: Duration = Duration::from_millis(50);

#[derive(Clone, Debug)]
pub(super) struct Connection {
    pub peer: SocketAddr,
    pub local: Option<SocketAddr>,
    watch: Arc<std::net::TcpStream>,
}

impl Connection {
    /// The accepted socket, and the connection as the routes see it (a duplicate of the socket
    /// watches for the client leaving).
    pub(super) fn accepted(
        stream: tokio::net::TcpStream,
        peer: SocketAddr,
    ) -> std::io::Result<(tokio::net::TcpStream, Connection)> {
        let local = stream.local_addr().ok();
        let stream = stream.into_std()?;
        let watch = stream.try_clone()?;
        let connection = Connection {
            peer,
            local,
            watch: Arc::new(watch),
        };
        Ok((tokio::net::TcpStream::from_std(stream)?, connection))
    }

    /// Resolves once the client has closed its side of the connection (or it broke).
    pub(super) async fn closed(&self) {
        let mut probe = [0u8; 1];
        loop {
            tokio::time::sleep(CLIENT_CHECK_INTERVAL).await;
            // Non-blocking (the socket is tokio's): WouldBlock means open and quiet.
            match self.watch.peek(&mut probe) {
                Ok(0) => return,
                Err(err) if err.kind() != std::io::ErrorKind::WouldBlock => return,
                _ => {}
            }
        }
    }
}
