//! Drives a [`WarehouseFs`] the way the kernel would, by path, without
//! `/dev/fuse`: each helper is one or a few filesystem operations.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use pchronicle::catalog::{Catalog, CatalogOptions};
use pchronicle::fs::{
    Caller, DirEntry, DirectoryReplier, Entry, FsError, FsOptions, ROOT, WarehouseFs,
};

use crate::support::Warehouse;

/// Root's credentials, as the daemon's own requests carry them.
pub const ROOT_CALLER: Caller = Caller {
    uid: 0,
    gid: 0,
    pid: 1,
};

/// Another user's credentials (their group numbered like them).
pub fn user(uid: u32) -> Caller {
    Caller {
        uid,
        gid: uid,
        pid: 1,
    }
}

/// A filesystem over `wh` with the default options but the given TTL.
pub fn fs_with_ttl(wh: &Warehouse, ttl: Duration) -> WarehouseFs {
    let options = FsOptions {
        attr_ttl: ttl,
        ..FsOptions::default()
    };
    fs_with_options(wh, options)
}

/// A filesystem over `wh` with `options`.
pub fn fs_with_options(wh: &Warehouse, options: FsOptions) -> WarehouseFs {
    let catalog = Catalog::new(wh.path(), CatalogOptions::default()).unwrap();
    WarehouseFs::new(Arc::new(catalog), options)
}

/// A filesystem over `wh` with the default options.
pub fn fs_of(wh: &Warehouse) -> WarehouseFs {
    fs_with_ttl(wh, FsOptions::default().attr_ttl)
}

/// One directory entry as a reply buffer received it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub ino: u64,
    pub offset: u64,
    pub name: String,
    pub size: u64,
    pub is_dir: bool,
}

/// A reply buffer that takes at most `room` entries.
pub struct Buffer {
    pub room: usize,
    pub got: Vec<Listed>,
}

impl Buffer {
    pub fn with_room(room: usize) -> Buffer {
        Buffer {
            room,
            got: Vec::new(),
        }
    }
}

impl DirectoryReplier for Buffer {
    fn add(&mut self, entry: DirEntry<'_>) -> bool {
        if self.got.len() == self.room {
            return true;
        }
        self.got.push(Listed {
            ino: entry.ino,
            offset: entry.offset,
            name: entry.name.to_string(),
            size: entry.attr.size,
            is_dir: entry.attr.kind == fuser::FileType::Directory,
        });
        false
    }
}

/// The errno of a failed operation.
pub fn errno<T>(result: Result<T, FsError>) -> Errno {
    match result {
        Ok(_) => panic!("the operation succeeded"),
        Err(e) => e.errno(),
    }
}

/// Looks up every component of `rel` from the root.
pub fn walk(fs: &WarehouseFs, rel: &str) -> Result<Entry, FsError> {
    walk_as(fs, &ROOT_CALLER, rel)
}

/// Looks up every component of the non-empty `rel` from the root.
pub fn walk_as(fs: &WarehouseFs, caller: &Caller, rel: &str) -> Result<Entry, FsError> {
    let mut parent = ROOT;
    let mut found = Err(FsError::from(Errno::ENOENT));
    for name in rel.split('/') {
        let entry = fs.lookup(caller, parent, OsStr::new(name))?;
        parent = entry.attr.ino.0;
        found = Ok(entry);
    }
    found
}

/// The inode of `rel` (the root for "").
pub fn ino(fs: &WarehouseFs, rel: &str) -> u64 {
    ino_as(fs, &ROOT_CALLER, rel)
}

/// The inode of `rel` as `caller` looks it up (the root for "").
pub fn ino_as(fs: &WarehouseFs, caller: &Caller, rel: &str) -> u64 {
    if rel.is_empty() {
        return ROOT;
    }
    walk_as(fs, caller, rel)
        .unwrap_or_else(|e| panic!("lookup {rel}: {e}"))
        .attr
        .ino
        .0
}

/// The whole content of the file `ino`, read in `chunk`-byte requests.
pub fn read_all_as(fs: &WarehouseFs, caller: &Caller, ino: u64, chunk: u32) -> Vec<u8> {
    let opened = fs.open(caller, ino, false).unwrap();
    let mut out = Vec::new();
    loop {
        let data = fs.read(opened.fh, out.len() as u64, chunk).unwrap();
        if data.as_slice().is_empty() {
            break;
        }
        out.extend_from_slice(data.as_slice());
    }
    fs.release(opened.fh);
    out
}

/// The content of the file at `rel`.
pub fn cat(fs: &WarehouseFs, rel: &str) -> Vec<u8> {
    read_all_as(fs, &ROOT_CALLER, ino(fs, rel), 128 << 10)
}

/// Every entry of the directory `ino`, read `room` at a time through one
/// handle, as `ls` would.
pub fn list(fs: &WarehouseFs, ino: u64, room: usize, plus: bool) -> Vec<Listed> {
    let dir = fs.opendir(&ROOT_CALLER, ino).unwrap();
    let mut out: Vec<Listed> = Vec::new();
    loop {
        let offset = out.last().map_or(0, |l| l.offset);
        let mut buffer = Buffer::with_room(room);
        if plus {
            fs.readdirplus(ino, Some(dir.fh), offset, &mut buffer)
                .unwrap();
        } else {
            fs.readdir(ino, Some(dir.fh), offset, &mut buffer).unwrap();
        }
        if buffer.got.is_empty() {
            break;
        }
        out.extend(buffer.got);
    }
    fs.release(dir.fh);
    out
}

/// `name` inside the directory `rel` ("" for the root).
pub fn join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

/// The names of `list`.
pub fn names(listed: &[Listed]) -> Vec<String> {
    listed.iter().map(|l| l.name.clone()).collect()
}
