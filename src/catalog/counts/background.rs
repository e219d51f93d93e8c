//! Counting large record files in the background, a step at a time.
//!
//! Counting a record file means reading all of it; for a file of many
//! gigabytes that takes minutes, and a `.stats` that waited for it would
//! hold its reader (and, in a mount, a thread serving everyone) as long.
//! So a catalog that counts in the background (a daemon's) does not count
//! a file of at least [`BackgroundCounts::threshold`] bytes that the
//! count cache does not know when a walk meets it: it hands the open file
//! here and the walk shows it as being counted (`stats_origin:
//! "counting"`, no counts), never a partial count as if it were whole.
//!
//! One thread counts, taking the files in turn one step
//! ([`STEP`] bytes, see [`crate::records::count_step`]) at a time, so a
//! small file is not stuck behind a 60 GB one. What each file has
//! reached is kept, so a file is counted once however often it is asked
//! for, and saved beside the count cache (`progress.rs`) with it, so a
//! restarted daemon resumes where the last one stopped; a finished count
//! goes into the count cache (and is remembered here too, for a file too
//! young for the cache to keep). A file that
//! changes while it is counted is dropped and counted again when next
//! asked for. How many files are in flight is bounded (each holds a
//! descriptor); past the bound a file is asked for again by a later walk.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::progress::{self, Saved};
use super::{CacheFile, CountCache};
use crate::catalog::cache::FileId;
use crate::error::Result;
use crate::records::{CountProgress, RecordFormat, RecordStats, count_step};
use crate::warehouse::Blob;
use crate::work::{self, Work};

/// Bytes counted in one step.
pub const STEP: u64 = 64 << 20;
/// Files queued or counted at once, and finished counts remembered.
const MAX_FILES: usize = 64;

/// Where a file handed to the background stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Background {
    /// Counted: the file's counts.
    Counted(RecordStats),
    /// Being counted: the bytes counted so far, of the file's size.
    Counting { counted: u64, size: u64 },
    /// Counting it failed.
    Failed(String),
}

/// The background counter of one warehouse, shared by its catalog's views.
pub struct BackgroundCounts {
    threshold: u64,
    state: Mutex<State>,
    cache: Weak<CountCache>,
    /// Cancelled when the counter goes (the daemon stops).
    work: Arc<Work>,
    /// Where progress persists, if it does.
    file: Option<CacheFile>,
    /// Progress changed since it was last saved.
    dirty: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Files waiting for their next step, in turn.
    queue: VecDeque<Job>,
    /// Every file queued, counted or failed, by its count-cache key.
    known: HashMap<String, Known>,
    /// Finished or failed keys, oldest first, for eviction.
    ended: VecDeque<String>,
    worker: bool,
    /// Progress saved by an earlier process, for files not asked for yet.
    saved: HashMap<String, Saved>,
}

struct Known {
    id: FileId,
    state: Background,
    progress: CountProgress,
}

struct Job {
    key: String,
    id: FileId,
    blob: Blob,
    format: RecordFormat,
    progress: CountProgress,
}

impl BackgroundCounts {
    /// A counter for files of at least `threshold` bytes, whose finished
    /// counts go into `cache`, keeping its progress in `file` (and
    /// resuming from what an earlier process kept there).
    pub fn new(
        threshold: u64,
        cache: &Arc<CountCache>,
        file: Option<CacheFile>,
    ) -> Arc<BackgroundCounts> {
        let saved = file.as_ref().map(progress::load).unwrap_or_default();
        Arc::new(BackgroundCounts {
            threshold,
            state: Mutex::new(State {
                saved,
                ..State::default()
            }),
            cache: Arc::downgrade(cache),
            work: Work::cancellable("a background count"),
            file,
            dirty: AtomicBool::new(false),
        })
    }

    /// Writes the progress of the files being counted if it changed since
    /// the last save; true when it wrote.
    pub fn save(&self) -> Result<bool> {
        let Some(file) = &self.file else {
            return Ok(false);
        };
        if !self.dirty.swap(false, Ordering::SeqCst) {
            return Ok(false);
        }
        let entries: Vec<(String, Saved)> = {
            let state = self.state.lock();
            let counting = state
                .known
                .iter()
                .filter(|(_, known)| matches!(known.state, Background::Counting { .. }))
                .map(|(key, known)| {
                    let saved = Saved {
                        size: known.id.size,
                        mtime_ns: known.id.mtime_ns,
                        progress: known.progress,
                    };
                    (key.clone(), saved)
                });
            let earlier = state.saved.iter().map(|(k, s)| (k.clone(), *s));
            counting.chain(earlier).take(MAX_FILES * 4).collect()
        };
        let written = progress::save(file, entries.iter().map(|(k, s)| (k.as_str(), *s)));
        if written.is_err() {
            self.dirty.store(true, Ordering::SeqCst);
        }
        written.map(|()| true)
    }

    /// Files this large or larger are counted here.
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// Where the file `key`, of identity `id`, stands; a file not known
    /// yet is opened with `open` (which must give the file of identity
    /// `id`) and queued.
    pub fn request(
        self: &Arc<Self>,
        key: &str,
        id: FileId,
        format: RecordFormat,
        open: impl FnOnce() -> io::Result<Blob>,
    ) -> Background {
        let counting = Background::Counting {
            counted: 0,
            size: id.size,
        };
        {
            let mut state = self.state.lock();
            if let Some(known) = state.known.get(key).filter(|k| k.id == id) {
                return known.state.clone();
            }
            // Another identity: the file changed; what was counted of it
            // is dropped (its queued step notices and ends).
            state.known.remove(key);
            state.ended.retain(|k| k != key);
            if state.queue.len() >= MAX_FILES {
                return counting;
            }
        }
        // Opened outside the lock: a remote file's open is a request.
        let blob = match open() {
            Ok(blob) => blob,
            Err(e) => return Background::Failed(e.to_string()),
        };
        let mut state = self.state.lock();
        if let Some(known) = state.known.get(key).filter(|k| k.id == id) {
            return known.state.clone();
        }
        if state.queue.len() >= MAX_FILES {
            return counting;
        }
        // Where an earlier process stopped, for the very same file.
        let resumed = state
            .saved
            .remove(key)
            .filter(|s| (s.size, s.mtime_ns) == (id.size, id.mtime_ns))
            .map(|s| s.progress)
            .unwrap_or_default();
        let counting = Background::Counting {
            counted: resumed.offset,
            size: id.size,
        };
        state.queue.push_back(Job {
            key: key.to_string(),
            id,
            blob,
            format,
            progress: resumed,
        });
        state.known.insert(
            key.to_string(),
            Known {
                id,
                state: counting.clone(),
                progress: resumed,
            },
        );
        if !state.worker {
            state.worker = self.start_worker();
        }
        counting
    }

    /// Files queued or being counted.
    pub fn in_flight(&self) -> usize {
        self.state.lock().queue.len()
    }

    fn start_worker(self: &Arc<Self>) -> bool {
        let me = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("pchronicle-count".into())
            .spawn(move || {
                while let Some(counter) = me.upgrade() {
                    if !counter.step() {
                        return;
                    }
                }
            });
        match spawned {
            Ok(_) => true,
            Err(e) => {
                log::warn!("no background counting thread: {e}");
                false
            }
        }
    }

    /// Counts one step of the next file; false when there is nothing left
    /// to count (the worker ends; the next request starts another).
    fn step(&self) -> bool {
        let Some(mut job) = self.next_job() else {
            return false;
        };
        let stepped = work::within(&self.work, || {
            let unchanged = job.blob.stat().map(|s| FileId::of(&s) == job.id)?;
            if !unchanged {
                return Ok(None);
            }
            count_step(&job.blob, job.id.size, job.format, &mut job.progress, STEP).map(Some)
        });
        if self.work.is_cancelled() {
            return false;
        }
        let mut state = self.state.lock();
        // Dropped meanwhile (the file changed and was asked for again).
        let wanted = state.known.get(&job.key).is_some_and(|k| k.id == job.id);
        if !wanted {
            return true;
        }
        match stepped {
            Ok(Some(true)) => {
                let stats = job.progress.stats;
                self.end(&mut state, &job.key, Background::Counted(stats));
                drop(state);
                if let Some(cache) = self.cache.upgrade() {
                    cache.put(&job.key, job.id, stats);
                }
                log::debug!("{}: counted in the background", job.key);
            }
            Ok(Some(false)) => {
                if let Some(known) = state.known.get_mut(&job.key) {
                    known.state = Background::Counting {
                        counted: job.progress.offset,
                        size: job.id.size,
                    };
                    known.progress = job.progress;
                }
                state.queue.push_back(job);
                self.dirty.store(true, Ordering::SeqCst);
            }
            // Changed since it was opened: counted again when next asked.
            Ok(None) => {
                state.known.remove(&job.key);
            }
            Err(e) => self.end(&mut state, &job.key, Background::Failed(e.to_string())),
        }
        true
    }

    fn next_job(&self) -> Option<Job> {
        let mut state = self.state.lock();
        let job = state.queue.pop_front();
        if job.is_none() {
            state.worker = false;
        }
        job
    }

    /// Notes that `key` ended as `ended`, remembering at most
    /// [`MAX_FILES`] ended files.
    fn end(&self, state: &mut State, key: &str, ended: Background) {
        if let Some(known) = state.known.get_mut(key) {
            known.state = ended;
        }
        self.dirty.store(true, Ordering::SeqCst);
        state.ended.push_back(key.to_string());
        while state.ended.len() > MAX_FILES {
            if let Some(old) = state.ended.pop_front() {
                state.known.remove(&old);
            }
        }
    }
}

impl Drop for BackgroundCounts {
    fn drop(&mut self) {
        self.work.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait_counted(counter: &Arc<BackgroundCounts>, key: &str, id: FileId) -> Background {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let state = counter.request(key, id, RecordFormat::Jsonl, || unreachable!());
            if !matches!(state, Background::Counting { .. }) {
                return state;
            }
            assert!(std::time::Instant::now() < deadline, "never counted");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn a_file_is_counted_once_in_the_background_and_cached() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.jsonl");
        let mut data = Vec::new();
        for i in 0..200_000 {
            data.extend_from_slice(format!("{{\"i\":{i}}}\n").as_bytes());
        }
        std::fs::write(&path, &data).unwrap();
        // Old enough for the count cache to keep (the racy window is
        // measured from the change time too).
        std::thread::sleep(std::time::Duration::from_millis(2100));
        let (cache, _) = CountCache::open(16, None).unwrap();
        let cache = Arc::new(cache);
        let counter = BackgroundCounts::new(1, &cache, None);
        let stat = crate::warehouse::Stat::of(std::fs::File::open(&path).unwrap()).unwrap();
        let id = FileId::of(&stat);
        let open = || std::fs::File::open(&path).map(Blob::Local);
        let first = counter.request("big.jsonl", id, RecordFormat::Jsonl, open);
        assert!(matches!(first, Background::Counting { .. }), "{first:?}");
        let Background::Counted(stats) = wait_counted(&counter, "big.jsonl", id) else {
            panic!("not counted");
        };
        assert_eq!(stats.record_count, 200_000);
        assert_eq!(cache.get("big.jsonl", id), Some(stats));
        assert_eq!(counter.in_flight(), 0);
    }
}
