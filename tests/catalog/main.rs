//! Integration tests of the catalog core against real temporary
//! warehouses, and of the CLI that exposes it. No FUSE here.

mod classification;
mod compact;
mod count_cache;
mod docs;
mod hostile;
mod lance_surface_guards;
mod malformed;
mod open;
mod rfc;
mod shapes;
mod shards;
mod sidecar;
mod support;
