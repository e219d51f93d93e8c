//! The filesystem's operations driven directly on real temporary
//! warehouses, without `/dev/fuse`: what each operation answers
//! ([`operations`]) and what holds across calls (handles, inode
//! references, renders and freshness within the TTL: [`lifetimes`]).
//! What needs the kernel (its caches, `ls`/`cat` through the mount,
//! signals, permission checks) stays in `mount-tests/`.

pub mod driver;
mod lifetimes;
mod operations;
mod records;
