//! The FUSE adapter: the warehouse as a read-only filesystem.
//!
//! [`adapter`] answers kernel requests by calling the catalog and nothing
//! else; [`inodes`] numbers the paths it has shown; [`mountpoint`] reads
//! the mount table and unmounts; [`daemon`] mounts, backgrounds and stops.
//! What each operation returns is documented in `docs/filesystem.md`.

pub mod adapter;
pub mod daemon;
pub mod inodes;
pub mod mountpoint;

pub use adapter::{FsOptions, WarehouseFs};
pub use daemon::{MountConfig, Mounted, mount};
pub use mountpoint::unmount;
