//! Atomic file replacement: a reader sees the old file or the new one,
//! never a torn mix, and a crash leaves one of the two on disk.
//!
//! The content goes to a temporary file in the destination's directory (so
//! the rename stays on one filesystem), which is fsynced, renamed over the
//! destination, and the directory is fsynced so the rename itself survives
//! a crash. Used where the writer chose the destination itself (the
//! import's `_offload/` store); what is written inside a warehouse others
//! write goes through [`crate::warehouse`]'s guarded replace instead.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Replaces `path` with `bytes` atomically and durably.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let temp = temp_path(dir, path);
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)?;
        File::open(dir)?.sync_all()?;
        Ok(())
    })();
    if result.is_err() {
        // The temp file may or may not exist; either way it must not linger.
        let _ = fs::remove_file(&temp);
    }
    result
}

/// A name no other writer uses, beside the target (see
/// [`crate::warehouse`], whose writes name their temp files the same way).
fn temp_path(dir: &Path, target: &Path) -> PathBuf {
    dir.join(crate::warehouse::temp_name(
        target.file_name().unwrap_or_default(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_content_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.toml");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn failure_leaves_destination_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/dir/f");
        assert!(write_atomic(&missing, b"x").is_err());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
