//! What the protocol adapter puts into the kernel's replies: who asked,
//! an open's flags, the handle a directory read names, and the entries of
//! a directory read, plain or with attributes.

use fuser::{
    FileHandle, FopenFlags, Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus, Request,
};

use super::filesystem::{DirEntry, DirectoryReplier, Opened};
use super::views::Caller;

pub(super) fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
    }
}

pub(super) fn open_flags(opened: Opened) -> FopenFlags {
    let mut flags = FopenFlags::empty();
    if opened.keep_cache {
        flags |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    if opened.direct_io {
        flags |= FopenFlags::FOPEN_DIRECT_IO;
    }
    flags
}

/// The handle a directory read names: none (0) where the kernel opens
/// directories itself; handles are numbered from 1.
pub(super) fn handle(fh: FileHandle) -> Option<u64> {
    (fh.0 != 0).then_some(fh.0)
}

/// A directory read's reply, plain or with attributes.
pub(super) trait DirectoryReply {
    fn ok(self);
}

impl DirectoryReply for ReplyDirectory {
    fn ok(self) {
        ReplyDirectory::ok(self)
    }
}

impl DirectoryReply for ReplyDirectoryPlus {
    fn ok(self) {
        ReplyDirectoryPlus::ok(self)
    }
}

pub(super) struct Plain<'a>(pub &'a mut ReplyDirectory);

impl DirectoryReplier for Plain<'_> {
    fn add(&mut self, entry: DirEntry<'_>) -> bool {
        self.0.add(
            INodeNo(entry.ino),
            entry.offset,
            entry.attr.kind,
            entry.name,
        )
    }
}

pub(super) struct Plus<'a>(pub &'a mut ReplyDirectoryPlus);

impl DirectoryReplier for Plus<'_> {
    fn add(&mut self, entry: DirEntry<'_>) -> bool {
        self.0.add(
            INodeNo(entry.ino),
            entry.offset,
            entry.name,
            &entry.ttl,
            entry.attr,
            Generation(0),
        )
    }
}
