//! The operations beside files and directories (`statfs`, extended
//! attributes, `access`), and which requests may be slow to answer: the
//! protocol layer makes those on a worker, never on a serving thread.

use std::ffi::OsStr;

use nix::errno::Errno;

use super::{FsError, FsStats, Handle, Synthetic, Target, WarehouseFs, XattrData, xattrs};
use crate::error::{Error, ErrorCode};
use crate::fs::views::Caller;

impl WarehouseFs {
    /// Whether the warehouse is in object storage, where every answer
    /// may wait for the network.
    pub fn is_remote(&self) -> bool {
        self.catalog().root_dir().is_remote()
    }

    /// Whether a lookup of `name` may be slow: a synthetic rollup is
    /// rendered by it (a walk), and a remote name is asked of the store.
    pub fn slow_lookup(&self, name: &OsStr) -> bool {
        let rendered = name
            .to_str()
            .and_then(Synthetic::from_name)
            .is_some_and(|which| which != Synthetic::Records);
        rendered || self.is_remote()
    }

    /// Whether a `getattr` or `open` of `ino` may be slow: a synthetic
    /// file is rendered (or, `.records`, its Snapshot gathered), and
    /// anything remote is asked of the store.
    pub fn slow_inode(&self, ino: u64) -> bool {
        let synthetic = matches!(self.inodes.get(ino), Some((Target::Synthetic { .. }, _)));
        synthetic || self.is_remote()
    }

    /// Whether an xattr request of `ino` (`name`: `getxattr` of it, `None`:
    /// `listxattr`) may be slow: pchronicle's own attributes of a
    /// warehouse path hold a record count. The names `ls -l` and other
    /// tools ask for (ACLs, security labels) are refused at once.
    pub fn slow_xattrs(&self, ino: u64, name: Option<&OsStr>) -> bool {
        let ours = name.is_none_or(|n| n.as_encoded_bytes().starts_with(b"user."));
        let path = matches!(self.inodes.get(ino), Some((Target::Path(_), _)));
        self.is_remote() || (ours && path)
    }

    /// Whether a read of the handle `fh` may be slow: a `.records` stream
    /// waits for its producer, a remote file for the store.
    pub fn slow_handle(&self, fh: u64) -> bool {
        match self.handles.get(fh).as_deref() {
            Ok(Handle::Records(_)) => true,
            Ok(Handle::File(file)) => file.local().is_none(),
            _ => false,
        }
    }

    /// `.records` streams with a producer running: all of them, or those
    /// `uid` opened.
    pub fn records_producers(&self, uid: Option<u32>) -> usize {
        self.producers.running(uid)
    }

    /// `statvfs` of the warehouse root.
    pub fn statfs(&self) -> Result<FsStats, FsError> {
        if self.is_remote() {
            // Object storage has no capacity to report: nothing free, and
            // names as long as a key component may be.
            return Ok(FsStats {
                blocks: 0,
                blocks_free: 0,
                blocks_available: 0,
                files: 0,
                files_free: 0,
                block_size: 4096,
                name_max: 1024,
                fragment_size: 4096,
            });
        }
        let s = nix::sys::statvfs::statvfs(self.catalog().root())?;
        Ok(FsStats {
            blocks: s.blocks(),
            blocks_free: s.blocks_free(),
            blocks_available: s.blocks_available(),
            files: s.files(),
            files_free: s.files_free(),
            block_size: s.block_size() as u32,
            name_max: s.name_max() as u32,
            fragment_size: s.fragment_size() as u32,
        })
    }

    /// The extended attribute `name` of `ino` (only `user.pchronicle.*` are
    /// kept; other namespaces are `EOPNOTSUPP`, so `ls -l` stops asking for
    /// ACLs and labels after the first file).
    pub fn getxattr(
        &self,
        caller: &Caller,
        ino: u64,
        name: &OsStr,
        size: u32,
    ) -> Result<XattrData, FsError> {
        let name = name
            .to_str()
            .filter(|n| n.starts_with("user."))
            .ok_or(Errno::EOPNOTSUPP)?;
        let attrs = self.xattrs(caller, ino)?;
        let (_, value) = attrs
            .into_iter()
            .find(|(n, _)| n == name)
            .ok_or(Errno::ENODATA)?;
        let value = value.ok_or_else(|| {
            Error::new(
                ErrorCode::BeingCounted,
                "the file is being counted in the background; ask again later",
            )
        })?;
        XattrData::sized(value.into_bytes(), size)
    }

    /// The names of `ino`'s extended attributes, each NUL-terminated.
    pub fn listxattr(&self, caller: &Caller, ino: u64, size: u32) -> Result<XattrData, FsError> {
        let mut names = Vec::new();
        for (name, _) in self.xattrs(caller, ino)? {
            names.extend_from_slice(name.as_bytes());
            names.push(0);
        }
        XattrData::sized(names, size)
    }

    /// Whether `ino` may be accessed (`writes`: write access was asked,
    /// which is `EROFS`).
    pub fn access(&self, ino: u64, writes: bool) -> Result<(), FsError> {
        if writes {
            return Err(Errno::EROFS.into());
        }
        self.target(ino)?;
        Ok(())
    }

    fn xattrs(&self, caller: &Caller, ino: u64) -> Result<xattrs::Attrs, FsError> {
        let (target, _) = self.target(ino)?;
        let view = self.views.of(caller)?;
        let Target::Path(rel) = target else {
            return Ok(xattrs::of_synthetic());
        };
        let node = self.node(&rel)?;
        xattrs::of_node(&view.catalog, &rel, node.kind)
    }
}
