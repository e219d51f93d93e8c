//! Answers kept while nothing below them changes.
//!
//! A daemon asked the same thing again and again (a page polling `/`, a
//! script reading `.stats` every second) would validate every leaf below
//! the path with `fstatat` each time. On a warehouse whose filesystem
//! reports changes (see [`Dir::notifies_changes`]) a catalog instead
//! watches (inotify) every directory it classifies, and keeps its answers
//! to `list`, `open` and `stats` of a directory: one is given again, without
//! a single `stat`, while no change was reported at or below its path
//! since it was begun, and for at most [`KEPT_AT_MOST`].
//!
//! What an answer depends on is exactly what the refresh cache's stamps
//! check (see [`super::cache`]): each directory met (its entries, their
//! sizes and times, its own attributes) and the subdirectories a store
//! reads to classify a leaf (`_versions/`). Every one of them is watched
//! *before* it is read, so a change either shows in the answer or is
//! reported after it began. A watch that cannot be added (the kernel's or
//! this process's limit) leaves the answer unkept: it is made again next
//! time, as without watching.
//!
//! An event names the directory it happened in; that directory and every
//! one above it count as changed. A directory that vanishes, moves or
//! loses its watch, and a queue overflow, count as a change everywhere
//! (paths below a moved directory no longer name what was watched).

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lru::LruCache;
use parking_lot::Mutex;
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};

use super::STATE_DIR;
use super::cache::{HitCount, HitCounter};
use super::model::{Listing, Snapshot, Stats};
use super::walk::Counting;
use crate::warehouse::{Dir, Stat};

/// The longest an answer is given again without being made anew, however
/// quiet its directories: a bound on what a change the kernel did not
/// report could hide.
pub const KEPT_AT_MOST: Duration = Duration::from_secs(60);

/// Watches one process adds at most, leaving the rest of the user's
/// allowance (`fs.inotify.max_user_watches`) to other programs.
const WATCHES_MAX: usize = 65_536;

/// Answers kept, and their total weight (entries and sources held): an
/// entry or source kept costs about 300 bytes, so at most about 5 MiB (a
/// walk of 100,000 files fills it with the answers of its last 16
/// directories of 1,000). An answer heavier than `ANSWER_WEIGHT_MAX` is
/// not kept.
const ANSWERS_MAX: usize = 4_096;
const WEIGHT_MAX: usize = 16_384;
const ANSWER_WEIGHT_MAX: usize = 8_192;

/// What a watch reports: every change to a directory's entries, to their
/// bytes and attributes, and to the directory itself. Reads are not asked
/// for.
fn watch_flags() -> WatchFlags {
    WatchFlags::MODIFY
        | WatchFlags::ATTRIB
        | WatchFlags::CLOSE_WRITE
        | WatchFlags::MOVED_FROM
        | WatchFlags::MOVED_TO
        | WatchFlags::CREATE
        | WatchFlags::DELETE
        | WatchFlags::DELETE_SELF
        | WatchFlags::MOVE_SELF
}

/// When an answer was begun: the number of change reports read by then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark(u64);

/// The watches of one warehouse, shared by its catalogs (one per viewer).
pub struct Watcher {
    inotify: OwnedFd,
    root: PathBuf,
    state: Mutex<State>,
    /// Watches that could not be added, ever: an answer made while this
    /// moved may depend on an unwatched directory and is not kept.
    gaps: AtomicU64,
}

struct State {
    /// The directories each watch stands for (one inode may be reached by
    /// two paths).
    owners: HashMap<i32, Vec<PathBuf>>,
    /// Each watched directory's watches: its own, then its subdirectories'.
    nodes: HashMap<PathBuf, Vec<i32>>,
    /// The report count of the last change at or below each directory.
    changed: HashMap<PathBuf, u64>,
    /// The report count of the last change in each directory itself.
    itself: HashMap<PathBuf, u64>,
    /// Batches of reports read so far.
    tick: u64,
    /// No answer begun before this report count holds.
    floor: u64,
    buffer: Vec<MaybeUninit<u8>>,
}

impl Watcher {
    /// Watches for the warehouse at `root`; `None` when its filesystem
    /// does not report every change or the kernel gives no instance.
    pub fn new(root: &Dir) -> Option<Arc<Watcher>> {
        if !root.notifies_changes() {
            return None;
        }
        let inotify = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC).ok()?;
        Some(Arc::new(Watcher {
            inotify,
            root: root.path().to_path_buf(),
            state: Mutex::new(State {
                owners: HashMap::new(),
                nodes: HashMap::new(),
                changed: HashMap::new(),
                itself: HashMap::new(),
                tick: 0,
                floor: 0,
                buffer: vec![MaybeUninit::uninit(); 64 * 1024],
            }),
            gaps: AtomicU64::new(0),
        }))
    }

    /// Whether `path` (a directory) is watched.
    pub fn is_watched(&self, path: &Path) -> bool {
        self.state.lock().nodes.contains_key(path)
    }

    /// Watches `dir` and those of its subdirectories `subdirs` that exist,
    /// unless they are already; false when one could not be.
    pub fn watch(&self, dir: &Dir, subdirs: &[&str]) -> bool {
        let path = dir.path();
        // The whole of it under the lock: a watch this call gives up on
        // failure is never one another call is registering meanwhile.
        let mut state = self.state.lock();
        if state.nodes.contains_key(path) {
            return true;
        }
        let mut wds = Vec::with_capacity(1 + subdirs.len());
        let mut whole = self.add(&state, dir, &mut wds);
        for name in subdirs {
            if !whole {
                break;
            }
            match dir.open_dir(name) {
                Ok(sub) => whole &= self.add(&state, &sub, &mut wds),
                Err(e) if absent(&e) => {}
                Err(_) => whole = false,
            }
        }
        if !whole {
            for wd in wds {
                if state.owners.get(&wd).is_none_or(Vec::is_empty) {
                    state.owners.remove(&wd);
                    let _ = inotify::remove_watch(&self.inotify, wd);
                }
            }
            self.gaps.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        for wd in &wds {
            state
                .owners
                .entry(*wd)
                .or_default()
                .push(path.to_path_buf());
        }
        state.nodes.insert(path.to_path_buf(), wds);
        true
    }

    /// Adds one watch, within this process's allowance.
    fn add(&self, state: &State, dir: &Dir, wds: &mut Vec<i32>) -> bool {
        if state.owners.len() >= WATCHES_MAX {
            return false;
        }
        match dir.add_watch(self.inotify.as_fd(), watch_flags()) {
            Ok(wd) => {
                wds.push(wd);
                true
            }
            Err(_) => false,
        }
    }

    /// Watches that could not be added so far.
    pub fn gaps(&self) -> u64 {
        self.gaps.load(Ordering::Relaxed)
    }

    /// Now, as an answer begun now will be judged by.
    pub fn mark(&self) -> Mark {
        let mut state = self.state.lock();
        self.drain(&mut state);
        Mark(state.tick)
    }

    /// Whether no change was reported at or below `path`, nor in any
    /// directory above it (what resolving `path` and classifying the
    /// directories on the way depend on), since `since`.
    pub fn quiet(&self, path: &Path, since: Mark) -> bool {
        let mut state = self.state.lock();
        self.drain(&mut state);
        let after = |at: Option<&u64>| at.is_some_and(|&at| at > since.0);
        if since.0 < state.floor || after(state.changed.get(path)) {
            return false;
        }
        let mut above = path.parent().filter(|p| p.starts_with(&self.root));
        while let Some(dir) = above {
            if after(state.itself.get(dir)) {
                return false;
            }
            above = dir.parent().filter(|p| p.starts_with(&self.root));
        }
        true
    }

    /// Reads every report queued, as one batch.
    fn drain(&self, state: &mut State) {
        let mut buffer = std::mem::take(&mut state.buffer);
        let mut reader = inotify::Reader::new(&self.inotify, &mut buffer);
        let mut begun = false;
        loop {
            let event = match reader.next() {
                Ok(event) => event,
                // Nothing more queued (or nothing readable: then every
                // answer stands on its own age bound, as reported below).
                Err(rustix::io::Errno::AGAIN) => break,
                Err(_) => {
                    state.upheaval();
                    break;
                }
            };
            if !begun {
                state.tick += 1;
                begun = true;
            }
            let flags = event.events();
            if event
                .file_name()
                .is_some_and(|name| name.to_bytes() == STATE_DIR.as_bytes())
            {
                continue;
            }
            let upheaval = ReadFlags::QUEUE_OVERFLOW
                | ReadFlags::IGNORED
                | ReadFlags::DELETE_SELF
                | ReadFlags::MOVE_SELF
                | ReadFlags::UNMOUNT;
            let Some(paths) = state.owners.get(&event.wd()).cloned() else {
                // A watch given up (by this process or the kernel) still
                // reporting; an overflow names no watch.
                if flags.intersects(ReadFlags::QUEUE_OVERFLOW) {
                    state.upheaval();
                }
                continue;
            };
            if flags.intersects(upheaval) {
                for path in &paths {
                    state.forget_below(&self.inotify, path);
                }
                state.upheaval();
                continue;
            }
            for path in &paths {
                state.touch(&self.root, path);
            }
            // A subdirectory appearing or going may be one a store reads
            // to classify (a plain directory becoming a leaf): the
            // directory is watched afresh at its next classification.
            let entry_moved =
                ReadFlags::CREATE | ReadFlags::DELETE | ReadFlags::MOVED_FROM | ReadFlags::MOVED_TO;
            if flags.contains(ReadFlags::ISDIR) && flags.intersects(entry_moved) {
                for path in &paths {
                    state.forget(&self.inotify, path);
                }
            }
        }
        state.buffer = buffer;
    }
}

impl State {
    /// `path` and every directory above it (up to `root`) changed now.
    fn touch(&mut self, root: &Path, path: &Path) {
        let tick = self.tick;
        self.itself.insert(path.to_path_buf(), tick);
        let mut at = Some(path);
        while let Some(dir) = at {
            match self.changed.get_mut(dir) {
                Some(seen) if *seen == tick => break,
                Some(seen) => *seen = tick,
                None => {
                    self.changed.insert(dir.to_path_buf(), tick);
                }
            }
            if dir == root {
                break;
            }
            at = dir.parent().filter(|p| p.starts_with(root));
        }
    }

    /// Everything changed: no answer begun before now holds.
    fn upheaval(&mut self) {
        self.floor = self.tick;
        self.changed.clear();
        self.itself.clear();
    }

    /// Stops watching `path` for itself (its watches are removed once no
    /// other directory stands on them).
    fn forget(&mut self, inotify: &OwnedFd, path: &Path) {
        let Some(wds) = self.nodes.remove(path) else {
            return;
        };
        for wd in wds {
            if let Some(paths) = self.owners.get_mut(&wd) {
                paths.retain(|p| p != path);
                if paths.is_empty() {
                    self.owners.remove(&wd);
                    let _ = inotify::remove_watch(inotify, wd);
                }
            }
        }
    }

    /// Stops watching `path` and every directory below it.
    fn forget_below(&mut self, inotify: &OwnedFd, path: &Path) {
        let below: Vec<PathBuf> = self
            .nodes
            .keys()
            .filter(|p| p.starts_with(path))
            .cloned()
            .collect();
        for p in below {
            self.forget(inotify, &p);
        }
    }
}

/// Whether opening a subdirectory failed because there is none by that
/// name (absent, or not a directory).
fn absent(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ELOOP)
    )
}

/// The question an answer is kept for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Question {
    List,
    Open(Counting),
    Stats,
}

/// A kept answer.
#[derive(Clone)]
pub(super) enum Answer {
    List(Arc<(Listing, Vec<Stat>)>),
    Open(Arc<Snapshot>),
    Stats(Arc<Stats>),
}

impl Answer {
    /// What keeping it costs: the entries, sources and indexes it holds.
    fn weight(&self) -> usize {
        1 + match self {
            Answer::List(listing) => listing.0.entries.len(),
            Answer::Open(snapshot) => open_weight(snapshot),
            Answer::Stats(stats) => stats.indexes.len(),
        }
    }
}

/// What keeping the Snapshot `snapshot` weighs, beyond the answer itself.
fn open_weight(snapshot: &Snapshot) -> usize {
    snapshot.sources.len() + snapshot.indexes.len()
}

struct Kept {
    /// The directory the answer is of, as the watcher names it.
    path: PathBuf,
    since: Mark,
    at: Instant,
    answer: Answer,
}

/// A catalog's answers kept while quiet (see the module's comment).
pub(super) struct QuietAnswers {
    watcher: Arc<Watcher>,
    answers: Mutex<(LruCache<(PathBuf, Question), Kept>, usize)>,
    hits: HitCounter,
}

/// An answer being made: when it was begun, and the watch gaps by then.
#[derive(Debug, Clone, Copy)]
pub(super) struct Begun {
    since: Mark,
    gaps: u64,
    at: Instant,
}

impl QuietAnswers {
    pub(super) fn new(watcher: Arc<Watcher>) -> QuietAnswers {
        QuietAnswers {
            watcher,
            answers: Mutex::new((LruCache::unbounded(), 0)),
            hits: HitCounter::default(),
        }
    }

    pub(super) fn watcher(&self) -> &Arc<Watcher> {
        &self.watcher
    }

    /// Whether an answer to `question` of `rel` is kept and still quiet
    /// (as [`get`](QuietAnswers::get) would find it, without using it).
    pub(super) fn holds(&self, rel: &Path, question: Question) -> bool {
        self.quiet_kept(&(rel.to_path_buf(), question), |_| ())
            .is_some()
    }

    /// The answer to `question` of `rel`, if one is kept and still quiet.
    pub(super) fn get(&self, rel: &Path, question: Question) -> Option<Answer> {
        let key = (rel.to_path_buf(), question);
        let found = self.quiet_kept(&key, |kept| kept.answer.clone());
        if found.is_some() {
            self.answers.lock().0.promote(&key);
        }
        self.hits.note(found)
    }

    /// `take` of the answer kept under `key`, if it is still quiet (taken
    /// under the lock, checked after it).
    fn quiet_kept<T>(&self, key: &(PathBuf, Question), take: impl FnOnce(&Kept) -> T) -> Option<T> {
        let kept = {
            let answers = self.answers.lock();
            answers
                .0
                .peek(key)
                .map(|k| (k.path.clone(), k.since, k.at, take(k)))
        };
        kept.and_then(|(path, since, at, taken)| {
            (at.elapsed() < KEPT_AT_MOST && self.watcher.quiet(&path, since)).then_some(taken)
        })
    }

    /// Whether nothing changed at or below `path` (a watched directory)
    /// since `begun`, no watch was missed meanwhile, and `begun` is no
    /// older than [`KEPT_AT_MOST`]: what was made from it then stands.
    pub(super) fn unchanged(&self, path: &Path, begun: &Begun) -> bool {
        self.watcher.gaps() == begun.gaps
            && begun.at.elapsed() < KEPT_AT_MOST
            && self.watcher.quiet(path, begun.since)
    }

    /// Marks the start of an answer that may be kept.
    pub(super) fn begin(&self) -> Begun {
        Begun {
            gaps: self.watcher.gaps(),
            at: Instant::now(),
            since: self.watcher.mark(),
        }
    }

    /// Keeps `answer` to `question` of `rel` (the directory `path`), begun
    /// at `begun`, unless a watch could not be added meanwhile.
    pub(super) fn keep(
        &self,
        rel: &Path,
        question: Question,
        path: &Path,
        begun: Begun,
        answer: Answer,
    ) {
        if self.watcher.gaps() != begun.gaps {
            return;
        }
        let weight = answer.weight();
        if weight > ANSWER_WEIGHT_MAX {
            return;
        }
        let kept = Kept {
            path: path.to_path_buf(),
            since: begun.since,
            at: begun.at,
            answer,
        };
        let mut answers = self.answers.lock();
        let (lru, total) = &mut *answers;
        if let Some(old) = lru.put((rel.to_path_buf(), question), kept) {
            *total -= old.answer.weight();
        }
        *total += weight;
        while *total > WEIGHT_MAX || lru.len() > ANSWERS_MAX {
            match lru.pop_lru() {
                Some((_, old)) => *total -= old.answer.weight(),
                None => break,
            }
        }
    }

    pub(super) fn clear(&self) {
        let mut answers = self.answers.lock();
        answers.0.clear();
        answers.1 = 0;
    }

    pub(super) fn hit_count(&self) -> HitCount {
        self.hits.count()
    }
}
