//! The crate's one integration-test binary: the store contract on every store, the layer's rules,
//! and the example service.

mod contract;
mod example;
mod layer;
mod support;
