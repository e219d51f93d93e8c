//! Stable error codes and the error type every layer reports through.
//!
//! A user-visible failure always carries an [`ErrorCode`]: a stable string
//! (`PCHRONICLE_…`) that tests, scripts and users match on, a one-line
//! summary, and a fix-up text saying what to do about it. The CLI prints
//! `error[CODE]: message` and exits 1; `pchronicle errors` prints the table
//! below. Warnings that do not stop an operation (a malformed manifest that
//! classification falls back from, a bound that was hit) use the same codes.
//!
//! Codes are never renamed or reused: a removed condition keeps its row.

use std::fmt;
use std::path::{Path, PathBuf};

macro_rules! error_codes {
    ($( $variant:ident => $code:literal, $summary:literal, $fixup:literal; )*) => {
        /// Every stable error code pchronicle can report.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ErrorCode { $( $variant, )* }

        impl ErrorCode {
            /// All codes, in the order `pchronicle errors` prints them.
            pub const ALL: &'static [ErrorCode] = &[ $( ErrorCode::$variant, )* ];

            /// The stable string form, e.g. `PCHRONICLE_MANIFEST_PARSE`.
            pub fn as_str(self) -> &'static str {
                match self { $( ErrorCode::$variant => $code, )* }
            }

            /// One line saying what the condition is.
            pub fn summary(self) -> &'static str {
                match self { $( ErrorCode::$variant => $summary, )* }
            }

            /// What the user should do about it.
            pub fn fixup(self) -> &'static str {
                match self { $( ErrorCode::$variant => $fixup, )* }
            }
        }
    };
}

error_codes! {
    PathNotFound => "PCHRONICLE_PATH_NOT_FOUND",
        "the path does not exist, is or passes through a symlink (symlinks are ignored), is pchronicle's hidden state, or lies inside a dataset leaf",
        "Check the spelling with `ls`; name the real directory instead of a symlink; a dataset leaf is opened as a whole (`pchronicle stats LEAF`), never below it.";
    PathInvalid => "PCHRONICLE_PATH_INVALID",
        "the path is not inside the warehouse (it is absolute or climbs out with `..`)",
        "Pass a path below the warehouse root, without `..` components.";
    Io => "PCHRONICLE_IO",
        "reading or writing a file failed (permissions, a vanished file, a device error)",
        "Check that the user running pchronicle can read the path (`ls -l`, `namei -l PATH`) and that the filesystem is healthy, then retry.";
    NameNotUtf8 => "PCHRONICLE_NAME_NOT_UTF8",
        "an entry name is not valid UTF-8, so it cannot appear in JSON output; it was skipped",
        "Rename the entry to a UTF-8 name (for example with `mv -- \"$(printf 'bad\\xff')\" fixed`), then list again.";
    BoundReached => "PCHRONICLE_BOUND_REACHED",
        "a traversal bound (max_entries per directory, max_files per open, or the bound of one object-store listing) was reached; the result is truncated",
        "Open a narrower path, or raise the bound with `--max-entries N` / `--max-files N`; a remote directory holding more keys than one listing reads (the message says its bound) is shown in part: spread its keys over more prefixes.";
    ManifestUnreadable => "PCHRONICLE_MANIFEST_UNREADABLE",
        "chronicle.manifest exists but could not be read; classification fell back to the physical markers",
        "Fix the file's permissions (`chmod a+r chronicle.manifest`) or remove it and let the store rewrite it.";
    ManifestParse => "PCHRONICLE_MANIFEST_PARSE",
        "chronicle.manifest is not valid UTF-8 TOML, or a field has the wrong type; classification fell back to the physical markers",
        "Correct the TOML (see docs/manifest.md) or delete the file; a leaf store rewrites a missing manifest on the next read unless repairs are disabled.";
    ManifestVersion => "PCHRONICLE_MANIFEST_VERSION",
        "chronicle.manifest has a schema_version this pchronicle does not support (only 1 is); classification fell back to the physical markers",
        "Upgrade pchronicle if the manifest was written by a newer version; otherwise set `schema_version = 1`.";
    ManifestKind => "PCHRONICLE_MANIFEST_KIND",
        "chronicle.manifest has a missing or unknown `kind` (it must be \"leaf\" or \"branch\"); classification fell back to the physical markers",
        "Set `kind = \"leaf\"` for a dataset root or `kind = \"branch\"` for a directory that only nests datasets.";
    ManifestFormatMissing => "PCHRONICLE_MANIFEST_FORMAT_MISSING",
        "a leaf chronicle.manifest has no `format`; classification fell back to the physical markers",
        "Add `format = \"compact-jsonl/v1\"` or `format = \"storyline/v1\"` (whichever the leaf is), or delete the manifest so the store rewrites it.";
    ManifestStale => "PCHRONICLE_MANIFEST_STALE",
        "a leaf's manifest fingerprint does not match its physical revision, and repairs are disabled; stats were computed from the data",
        "Run `pchronicle stats PATH` without `--no-repair` (or mount without `--no-repair`) to rewrite the manifest.";
    ManifestWrite => "PCHRONICLE_MANIFEST_WRITE",
        "writing a leaf's chronicle.manifest failed; readers fell back to the physical data",
        "Make the leaf directory writable for the user running pchronicle, or run with `--no-repair` to stop trying.";
    FormatUnsupported => "PCHRONICLE_FORMAT_UNSUPPORTED",
        "a leaf declares a format this pchronicle cannot open; its manifest stats are reported as they are, unverified",
        "Upgrade pchronicle to a version that reads this format; until then the counts shown come only from the manifest.";
    StorylineCurrentInvalid => "PCHRONICLE_STORYLINE_CURRENT_INVALID",
        "a storyline leaf's CURRENT file is empty, unreadable, or names an invalid generation",
        "Write the name of an existing directory under `generations/` as the first line of CURRENT.";
    StorylineGenerationMissing => "PCHRONICLE_STORYLINE_GENERATION_MISSING",
        "the generation that a storyline leaf's CURRENT names does not exist under generations/",
        "Restore `generations/<name>/`, or point CURRENT at a generation that exists.";
    RecordFileUnreadable => "PCHRONICLE_RECORD_FILE_UNREADABLE",
        "a record file could not be read; it was counted as unreadable and left out of the totals",
        "Check the file's permissions and that it still exists, then read the stats again.";
    Lance => "PCHRONICLE_LANCE",
        "a Lance operation (opening, scanning or writing a dataset) failed",
        "Check that the directory is a Lance dataset written by a compatible Lance (see docs/lance.md) and is readable; the message names the Lance error.";
    NotCompactJsonl => "PCHRONICLE_NOT_COMPACT_JSONL",
        "the Lance dataset does not carry the schema metadata pchronicle.format = compact-jsonl/v1",
        "Only datasets written by `pchronicle import` (or with that schema metadata) are compact-jsonl leaves; import the records with `pchronicle import SOURCE DEST`.";
    ImportSource => "PCHRONICLE_IMPORT_SOURCE",
        "the import source holds no record files, is not a record file, or could not be read",
        "Name a .jsonl, .ndjson, .jsonseq or .json file, or a directory holding them; JSON documents over 256 MiB must be converted to JSON Lines first.";
    ImportDestinationExists => "PCHRONICLE_IMPORT_DESTINATION_EXISTS",
        "`pchronicle import --mode create` was pointed at a directory that already holds a dataset",
        "Use `--mode append` to add the records, `--mode overwrite` to replace them, or pick a new destination.";
    ImportDestinationMissing => "PCHRONICLE_IMPORT_DESTINATION_MISSING",
        "`pchronicle import --mode append` was pointed at a directory without a dataset",
        "Create the leaf first with `pchronicle import SOURCE DEST` (mode create), or check the destination path.";
    ImportManifest => "PCHRONICLE_IMPORT_MANIFEST",
        "the import wrote its Lance version but could not write the leaf's chronicle.manifest, so the import failed",
        "Make the destination writable, then run `pchronicle stats DEST` to rewrite the manifest (or import again with `--mode overwrite`).";
    DemoTargetNotEmpty => "PCHRONICLE_DEMO_TARGET_NOT_EMPTY",
        "the directory given to `pchronicle demo` exists and is not empty",
        "Name a new or empty directory, e.g. `pchronicle demo /tmp/pchronicle-demo-$$`.";
    MountPointMissing => "PCHRONICLE_MOUNT_POINT_MISSING",
        "the mount point does not exist or is not a directory",
        "Create an empty directory for the mount (`mkdir -p MNT`) and mount again.";
    MountPointNotEmpty => "PCHRONICLE_MOUNT_POINT_NOT_EMPTY",
        "the mount point is not empty; mounting over it would hide its files",
        "Name an empty directory (`mkdir -p /tmp/wh-mnt`), or move the files out of the way first.";
    MountPointInUse => "PCHRONICLE_MOUNT_POINT_IN_USE",
        "something is already mounted at the mount point and answering",
        "Unmount it first (`pchronicle umount MNT` for a pchronicle mount, `umount MNT` otherwise), or pick another directory.";
    MountPointInsideWarehouse => "PCHRONICLE_MOUNT_POINT_INSIDE_WAREHOUSE",
        "the mount point lies inside the warehouse it would show, so the mount would contain itself",
        "Mount onto a directory outside the warehouse, e.g. `pchronicle mount WAREHOUSE /tmp/wh-mnt`.";
    MountPointSymlink => "PCHRONICLE_MOUNT_POINT_SYMLINK",
        "the mount point is a symlink; its last name is never followed, so that whoever can write the directory holding it cannot redirect the mount (or an unmount) elsewhere",
        "Name the directory itself (`readlink -f MNT` shows where the link leads, if you trust it), or replace the link with an empty directory.";
    MountOptionInvalid => "PCHRONICLE_MOUNT_OPTION_INVALID",
        "a `-o` mount option is unknown or cannot be honoured (the mount is always read-only)",
        "Use only the options `pchronicle mount --help` lists (e.g. `-o allow_other,noatime`); drop `rw`.";
    MountFailed => "PCHRONICLE_MOUNT_FAILED",
        "the kernel refused the FUSE mount, or the daemon stopped before the mount answered",
        "Check that /dev/fuse exists and is usable (`ls -l /dev/fuse`; load it with `modprobe fuse`), that you are root or fusermount3 is installed (`apt-get install fuse3`), and read the daemon's log (`--log FILE`).";
    NotMounted => "PCHRONICLE_NOT_MOUNTED",
        "the path is not the root of a pchronicle mount",
        "Name the directory that was given to `pchronicle mount` (see `grep pchronicle /proc/self/mounts`).";
    UnmountFailed => "PCHRONICLE_UNMOUNT_FAILED",
        "the kernel refused to unmount (the mount is busy, or permission was denied)",
        "Close shells and programs using the mount (`fuser -vm MNT`), then retry; `pchronicle umount --lazy MNT` detaches it now and finishes when it is no longer used.";
    SessionInvalid => "PCHRONICLE_SESSION_INVALID",
        "a session id given to `pchronicle append` is empty, longer than 200 bytes, starts with a dot, or contains `/`, NUL or a control character",
        "Pass the agent's session id as it is (e.g. `--session 019a2f-claude`); dots are fine, slashes are not.";
    RecordInvalid => "PCHRONICLE_RECORD_INVALID",
        "a record given to `pchronicle append` is not exactly one JSON value on one line; nothing was written",
        "Check the record with `jq -c . <<< 'RECORD'`, which also puts it on one line, and append again.";
    IndexStale => "PCHRONICLE_INDEX_STALE",
        "a sidecar index no longer describes its record file (the size changed, or the content changed under the same size)",
        "Rebuild it with `pchronicle index build FILE --key a,b` (the message names the exact command).";
    IndexMissing => "PCHRONICLE_INDEX_MISSING",
        "there is no sidecar index over that key for the record file",
        "Build it with `pchronicle index build FILE --key a,b`, or list the existing ones with `pchronicle index list FILE`.";
    IndexCorrupt => "PCHRONICLE_INDEX_CORRUPT",
        "a sidecar index file is damaged or truncated (bad magic, version, offsets or lengths)",
        "Rebuild it with `pchronicle index build FILE --key a,b`; the corrupt `.idx` file is replaced atomically.";
    IndexKeyUnkeyable => "PCHRONICLE_INDEX_KEY_UNKEYABLE",
        "a key field holds a value that cannot be a key (an array, an object, a fraction, a number beyond i64) or changes type between records",
        "Index on fields holding strings, integers or booleans only; records lacking the field or holding null are skipped, not refused.";
    IndexCohortUnsupported => "PCHRONICLE_INDEX_COHORT_UNSUPPORTED",
        "the file cannot be indexed: only .jsonl, .ndjson and .jsonseq record files (with records under 4 GiB) can",
        "Convert a .json document to JSON Lines first (`jq -c '.[]' FILE.json > FILE.jsonl`), then build the index over that.";
    IndexManifestInvalid => "PCHRONICLE_INDEX_MANIFEST_INVALID",
        "a record file's FILE.indexes.json is not a valid index manifest (malformed JSON, unknown fields, another schema)",
        "Move FILE.indexes.json aside and look at it: it may name indexes whose keys only it records. Then `pchronicle index list FILE` finds the index files by name, and the next `pchronicle index build` writes a new manifest (a build refuses to replace a malformed one).";
    IndexManifestStale => "PCHRONICLE_INDEX_MANIFEST_STALE",
        "FILE.indexes.json names an index file that no longer exists",
        "Rebuild that index with `pchronicle index build FILE --key a,b`, or forget it with `pchronicle index drop FILE --key a,b` (the message names the key).";
    LookupKeyMismatch => "PCHRONICLE_LOOKUP_KEY_MISMATCH",
        "the key or values given do not match the index: other fields, another order, a partial key, a missing value, or a value of the wrong type",
        "Give the full key in the index's order, one value per field: `--key a=x --key b=y`, or `--key a,b --value x --value y` (`pchronicle index list FILE` shows the keys and their types).";
    CountCacheNewer => "PCHRONICLE_COUNT_CACHE_NEWER",
        "the persisted count cache was written by a newer pchronicle (a higher schema); it is left untouched",
        "Upgrade pchronicle, or mount with `--cache-file PATH` to keep this version's cache elsewhere (or `--no-cache` to run without one).";
    MetadataTooLarge => "PCHRONICLE_METADATA_TOO_LARGE",
        "a metadata file (chronicle.manifest, CURRENT, indexes.json, the count cache) is larger than pchronicle reads; it was treated as unreadable",
        "Look at the file: a real one is a few kilobytes (the limits are in docs/security.md). Replace it with a valid one or remove it.";
    NotRegularFile => "PCHRONICLE_NOT_REGULAR_FILE",
        "an entry pchronicle would read is not a regular file (a symlink, a FIFO, a socket or a device); it was not opened",
        "Replace the entry with a regular file; pchronicle never follows symlinks or reads special files below the warehouse root.";
    ManifestKept => "PCHRONICLE_MANIFEST_KEPT",
        "a leaf's chronicle.manifest cannot be understood by this pchronicle (it does not parse, has a newer schema_version, or says another kind), so it is never rewritten; the leaf was counted from its data",
        "Fix the manifest by hand (the warning before this one says what is wrong), upgrade pchronicle if a newer one wrote it, or delete it so that it is rewritten.";
    StateDirUnsafe => "PCHRONICLE_STATE_DIR_UNSAFE",
        "the warehouse's .pchronicle/ directory is a symlink, is not owned by the user running pchronicle, or is writable by others, so pchronicle keeps its state elsewhere",
        "As the user that runs pchronicle: `chown USER WAREHOUSE/.pchronicle && chmod go-w WAREHOUSE/.pchronicle` (or remove it); until then state lives in the cache directory the message names.";
    CountCacheForeign => "PCHRONICLE_COUNT_CACHE_FOREIGN",
        "the count-cache path holds a file that is not a pchronicle count cache (or is not a regular file); it is never overwritten",
        "Point `--cache-file` at a new path, or move the file away if it is not needed; `--no-cache` runs without a cache.";
    RequestFailed => "PCHRONICLE_REQUEST_FAILED",
        "a filesystem request failed inside the daemon (a bug, or a render past its time budget); it was answered with EIO and the daemon kept serving",
        "Retry the read; if it keeps failing, run the same path through `pchronicle stats PATH` to see the underlying error, and report the log line.";
    AnswerLate => "PCHRONICLE_ANSWER_LATE",
        "an answer of the mount (a render of `.stats`/`.sources`, a count, a read of `.records` or of a remote file) was not ready within its budget (`--render-timeout`); the request was answered with EIO, and the work it started goes on and is kept for the next reader",
        "Read it again in a moment: what was rendered or counted meanwhile is kept. For a tree that really takes longer, raise `--render-timeout`; `pchronicle stats PATH` on the warehouse itself shows how long the answer takes.";
    Busy => "PCHRONICLE_BUSY",
        "every worker making slow answers (renders, counts, `.records`, remote reads) was busy and the queue waiting for them full; the request was answered with EAGAIN at once, so lookups, listings and reads of files elsewhere kept being answered",
        "Retry in a moment. If it happens under normal load, raise `--workers`; the log's metrics (`--log-metrics`) show how long answers take.";
    BeingCounted => "PCHRONICLE_BEING_COUNTED",
        "the record count asked for (the `user.pchronicle.record_count` attribute) belongs to a large record file still being counted in the background; answered with EAGAIN instead of waiting",
        "Ask again later: `.stats` lists the files still being counted (`counting`), and the count is kept once made (across restarts too).";
    HandleLimit => "PCHRONICLE_HANDLE_LIMIT",
        "one user holds as many open files and directories of the mount as one user may (`--max-handles-per-user`), or the daemon's own descriptors are nearly all in use; the open was refused with EMFILE (ENFILE for the daemon's limit) so other users and the daemon itself keep working",
        "Close files you no longer need (`ls -l /proc/PID/fd` of your processes shows what is open); the operator can raise `--max-handles-per-user` or the daemon's descriptor limit (`LimitNOFILE=` in its unit).";
    LanceNotBuilt => "PCHRONICLE_LANCE_NOT_BUILT",
        "this pchronicle was built without the compact-jsonl feature (Lance, and with it DataFusion), so it cannot open, count, read or write a compact-jsonl dataset, nor run SQL",
        "Use a build with default features (`cargo build --release`); a build without them reads compact-jsonl leaves only through their manifests.";
    FilterInvalid => "PCHRONICLE_FILTER_INVALID",
        "a record filter could not be read: `--where` needs KEY=VALUE, `--since`/`--until` need RFC 3339 times, `--file` needs a glob",
        "Write filters as `--where session=abc`, `--since 2026-01-01T00:00:00Z`, `--file 'team/**/*.jsonl'`; see `pchronicle cat --help`.";
    QueryInvalid => "PCHRONICLE_QUERY_INVALID",
        "the SQL of `pchronicle query` could not be parsed or planned (a syntax error, an unknown table, column or function)",
        "Correct the SQL at the position shown; the tables are `records` and `sources` (`pchronicle query PATH 'SELECT * FROM records LIMIT 1'` shows the columns).";
    QueryFailed => "PCHRONICLE_QUERY_FAILED",
        "a query was planned but failed while it ran (a record source could not be read, or a function failed on a value)",
        "Read the cause in the message; `pchronicle stats PATH` shows whether every source can be read, and `--where`/`--file` leave out a broken one.";
    UnknownCode => "PCHRONICLE_UNKNOWN_CODE",
        "`pchronicle errors CODE` was given a code that does not exist",
        "Run `pchronicle errors` without an argument to list every code.";
    PassthroughRefused => "PCHRONICLE_PASSTHROUGH_REFUSED",
        "the kernel refused FUSE passthrough for this mount (a kernel without it, or a daemon not allowed to register files); the daemon reads every warehouse file itself, correctly but slower (a warning, logged once)",
        "Nothing to fix for correctness. For kernel-speed reads run the daemon as root on Linux 6.9 or newer built with CONFIG_FUSE_PASSTHROUGH; pass `--no-passthrough` to silence this.";
    MountHelperUsage => "PCHRONICLE_MOUNT_HELPER_USAGE",
        "called as a mount helper (`mount -t fuse.pchronicle`, an fstab line) with arguments it cannot use: not exactly SOURCE and MOUNTPOINT, an unknown flag, another filesystem type or a namespace (`-N`)",
        "Call it as `mount -t fuse.pchronicle WAREHOUSE MOUNTPOINT -o OPTIONS`, or put `WAREHOUSE MOUNTPOINT fuse.pchronicle OPTIONS 0 0` in /etc/fstab (see docs/operations.md).";
    RefreshFailed => "PCHRONICLE_REFRESH_FAILED",
        "a running mount refused `pchronicle refresh` or could not finish it: the caller is neither root nor the user the daemon runs as, the path cannot be named in the mount, or the daemon is older than the refresh request",
        "Run it as root or as the user that mounted, name a path relative to the mount point (`pchronicle refresh MNT team/runs`), and remount with this pchronicle if the daemon predates it; the TTLs still bring every change within their time.";
    RemoteUnavailable => "PCHRONICLE_REMOTE_UNAVAILABLE",
        "the object store holding an `s3://` warehouse could not be reached or kept failing (connection refused, timeouts, 5xx answers after the retries, credentials refused, a body cut short); an answer built while one of its own requests failed (a listing, a walk for `.stats`) fails whole rather than show part of the tree, and a mount answers it with EIO and keeps serving (an object the store refuses to read, 403 or 400, is no such failure: that object is unreadable, PCHRONICLE_IO)",
        "Check the endpoint and credentials (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_PROFILE` or `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`; see docs/remote.md) and that the server answers; a mount recovers by itself once the store does.";
    RemoteReadOnly => "PCHRONICLE_REMOTE_READ_ONLY",
        "an `s3://` warehouse is read only: `append`, `import`, `index build`, `index drop` and manifest repairs never write to object storage",
        "Write into a local warehouse and upload it with your object-storage tool (`aws s3 sync`); read commands, `query` and `mount` work on `s3://` as they are.";
    RemoteLocationInvalid => "PCHRONICLE_REMOTE_LOCATION",
        "an `s3://` location could not be read: no bucket, an empty or `.`/`..` path component, or a build without the `remote` feature",
        "Write it as `s3://BUCKET/PREFIX` (PREFIX may be empty or have several components), or use a build with default features.";
    QueryRefused => "PCHRONICLE_QUERY_REFUSED",
        "a query that would define, change or write something was refused: `query` and `POST /api/query` run only statements that read (SELECT, WITH, EXPLAIN), never DDL, DML, COPY or SET",
        "Write the question as a SELECT (`WITH … SELECT` for steps); to export results, redirect `pchronicle query PATH SQL --json` or `--csv` to a file.";
    QueryMemory => "PCHRONICLE_QUERY_MEMORY",
        "a query of `POST /api/query` needed more memory than the server lets one query hold (`serve --query-memory-mib`): a sort, a grouping or a join over more rows than fit, or one function's result over a batch of rows (`repeat`, `lpad`, … past a quarter of that bound)",
        "Narrow it (`WHERE`, the filters, a smaller `path`), group by fewer values or add a `LIMIT` under `ORDER BY`; run it with `pchronicle query` (no such bound), or serve with a larger `--query-memory-mib`.";
    TagInvalid => "PCHRONICLE_TAG_INVALID",
        "a tag name given to `pchronicle tag` is not a plain word: tag names are letters, digits, `.`, `-` and `_`, at most 100 bytes, neither starting nor ending with `.`, without `..` (a name becomes a file name, and a name under a leaf's `.tags/`)",
        "Pick a name such as `trained-2026-11-30` or `eval.v2`.";
    TagExists => "PCHRONICLE_TAG_EXISTS",
        "`pchronicle tag LEAF NAME` found a tag of that name on the leaf already; a tag is never moved silently",
        "Pick another name, or delete the old tag first (`pchronicle tag LEAF --delete NAME`); `pchronicle tag LEAF --list` shows the leaf's tags.";
    SyncBusy => "PCHRONICLE_SYNC_BUSY",
        "another `pchronicle sync` of the same leaf is running; two syncs of one leaf never run at once",
        "Wait for the other sync to end (with `--every`, it runs again by itself), then sync again.";
    SyncChanged => "PCHRONICLE_SYNC_CHANGED",
        "a source file was replaced or cut short while `pchronicle sync` read it, so the rows and the digest it read may disagree; nothing was published",
        "Sync again (with `--every`, the next turn does); the file is then taken as it is.";
    SyncState => "PCHRONICLE_SYNC_STATE",
        "the leaf's newest version carries a sync state this pchronicle cannot read (damaged, or written by a newer pchronicle)",
        "Upgrade pchronicle; or rebuild the leaf from its source with `pchronicle import SOURCE DEST --mode overwrite`, after which `sync` starts afresh.";
    TagNotFound => "PCHRONICLE_TAG_NOT_FOUND",
        "the leaf has no tag of the name given",
        "`pchronicle tag LEAF --list` shows the leaf's tags.";
    VersionNotFound => "PCHRONICLE_VERSION_NOT_FOUND",
        "a compact-jsonl leaf does not keep the version asked for: it was never committed, or Lance cleaned it up",
        "The message lists the versions the leaf keeps; name one of them.";
    AsOfApproximate => "PCHRONICLE_AS_OF_APPROXIMATE",
        "a leaf was read `--as-of` a time at a revision judged from file times: a storyline leaf records no time at which `CURRENT` moved, so the generation shown is the newest whose directory was last changed by then",
        "Nothing to mend for the read; to read an exact revision, name it with `--version NAME` (`ls LEAF/.versions` lists them).";
    CursorInvalid => "PCHRONICLE_CURSOR_INVALID",
        "a records cursor (`after=` of `GET /api/records`) is not one this server handed out for this path and these filters (edited, made up, from before the server restarted), or names a source that is no longer where it was (the warehouse changed under the paging)",
        "Start the paging again without `after=`; a cursor is only valid for the path and filters it was handed out with, while the server that handed it out runs.";
    RunNotFound => "PCHRONICLE_RUN_NOT_FOUND",
        "a run named to be compared (`a=` or `b=` of `GET /api/compare`) is not one of the runs of the path: a name cut or mistyped, or a run that is no longer there",
        "Name runs as `/api/runs?path=PATH` (or `pchronicle runs PATH`) gives them, in its `run` field, under the same path.";
    ServeUnauthorized => "PCHRONICLE_SERVE_UNAUTHORIZED",
        "an API request to `pchronicle serve` came without its token (no `Authorization: Bearer` header, no `token=` parameter), or with another one",
        "Open the URL `pchronicle serve` printed (its `#token=` lets the pages in), or send `Authorization: Bearer TOKEN`; the token is the one given with `--token` or printed at start.";
    ServeRequestInvalid => "PCHRONICLE_SERVE_REQUEST_INVALID",
        "a request to `pchronicle serve` could not be answered as asked: an unknown endpoint or parameter, a `Host` header that names neither the listening address nor localhost (DNS rebinding), a body too large, or a value out of range",
        "Use the endpoints and parameters of docs/web.md; reach the server by the address it printed (or localhost), and keep request bodies under 64 KiB.";
    ServeListen => "PCHRONICLE_SERVE_LISTEN",
        "`pchronicle serve` could not listen where it was asked: the address is taken or not local, or it is not a loopback address and no token is required (`--no-token`)",
        "Pick a free `--listen ADDR:PORT` (port 0 picks one); serving on a non-loopback address needs a token (leave out `--no-token`).";
    WorkersInvalid => "PCHRONICLE_WORKERS_INVALID",
        "`--workers` (or PCHRONICLE_WORKERS) could not be read: an item is not HOST:PORT or http://HOST:PORT, the list is empty, or the worker token holds characters a header cannot",
        "Name workers as `--workers 10.0.0.5:7070,10.0.0.6:7070` (the addresses their `pchronicle worker --listen` printed), and give their token with PCHRONICLE_WORKER_TOKEN.";
    WorkerUnavailable => "PCHRONICLE_WORKER_UNAVAILABLE",
        "a worker named by `--workers` did not answer before the read started (nothing listens there, it is unreachable, or it did not answer within 5 s); nothing was read",
        "Start it (`pchronicle worker --listen ADDR:PORT --warehouse ROOT`) or fix the address; with `--workers-optional` the workers that answer take its share.";
    WorkerVersion => "PCHRONICLE_WORKER_VERSION",
        "a worker is of another pchronicle build than the coordinator (both print theirs with `--version`), so the plans they exchange may not mean the same; nothing was run",
        "Run the same pchronicle binary on every machine: install the coordinator's build on the worker and restart it.";
    WorkerToken => "PCHRONICLE_WORKER_TOKEN",
        "a worker refused a request because it did not carry the worker's token (`Authorization: Bearer`), or carried another one; nothing of the request was read",
        "Give the coordinator the token the workers were started with: PCHRONICLE_WORKER_TOKEN=TOKEN (or `--worker-token`).";
    WorkerRoot => "PCHRONICLE_WORKER_ROOT",
        "a worker was asked to read a path outside the warehouse roots it serves (`--warehouse`), or a path that is not a plain relative path below one (`..`, an absolute path); it refused before reading anything",
        "Start the worker with the warehouse the coordinator reads (`--warehouse ROOT`, the same path or `s3://` location on every machine), or read a path below one it serves.";
    WorkerRefused => "PCHRONICLE_WORKER_REFUSED",
        "a worker refused to start or to take a part of a plan: it serves no warehouse, or the part it was sent names sources it does not list",
        "Start the worker with at least one `--warehouse ROOT`; a malformed part points at a coordinator of another build (see PCHRONICLE_WORKER_VERSION).";
    WorkerLost => "PCHRONICLE_WORKER_LOST",
        "a worker stopped answering while a distributed read ran (it was stopped or killed, its machine or the network went away); the read failed rather than give a result missing that worker's share",
        "Run the command again: the workers that answer are used (with `--workers-optional`, a dead worker is left out); `journalctl -u pchronicle-worker` on the worker's machine says why it stopped.";
}

impl ErrorCode {
    /// The first code named in `text` (a message carried from another
    /// process, `error[PCHRONICLE_…]: …`).
    pub fn parse_in(text: &str) -> Option<ErrorCode> {
        let at = text.find("PCHRONICLE_")?;
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        ErrorCode::parse(&name).or_else(|| ErrorCode::parse_in(&text[at + 1..]))
    }

    /// Looks a code up by its stable string (case-insensitive).
    pub fn parse(text: &str) -> Option<ErrorCode> {
        ErrorCode::ALL
            .iter()
            .copied()
            .find(|code| code.as_str().eq_ignore_ascii_case(text.trim()))
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A failure with its stable code, the path it concerns and a message.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    pub code: ErrorCode,
    pub path: Option<PathBuf>,
    pub message: String,
    /// The operating system's error number, when the failure was a system
    /// call's (the FUSE adapter answers with it).
    pub os_error: Option<i32>,
}

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Error {
            code,
            path: None,
            message: message.into(),
            os_error: None,
        }
    }

    pub fn at(code: ErrorCode, path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        Error {
            code,
            path: Some(path.as_ref().to_path_buf()),
            message: message.into(),
            os_error: None,
        }
    }

    /// An I/O failure on `path`, classified: a missing file is
    /// `PathNotFound`, an entry refused for its type `NotRegularFile`, a
    /// remote store that could not be reached its own code, anything else
    /// (an object the store refused to read included) `Io`.
    pub fn io(path: impl AsRef<Path>, err: &std::io::Error) -> Self {
        let remote = err
            .get_ref()
            .and_then(|e| e.downcast_ref::<RemoteFailure>());
        let not_regular = crate::warehouse::is_not_regular(err);
        let code = match (err.kind(), remote) {
            (std::io::ErrorKind::NotFound, _) => ErrorCode::PathNotFound,
            _ if not_regular => ErrorCode::NotRegularFile,
            (_, Some(RemoteFailure::ReadOnly)) => ErrorCode::RemoteReadOnly,
            (_, Some(RemoteFailure::Unavailable(_))) => ErrorCode::RemoteUnavailable,
            _ => ErrorCode::Io,
        };
        let mut error = Error::at(code, path, err.to_string());
        error.os_error = os_error(err);
        error
    }

    /// A coded error about reading `path` that keeps `err`'s system error
    /// number (which the FUSE adapter answers with).
    pub fn reading(code: ErrorCode, path: impl AsRef<Path>, err: &std::io::Error) -> Self {
        let mut error = Error::at(code, path, err.to_string());
        error.os_error = os_error(err);
        error
    }

    /// `error[CODE]: path: message` — the CLI's one-line form.
    pub fn render(&self) -> String {
        match &self.path {
            Some(path) => format!("error[{}]: {}: {}", self.code, path.display(), self.message),
            None => format!("error[{}]: {}", self.code, self.message),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The system error number `err` stands for: its own, or `EACCES` for an
/// object the store refused to read.
/// `text` without the source locations a dependency put in it
/// (`, /path/to/crate-1.2.3/src/file.rs:10:5`): they name the machine that
/// built the binary and say nothing to its user.
pub fn without_source_locations(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, word) in text.split(' ').enumerate() {
        if is_source_location(word) {
            // The separator before it goes with it.
            let trimmed = out.trim_end_matches([',', ' ']).len();
            out.truncate(trimmed);
            continue;
        }
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// `FILE.rs:LINE:COLUMN`, with whatever punctuation around it.
fn is_source_location(word: &str) -> bool {
    let word = word.trim_matches(|c: char| matches!(c, ',' | ';' | '(' | ')' | '[' | ']'));
    let mut parts = word.rsplitn(3, ':');
    let (Some(column), Some(line), Some(file)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    number(column) && number(line) && file.ends_with(".rs")
}

pub fn os_error(err: &std::io::Error) -> Option<i32> {
    let denied = matches!(
        err.get_ref()
            .and_then(|e| e.downcast_ref::<RemoteFailure>()),
        Some(RemoteFailure::Denied(_))
    );
    match err.raw_os_error() {
        None if denied => Some(libc::EACCES),
        raw => raw,
    }
}

/// Whether `err` says the object store could not be reached (see
/// [`RemoteFailure::Unavailable`]): nothing about the entry it was for.
pub fn is_remote_failure(err: &std::io::Error) -> bool {
    matches!(
        err.get_ref()
            .and_then(|e| e.downcast_ref::<RemoteFailure>()),
        Some(RemoteFailure::Unavailable(_))
    )
}

/// An object store's failure carried through `std::io::Error` (which the
/// warehouse surface speaks), so that [`Error::io`] can give it its code.
#[derive(Debug, thiserror::Error)]
pub enum RemoteFailure {
    /// The store could not be reached or kept failing.
    #[error("{0}")]
    Unavailable(String),
    /// The store answered, but refused to read one object (`403`, `400`:
    /// an archived storage class, SSE-C, a missing KMS grant, a policy):
    /// that object is unreadable, like a local file without permission;
    /// the store is not at fault.
    #[error("{0}")]
    Denied(String),
    /// A write was asked of a remote warehouse.
    #[error("an s3:// warehouse is read only")]
    ReadOnly,
}

impl RemoteFailure {
    /// The store could not be reached about `what`: counted for the answer
    /// being built (see [`FailureWatch`]) and given as the `io::Error` a
    /// warehouse operation returns.
    pub fn unavailable(what: String) -> std::io::Error {
        answer::note_failure();
        RemoteFailure::Unavailable(what).into_io()
    }

    /// The store refused to read one object: `PermissionDenied`, answered
    /// `EACCES`, and no failure of the store.
    pub fn denied(what: String) -> std::io::Error {
        RemoteFailure::Denied(what).into_io()
    }

    /// The failure as the `io::Error` a warehouse operation returns.
    pub fn into_io(self) -> std::io::Error {
        let kind = match self {
            RemoteFailure::Unavailable(_) => std::io::ErrorKind::Other,
            RemoteFailure::Denied(_) => std::io::ErrorKind::PermissionDenied,
            RemoteFailure::ReadOnly => std::io::ErrorKind::ReadOnlyFilesystem,
        };
        std::io::Error::new(kind, self)
    }
}

pub use answer::{Answer, FailureWatch};

/// Which object-store failures an answer met.
///
/// An answer (a listing, a walk for `.stats`, a classification) is built
/// on one thread; a failure of the store while it is built may show in it
/// only as a warning (a manifest that could not be read, a file whose
/// count is missing), so the answer is refused whole instead
/// ([`FailureWatch::failed`]). What counts is the failures of *this*
/// answer's own requests, not of the process: another reader's timeout, an
/// object another answer could not read, or another bucket's outage fail
/// nothing here. (An answer reads one warehouse, so one bucket.)
///
/// The answer a thread is building is kept in a thread-local; the remote
/// client carries it into the futures it runs for the answer and the
/// threads that read for it take it along ([`Answer::current`],
/// [`Answer::enter`]), so a failure met there is counted where it
/// belongs. A failure outside every answer (a plain read of a file) is
/// counted nowhere: it is returned to its caller, which has nothing whole
/// to refuse.
mod answer {
    use std::cell::RefCell;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    thread_local! {
        static CURRENT: RefCell<Option<Arc<AtomicU64>>> = const { RefCell::new(None) };
    }

    /// Counts a failure for the answer this thread is building, if any.
    pub(super) fn note_failure() {
        CURRENT.with(|current| {
            if let Some(failures) = &*current.borrow() {
                failures.fetch_add(1, Ordering::SeqCst);
            }
        });
    }

    /// The answer a thread is building, to be carried to another thread or
    /// a future that works for it.
    #[derive(Debug, Clone, Default)]
    pub struct Answer(Option<Arc<AtomicU64>>);

    impl Answer {
        /// The answer this thread is building (none, outside of one).
        pub fn current() -> Answer {
            Answer(CURRENT.with(|current| current.borrow().clone()))
        }

        /// Works for this answer on this thread until the guard is
        /// dropped: failures met meanwhile count for it.
        pub fn enter(&self) -> Entered {
            let before = CURRENT.with(|current| current.replace(self.0.clone()));
            Entered(before)
        }
    }

    /// Gives the thread back the answer it was building before
    /// [`Answer::enter`].
    #[derive(Debug)]
    pub struct Entered(Option<Arc<AtomicU64>>);

    impl Drop for Entered {
        fn drop(&mut self) {
            let before = self.0.take();
            CURRENT.with(|current| *current.borrow_mut() = before);
        }
    }

    /// Watches the answer being built from one moment: whether one of its
    /// requests failed since (never, for a watch of something local).
    /// Started outside of an answer, it begins one, which ends when the
    /// watch is dropped; started inside one, it watches that one.
    #[derive(Debug)]
    pub struct FailureWatch {
        watched: Option<(Arc<AtomicU64>, u64)>,
        /// The answer this watch began: dropped with the watch, it ends
        /// the answer.
        _began: Option<Entered>,
    }

    impl FailureWatch {
        /// Watches from now when `remote`; a local answer is never watched.
        pub fn start(remote: bool) -> FailureWatch {
            if !remote {
                return FailureWatch {
                    watched: None,
                    _began: None,
                };
            }
            match Answer::current().0 {
                Some(failures) => {
                    let at_start = failures.load(Ordering::SeqCst);
                    FailureWatch {
                        watched: Some((failures, at_start)),
                        _began: None,
                    }
                }
                None => {
                    let failures = Arc::new(AtomicU64::new(0));
                    let began = Answer(Some(Arc::clone(&failures))).enter();
                    FailureWatch {
                        watched: Some((failures, 0)),
                        _began: Some(began),
                    }
                }
            }
        }

        /// Whether a request of the answer failed since the watch started.
        pub fn failed(&self) -> bool {
            self.watched
                .as_ref()
                .is_some_and(|(failures, at_start)| failures.load(Ordering::SeqCst) != *at_start)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_failure_fails_the_answer_that_met_it_and_no_other() {
        let watch = FailureWatch::start(true);
        let inner = FailureWatch::start(true);
        // Another answer, on another thread, whose request fails.
        std::thread::spawn(|| {
            let other = FailureWatch::start(true);
            let _ = RemoteFailure::unavailable("elsewhere".into());
            assert!(other.failed());
        })
        .join()
        .unwrap();
        // A failure outside of any answer counts nowhere.
        std::thread::spawn(|| RemoteFailure::unavailable("a plain read".into()))
            .join()
            .unwrap();
        // An object the store refused to read is no failure of the store.
        let denied = RemoteFailure::denied("wh/a.jsonl: 403".into());
        assert_eq!(os_error(&denied), Some(libc::EACCES));
        assert_eq!(Error::io("a.jsonl", &denied).code, ErrorCode::Io);
        assert!(!watch.failed() && !inner.failed());
        // A thread that reads for this answer carries it along.
        let answer = Answer::current();
        std::thread::spawn(move || {
            let _in = answer.enter();
            let _ = RemoteFailure::unavailable("a read for the answer".into());
        })
        .join()
        .unwrap();
        assert!(watch.failed() && inner.failed());
        drop(inner);
        drop(watch);
        // The answer ended with the watch that began it.
        let after = FailureWatch::start(true);
        assert!(!after.failed());
        assert!(!FailureWatch::start(false).failed());
    }

    #[test]
    fn codes_are_unique_prefixed_and_have_fixups() {
        let mut seen = HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "duplicate {code}");
            assert!(code.as_str().starts_with("PCHRONICLE_"));
            assert!(!code.summary().is_empty());
            assert!(!code.fixup().is_empty());
        }
    }

    #[test]
    fn parse_round_trips_every_code() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(*code));
        }
        assert_eq!(ErrorCode::parse("pchronicle_io"), Some(ErrorCode::Io));
        assert_eq!(ErrorCode::parse("NOPE"), None);
    }
}

#[cfg(test)]
mod location_tests {
    use super::without_source_locations;

    #[test]
    fn source_locations_are_taken_out_of_messages() {
        assert_eq!(
            without_source_locations(
                "Dataset at path a was not found: not found, /home/ci/.cargo/registry/src/index/lance-14.0.2/src/dataset.rs:543:31"
            ),
            "Dataset at path a was not found: not found"
        );
        assert_eq!(
            without_source_locations("bad input (lance-io/src/x.rs:1:2) here"),
            "bad input here"
        );
        assert_eq!(
            without_source_locations("a: b.rs is a file"),
            "a: b.rs is a file"
        );
        assert_eq!(without_source_locations("time 10:20:30"), "time 10:20:30");
    }
}
