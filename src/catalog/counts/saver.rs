//! Writing the persisted counts of one warehouse: one writer at a time,
//! whichever thread it is.
//!
//! The catalog's views, the daemon's periodic writer and the daemon's exit
//! all write the same two files. The last view can be dropped on a worker
//! thread while the daemon's main thread is leaving: a write in progress
//! there has already taken the caches' "changed" marks, so a second writer
//! that does not wait for it sees nothing to write and lets the process end
//! before the first one's file is in place. Every write goes through one
//! lock held for the whole write.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::{BackgroundCounts, CountCache};
use crate::error::Result;

/// A handle on the persisted counts, cheap to clone, that outlives the
/// catalog holding them. It does not keep the background counter: that
/// stops with the last catalog, whose drop writes its progress first.
#[derive(Clone)]
pub struct CountSaver {
    files: Arc<CountCache>,
    background: Option<Weak<BackgroundCounts>>,
    writing: Arc<Mutex<()>>,
}

impl CountSaver {
    pub fn new(files: &Arc<CountCache>, background: Option<&Arc<BackgroundCounts>>) -> CountSaver {
        CountSaver {
            files: Arc::clone(files),
            background: background.map(Arc::downgrade),
            writing: Arc::new(Mutex::new(())),
        }
    }

    /// Writes the counts, and the progress of the files being counted, if
    /// either changed; true when something was written. Returns once any
    /// write another thread had begun is done. The counts are written even
    /// when the progress file cannot be (the first failure is the error).
    pub fn save(&self) -> Result<bool> {
        let _writing = self.writing.lock();
        let progressed = match self.background.as_ref().and_then(Weak::upgrade) {
            Some(background) => background.save(),
            None => Ok(false),
        };
        let saved = self.files.save();
        Ok(progressed? | saved?)
    }
}
