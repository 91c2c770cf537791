//! The lab: the simulator and the decision engine behind a small web
//! server, for a browser.
//!
//! The server listens on loopback and serves a single-page app whose assets
//! are compiled in (it works offline). The page draws what three JSON
//! endpoints answer:
//!
//! - `GET /api/simulate?…` and `GET /api/schedule?…` take the flags of
//!   `stagger simulate` / `stagger schedule` (same names without the
//!   dashes). The binary owns those flag definitions, so it hands the
//!   server the two handlers as [`Endpoints`]; they read the query's
//!   [`pairs`] as flags (never the [`REFUSED`] ones), refuse work past this
//!   server's limits with [`check_simulation`], [`check_hedging`],
//!   [`check_priority`] and [`check_schedule`], and
//!   answer with the bytes `--format json` prints;
//! - `GET /api/decide?…` builds the facts of one failed attempt the way the
//!   HTTP front-end does and asks the engine for its decision.
//!
//! The server owns only sockets, bounds and the `Host` check against DNS
//! rebinding.

use std::net::{IpAddr, SocketAddr};

mod bounds;
mod decide;
mod query;
mod server;

pub use bounds::REFUSED;
pub use bounds::{
    check_hedging, check_hedging_servers, check_priority, check_schedule, check_simulation,
};
pub use query::{pairs, BadParam};
pub use server::{serve, Endpoints};

/// The page's address: `http://127.0.0.1:7878/`, `http://[::1]:7878/`.
pub fn url(addr: SocketAddr) -> String {
    format!("http://{}/", display_addr(addr))
}

/// `127.0.0.1:7878`, `[::1]:7878`: the address as a URL authority.
fn display_addr(addr: SocketAddr) -> String {
    match addr.ip() {
        IpAddr::V6(ip) => format!("[{ip}]:{}", addr.port()),
        IpAddr::V4(ip) => format!("{ip}:{}", addr.port()),
    }
}
