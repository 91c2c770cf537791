//! The crate's one integration-test binary: each file is a module, so the crate graph is linked
//! once instead of once per file.

mod determinism;
mod fleet;
mod layers_tower;
mod models;
mod priority;
mod servers;
