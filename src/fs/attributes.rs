//! Attributes the mount shows: a warehouse path's own stat, a dataset leaf
//! as a read-only directory, and the synthetic files as read-only regular
//! files owned like the node they describe.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, INodeNo};

use crate::catalog::{Node, NodeKind};
use crate::warehouse::Stat;

/// The TTL of what must never be cached by the kernel (the attributes of
/// synthetic files rendered afresh on every open).
pub const NO_TTL: Duration = Duration::ZERO;

/// A warehouse path's attributes: its own stat, with a dataset leaf shown
/// as a read-only directory (`0555`) since its interior is not listed.
pub fn node_attr(ino: u64, node: &Node) -> FileAttr {
    let meta = &node.meta;
    let is_dir = meta.is_dir();
    let mtime = system_time(meta.mtime, meta.mtime_nsec);
    FileAttr {
        ino: INodeNo(ino),
        size: meta.size,
        blocks: meta.blocks,
        atime: system_time(meta.atime, meta.atime_nsec),
        mtime,
        ctime: system_time(meta.ctime, meta.ctime_nsec),
        crtime: mtime,
        kind: if is_dir {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        // A leaf is shown with its real permissions, masked read-only
        // (its interior is not listed, so nothing could be written).
        perm: match node.kind {
            NodeKind::Dataset => (meta.permissions() & !0o222) as u16,
            _ => meta.permissions() as u16,
        },
        // 1 for directories says "subdirectory count unknown", so `find`
        // never skips a directory on the strength of a link count.
        nlink: if is_dir {
            1
        } else {
            u32::try_from(meta.nlink).unwrap_or(u32::MAX)
        },
        uid: meta.uid,
        gid: meta.gid,
        rdev: 0,
        blksize: u32::try_from(meta.blksize).unwrap_or(4096),
        flags: 0,
    }
}

/// The I/O size a synthetic file asks readers for (`st_blksize`): `cat`,
/// `cp` and Python's buffered reads size their reads by it, and a
/// `.records` stream is served one request per read (direct I/O), so a
/// larger one means fewer round trips through the kernel (up to the
/// 1 MiB a request can carry).
pub const SYNTHETIC_BLKSIZE: u32 = 1 << 20;

/// A synthetic file's attributes: read-only, owned like the node it
/// describes, its times `now` (when its content was rendered).
pub fn synthetic_attr(ino: u64, len: u64, owner: &Stat, now: SystemTime) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: len,
        blocks: len.div_ceil(512),
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind: FileType::RegularFile,
        perm: 0o444,
        nlink: 1,
        uid: owner.uid,
        gid: owner.gid,
        rdev: 0,
        blksize: SYNTHETIC_BLKSIZE,
        flags: 0,
    }
}

/// The attributes of a negative entry (a name that does not exist): only
/// its number, 0, is read by the kernel.
pub fn absent_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// The file underneath a regular-file node, as (device, inode).
pub fn shown_file(node: &Node) -> Option<(u64, u64)> {
    (node.kind == NodeKind::File).then_some((node.meta.dev, node.meta.ino))
}

fn system_time(secs: i64, nanos: i64) -> SystemTime {
    let nanos = nanos.clamp(0, 999_999_999) as u32;
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nanos)
    } else {
        UNIX_EPOCH - Duration::new(secs.unsigned_abs(), 0) + Duration::new(0, nanos)
    }
}
