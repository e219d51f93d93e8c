//! pchronicle: a trajectory warehouse shown as a read-only filesystem.
//!
//! The crate is layered. [`catalog`] is the core: manifests,
//! classification, `list`, `open`, and the refresh cache; it knows nothing
//! of FUSE or of the command line. [`store`] holds the physical leaf
//! layouts behind one trait. [`records`] reads record files. The FUSE
//! adapter ([`fs`]) and the CLI only translate calls into the catalog and
//! present what it returns.

pub mod atomic;
pub mod catalog;
pub mod cli;
pub mod demo;
pub mod error;
pub mod fs;
pub mod records;
pub mod shards;
pub mod sidecar;
pub mod store;
pub mod warehouse;

pub use error::{Error, ErrorCode, Result};
