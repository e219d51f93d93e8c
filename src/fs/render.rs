//! The render cache of the synthetic files.
//!
//! A `.stats` or `.sources` is rendered by walking its subtree, which may
//! be slow; the result is reused for at most the attribute TTL (so `ls -l`
//! followed by `cat` walks once), bounded in count and bytes, and readers
//! asking for the same file at once meet at one gate: the first renders,
//! the others take what it finished with. Entries are keyed by inode and
//! view, so renders of different users are never mixed up.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lru::LruCache;
use parking_lot::Mutex;

use super::FsError;

/// A synthetic file as one viewer sees it: (inode, view id).
pub type RenderKey = (u64, u64);

/// Whether a render still stands past the TTL: nothing it was made of
/// changed since (the catalog watches), so rendering again would give the
/// same bytes.
pub type Stands = Arc<dyn Fn() -> bool + Send + Sync>;

/// A render kept: when it was made (or last found standing), its bytes,
/// and how to tell it still stands past the TTL.
type Memo = (Instant, Arc<[u8]>, Option<Stands>);

/// Synthetic files rendered recently, reused for at most the TTL and
/// bounded in count and bytes.
struct RenderMemo {
    entries: LruCache<RenderKey, Memo>,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

impl RenderMemo {
    fn get(&mut self, key: RenderKey, ttl: Duration) -> Option<Arc<[u8]>> {
        match self.entries.get_mut(&key) {
            Some((at, bytes, _)) if at.elapsed() < ttl => Some(Arc::clone(bytes)),
            // Past the TTL but standing: another TTL's worth, unwalked.
            Some((at, bytes, Some(stands))) if stands() => {
                *at = Instant::now();
                Some(Arc::clone(bytes))
            }
            _ => None,
        }
    }

    fn put(&mut self, key: RenderKey, bytes: Arc<[u8]>, stands: Option<Stands>, ttl: Duration) {
        if bytes.len() > self.max_bytes || self.max_entries == 0 {
            return;
        }
        if let Some((_, old, _)) = self.entries.pop(&key) {
            self.bytes -= old.len();
        }
        // Expired entries go first (least recently used first), then
        // live ones while over budget.
        while let Some((_, (at, old, _))) = self.entries.peek_lru() {
            let (expired, len) = (at.elapsed() >= ttl, old.len());
            let over =
                self.bytes + bytes.len() > self.max_bytes || self.entries.len() >= self.max_entries;
            if !over && !expired {
                break;
            }
            self.bytes -= len;
            self.entries.pop_lru();
        }
        self.bytes += bytes.len();
        self.entries.put(key, (Instant::now(), bytes, stands));
    }
}

/// Where readers of one synthetic file meet: the one holding `last`
/// renders, the ones waiting for it take what it finished with.
#[derive(Default)]
struct RenderGate {
    last: Mutex<Option<Rendered>>,
}

/// A finished render and when it finished.
type Rendered = (Instant, Result<Arc<[u8]>, FsError>);

/// Recent renders and the gates of renders under way.
pub struct Renders {
    ttl: Duration,
    memo: Mutex<RenderMemo>,
    gates: Mutex<HashMap<RenderKey, Arc<RenderGate>>>,
    rendered: AtomicU64,
    render_us: AtomicU64,
    reused: AtomicU64,
    /// Counts [`Renders::forget`] calls: a render begun before one is not
    /// kept.
    generation: AtomicU64,
}

/// How many synthetic files were rendered (and in how long) and how many
/// were answered with a render made before, since the mount started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RenderCounts {
    pub rendered: u64,
    pub render_us: u64,
    pub reused: u64,
}

impl RenderCounts {
    /// The counts since `earlier`.
    pub fn since(&self, earlier: &RenderCounts) -> RenderCounts {
        RenderCounts {
            rendered: self.rendered.saturating_sub(earlier.rendered),
            render_us: self.render_us.saturating_sub(earlier.render_us),
            reused: self.reused.saturating_sub(earlier.reused),
        }
    }
}

impl Renders {
    /// Renders reused for `ttl`: at most `max_entries` of them, holding at
    /// most `max_bytes` together (a larger one is not kept).
    pub fn new(ttl: Duration, max_entries: usize, max_bytes: usize) -> Renders {
        Renders {
            ttl,
            memo: Mutex::new(RenderMemo {
                entries: LruCache::unbounded(),
                bytes: 0,
                max_entries,
                max_bytes,
            }),
            gates: Mutex::new(HashMap::new()),
            rendered: AtomicU64::new(0),
            render_us: AtomicU64::new(0),
            reused: AtomicU64::new(0),
            generation: AtomicU64::new(0),
        }
    }

    /// The most bytes a render may take to be kept.
    pub fn max_kept_bytes(&self) -> usize {
        let memo = self.memo.lock();
        if self.ttl.is_zero() || memo.max_entries == 0 {
            0
        } else {
            memo.max_bytes
        }
    }

    /// The current generation, to hand back to [`Renders::keep`].
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The counts so far.
    pub fn counts(&self) -> RenderCounts {
        RenderCounts {
            rendered: self.rendered.load(Ordering::Relaxed),
            render_us: self.render_us.load(Ordering::Relaxed),
            reused: self.reused.load(Ordering::Relaxed),
        }
    }

    /// The bytes of `key`: reused when rendered within the TTL, else
    /// rendered by `render`, once for every reader asking meanwhile.
    pub fn get_or_render(
        &self,
        key: RenderKey,
        render: impl FnOnce() -> Result<Arc<[u8]>, FsError>,
    ) -> Result<Arc<[u8]>, FsError> {
        if let Some(bytes) = self.memo.lock().get(key, self.ttl) {
            self.reused.fetch_add(1, Ordering::Relaxed);
            return Ok(bytes);
        }
        let asked = Instant::now();
        let gate = Arc::clone(self.gates.lock().entry(key).or_default());
        let rendered = {
            let mut last = gate.last.lock();
            match &*last {
                // Rendered by the reader this one waited for: share it.
                Some((at, result)) if *at >= asked => {
                    self.reused.fetch_add(1, Ordering::Relaxed);
                    result.clone()
                }
                _ => {
                    let started = Instant::now();
                    let result = render();
                    let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                    self.rendered.fetch_add(1, Ordering::Relaxed);
                    self.render_us.fetch_add(took, Ordering::Relaxed);
                    *last = Some((Instant::now(), result.clone()));
                    result
                }
            }
        };
        let mut gates = self.gates.lock();
        // The map's reference and this one: nobody else waits at the gate.
        if Arc::strong_count(&gate) == 2 {
            gates.remove(&key);
        }
        rendered
    }

    /// Drops the renders of the synthetic files numbered `inos` (sorted),
    /// for every viewer.
    pub fn forget(&self, inos: &[u64]) {
        let mut memo = self.memo.lock();
        self.generation.fetch_add(1, Ordering::SeqCst);
        let keys: Vec<RenderKey> = memo
            .entries
            .iter()
            .filter(|(key, _)| inos.binary_search(&key.0).is_ok())
            .map(|(key, _)| *key)
            .collect();
        for key in keys {
            if let Some((_, bytes, _)) = memo.entries.pop(&key) {
                memo.bytes -= bytes.len();
            }
        }
    }

    /// Keeps a render begun in `generation` for reuse within the TTL (a
    /// zero TTL keeps nothing, nor does a render older than a forget).
    /// Past the TTL it is used again while `stands` says so.
    pub fn keep(&self, key: RenderKey, bytes: Arc<[u8]>, stands: Option<Stands>, generation: u64) {
        if self.ttl.is_zero() {
            return;
        }
        let mut memo = self.memo.lock();
        // Checked under the lock `forget` bumps it under.
        if self.generation.load(Ordering::SeqCst) == generation {
            memo.put(key, bytes, stands, self.ttl);
        }
    }
}
