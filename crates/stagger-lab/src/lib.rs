//! # stagger-lab — the simulator and the decision engine in a browser
//!
//! `stagger lab` serves one page whose assets are compiled in (it works
//! offline): scenes that run [`stagger_sim`] models and ask the library's
//! decision engine one question at a time, behind a small web server on
//! loopback. This crate is that server, its JSON API and its limits; the
//! binary hands it the handlers of the commands whose flags the API shares.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod lab;

pub use lab::*;
