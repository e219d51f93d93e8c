//! The FUSE side: the warehouse as a read-only filesystem.
//!
//! Two layers. [`filesystem`] is the filesystem itself ([`WarehouseFs`]):
//! every operation the mount answers, returning `Result<_, FsError>`,
//! knowing nothing of the kernel protocol, and tested without a kernel
//! (`tests/fs/`).
//! [`fuse`] is the protocol: a thin `fuser::Filesystem` that decodes each
//! request, calls the filesystem once and replies. Beside them:
//! [`inodes`] numbers the paths the kernel was shown; [`handles`] holds
//! open files and directory snapshots; [`render`] reuses rendered
//! synthetic files; [`views`] answers other users with what they could
//! read natively; [`attributes`] and [`xattrs`] say what a node looks
//! like; `passthrough` hands warehouse files to the kernel to read;
//! [`mountpoint`] reads the mount table and unmounts; `mounting` checks
//! the mount point and makes the mount; [`daemon`] serves and stops,
//! `background` starts the daemon, and
//! [`notify`] tells a service manager when the mount is ready;
//! [`control`] carries `pchronicle refresh` to a running mount;
//! [`metrics`] counts requests for `--log-metrics`. Serving threads only
//! serve: [`workers`] makes the answers that may be slow, within a budget,
//! and `requests` is what every answer goes through wherever it is made;
//! `invalidations` tells the kernel what a refresh made the daemon forget. What each operation returns is
//! documented in `docs/filesystem.md`.

pub mod attributes;
mod background;
pub mod control;
pub mod daemon;
mod error;
pub mod filesystem;
pub mod fuse;
pub mod handles;
pub mod inodes;
mod invalidations;
pub mod metrics;
mod mounting;
pub mod mountpoint;
pub mod notify;
mod passthrough;
pub mod render;
mod replies;
mod requests;
pub mod views;
pub mod workers;
pub mod xattrs;

pub use daemon::{MountConfig, Mounted, mount};
pub use error::FsError;
pub use filesystem::{
    DirEntry, DirectoryReplier, Entry, Forget, FsOptions, FsStats, Opened, ReadData, WarehouseFs,
    XattrData,
};
pub use fuse::WorkerOptions;
pub use inodes::ROOT;
pub use mountpoint::unmount;
pub use views::Caller;
