//! How a long-running process (the daemon) uses the C heap: its resident
//! memory stays near what it holds between requests, and a `.records`
//! stream, while it runs, reuses the large buffers Lance decodes a leaf
//! into instead of having the kernel map and zero fresh ones for each.
//!
//! A process that never calls [`bound`] (every command but the daemon)
//! keeps the allocator's own policy; the rest of this module is then a
//! no-op apart from [`give_back_freed_memory_soon`].

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::time::Duration;

use parking_lot::Mutex;

/// Freed memory past this much at the top of the heap goes back to the
/// system at once (bounded, between streams).
const TRIM_THRESHOLD: i32 = 128 << 10;
/// Buffers this large or larger are mappings of their own (bounded,
/// between streams). A piece of `.records` is taken while a stream runs,
/// from the heap; a read's reply of up to 1 MiB, taken by a serving
/// thread, may be a mapping of its own when no stream runs.
const MMAP_THRESHOLD: i32 = 1 << 20;
/// While a stream runs: the largest threshold the allocator takes (32 MiB
/// on 64-bit). Lance reads a leaf's pages and decodes a batch into
/// buffers of several MiB each; as mappings, every one is fresh pages to
/// fault in and zero, which cost the daemon more than half of its time
/// serving `.records` (docs/performance.md).
const STREAMING_MMAP_THRESHOLD: i32 = 32 << 20;
/// While a stream runs, the free top of the heap is kept up to this much
/// for the next batches instead of being handed back and faulted in
/// again. A leaf of long records decodes batches of several MiB each, and
/// with 8 MiB the top went back and forth: a `.records` of such a leaf
/// took about 15 % longer, with twice the page faults.
const STREAMING_TRIM_THRESHOLD: i32 = 64 << 20;

/// Set once [`bound`] ran: the policy is this module's.
static BOUNDED: AtomicBool = AtomicBool::new(false);
/// Streams running, under the lock every change of policy is made with.
static STREAMS: Mutex<usize> = Mutex::new(0);

/// Keeps the process's resident memory near what it holds: all threads
/// allocate from one arena (instead of one per thread, each keeping its
/// own freed memory; the daemon's requests are short and I/O bound), and
/// freed memory past [`TRIM_THRESHOLD`] at the top of the heap goes back
/// to the system. Called before the request threads start.
pub fn bound() {
    // SAFETY: mallopt only tunes the allocator; no safe wrapper exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    set_thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD);
    BOUNDED.store(true, Ordering::SeqCst);
}

fn set_thresholds(mmap: i32, trim: i32) {
    // SAFETY: as in `bound`; mallopt takes the allocator's own lock, so
    // it may run while other threads allocate.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, mmap);
        libc::mallopt(libc::M_TRIM_THRESHOLD, trim);
    }
}

/// A stream of records running: while one is held, large buffers are
/// reused (see [`STREAMING_MMAP_THRESHOLD`]). When the last one goes, the
/// bounds come back and what the streams freed is handed back soon.
pub struct Streaming(());

impl Streaming {
    pub fn begin() -> Streaming {
        let mut streams = STREAMS.lock();
        *streams += 1;
        if *streams == 1 && BOUNDED.load(Ordering::SeqCst) {
            set_thresholds(STREAMING_MMAP_THRESHOLD, STREAMING_TRIM_THRESHOLD);
        }
        Streaming(())
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        let mut streams = STREAMS.lock();
        *streams -= 1;
        if *streams == 0 && BOUNDED.load(Ordering::SeqCst) {
            set_thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD);
            drop(streams);
            give_back_freed_memory_soon();
        }
    }
}

/// Whether a stream holds the heap's streaming policy now.
fn streaming() -> bool {
    *STREAMS.lock() > 0
}

/// How long the heap is left alone after work before its free pages are
/// handed back: renders that come in a row (`ls -l`, a `find` that reads
/// every `.stats`) are trimmed after once.
const TRIM_AFTER: Duration = Duration::from_millis(50);

/// The least time between two trims, so a mount rendering all the time
/// (a zero TTL renders every read) trims at most twice a second.
const TRIM_GAP: Duration = Duration::from_millis(500);

/// Hands the heap memory freed by work (a render, a stream) back to the
/// system soon, on a thread of its own, so no answer waits for it.
///
/// A walk's buffers are freed between the small blocks it keeps (counts,
/// listings, kept answers), and the allocator keeps the pages they leave
/// free for reuse. Without this a daemon that walked a large tree stays
/// at its peak: 100,000 files and every `.stats` left about 9 MiB of free
/// pages. Trimming takes a lock per arena and a pass over its free
/// blocks, so it is done at most once per [`TRIM_GAP`], and only after
/// work: a mount answering from what it kept never trims. While a stream
/// runs nothing is trimmed: its batches reuse the free pages, and its
/// end trims.
pub fn give_back_freed_memory_soon() {
    static NUDGE: OnceLock<Option<SyncSender<()>>> = OnceLock::new();
    let nudge = NUDGE.get_or_init(|| {
        let (nudge, nudged) = sync_channel::<()>(1);
        std::thread::Builder::new()
            .name("pchronicle-trim".into())
            .spawn(move || {
                while nudged.recv().is_ok() {
                    std::thread::sleep(TRIM_AFTER);
                    // Nudges that came meanwhile are served by this trim.
                    while nudged.try_recv().is_ok() {}
                    give_back_freed_memory();
                    std::thread::sleep(TRIM_GAP.saturating_sub(TRIM_AFTER));
                }
            })
            .ok()
            .map(|_| nudge)
    });
    match nudge {
        // Full: a trim is already due.
        Some(nudge) => drop(nudge.try_send(())),
        None => give_back_freed_memory(),
    }
}

/// Returns the heap memory that is free to the system now, unless a
/// stream is reusing it.
fn give_back_freed_memory() {
    if streaming() {
        return;
    }
    // SAFETY: malloc_trim only releases free heap pages; it has no
    // preconditions and is thread-safe. No safe wrapper exists.
    unsafe { libc::malloc_trim(0) };
}
