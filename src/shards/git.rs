//! What git says about a shard: the facts the rotation rule reads when a
//! record store lives inside a git work tree.
//!
//! Two branches of one checkout must never append to the same shard, and a
//! shard git already holds (staged or committed) must never grow again,
//! or merges conflict. So a writer continues its shard only while HEAD is
//! on the same branch and commit, HEAD's reflog has the same size (HEAD
//! did not move and come back), no `index.lock` exists, and git's index
//! does not hold the shard.
//!
//! Everything is read from git's own files, never by spawning git: the
//! `.git` directory or a linked worktree's `gitdir:` file and its common
//! directory, `HEAD`, loose refs and `packed-refs`, `logs/HEAD`, and the
//! index (through `gix-index`, which reads versions 2 to 4, split and
//! sparse indexes). Git is spawned only for a repository whose refs are in
//! a reftable.
//!
//! A `.git` that belongs to another user (unless pchronicle runs as root)
//! is not read, as git itself refuses such a repository.
//!
//! The index is the one large file. It is searched only when its identity
//! (device, inode, size, mtime) changed since the shard was last seen
//! outside it, or when it was written at or after the shard's last write;
//! staging or committing the shard always rewrites the index after that
//! write, so most appends pay one `stat` of it.

use std::cell::Cell;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

thread_local! {
    /// Bytes of git's files read by this thread (for tests and benchmarks).
    static BYTES_READ: Cell<u64> = const { Cell::new(0) };
}

/// How many bytes of git's files the calling thread has read so far.
pub fn bytes_read() -> u64 {
    BYTES_READ.with(Cell::get)
}

fn count_read(n: usize) {
    BYTES_READ.with(|c| c.set(c.get() + n as u64));
}

/// `HEAD`, a ref, a `gitdir:` or `commondir` file: a line, never more.
const SMALL_CAP: u64 = 4 << 10;
/// `packed-refs` of a very large repository stays well under this.
const PACKED_REFS_CAP: u64 = 256 << 20;
/// The largest index read; git itself refuses indexes of 4 GiB.
const INDEX_CAP: u64 = 2 << 30;
/// How deep a chain of symbolic refs is followed.
const SYMREF_DEPTH: usize = 5;

/// A git work tree holding a record store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    /// The work tree's top directory.
    pub work_tree: PathBuf,
    /// This work tree's git directory: `HEAD`, `logs/HEAD`, `index`.
    pub git_dir: PathBuf,
    /// The directory shared by linked worktrees: refs, `packed-refs`.
    pub common_dir: PathBuf,
    /// Refs are kept in a reftable (read by spawning git).
    pub reftable: bool,
    /// Why this repository's files are not read (then every fact is an
    /// error, and the rule seals).
    pub unusable: Option<String>,
}

/// What a file is, for telling whether it was replaced or rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileStamp {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
}

impl FileStamp {
    pub fn of(meta: &fs::Metadata) -> FileStamp {
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: crate::warehouse::mtime_ns(meta),
        }
    }
}

/// What a writer remembers of git with its shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitState {
    /// The branch HEAD is on (`refs/heads/main`); `None` when detached.
    pub branch: Option<String>,
    /// The commit HEAD names (hex); `None` on a branch with no commit yet.
    pub commit: Option<String>,
    /// The size of HEAD's reflog: bytes of `logs/HEAD` (entries of it for a
    /// reftable).
    pub reflog: u64,
    /// `ORIG_HEAD`, which every reset, rebase and merge rewrites (the one
    /// trace of HEAD moving and coming back when there is no reflog).
    pub orig_head: Option<FileStamp>,
    /// git's index as it was when the shard was last seen outside it
    /// (`None`: not seen yet, or there was no index).
    pub index: Option<FileStamp>,
}

/// Git as it is now, before an append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub branch: Option<String>,
    pub commit: Option<String>,
    pub reflog: u64,
    pub orig_head: Option<FileStamp>,
    /// `index.lock` exists: git is staging or committing right now.
    pub locked: bool,
    /// git's index, `None` when the repository has none yet.
    pub index: Option<FileStamp>,
}

impl Facts {
    /// Whether HEAD is on the branch and commit `state` saw.
    pub fn head_is(&self, state: &GitState) -> bool {
        self.branch == state.branch && self.commit == state.commit
    }

    /// Whether HEAD cannot have moved and come back since `state`: the
    /// reflog has the same size and `ORIG_HEAD` is the same file.
    pub fn stayed(&self, state: &GitState) -> bool {
        self.reflog == state.reflog && self.orig_head == state.orig_head
    }

    /// The state a writer keeps with a shard seen outside the index
    /// `index` (`None` when not searched).
    pub fn state(&self, index: Option<FileStamp>) -> GitState {
        GitState {
            branch: self.branch.clone(),
            commit: self.commit.clone(),
            reflog: self.reflog,
            orig_head: self.orig_head,
            index,
        }
    }
}

impl Repo {
    /// The git work tree `store` lives in, found as git finds it: the
    /// nearest directory at or above `store` holding `.git` (a directory,
    /// or a `gitdir:` file for a linked worktree or a submodule). `store`
    /// must be absolute and canonical. A `.git` that cannot be read, does
    /// not parse or belongs to another user is still the store's work
    /// tree, an unusable one: every fact about it is an error, so the rule
    /// seals rather than guess.
    pub fn discover(store: &Path) -> Option<Repo> {
        for dir in store.ancestors() {
            let dot = dir.join(".git");
            let meta = match fs::metadata(&dot) {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Some(Repo::unusable(dir, format!("{}: {e}", dot.display()))),
            };
            let inside = store.strip_prefix(dir).unwrap_or(Path::new(""));
            if inside.components().any(|c| c.as_os_str() == ".git") {
                // A store inside a git directory is no work tree's.
                return None;
            }
            let euid = rustix::process::geteuid();
            if meta.uid() != euid.as_raw() && !euid.is_root() {
                // git itself refuses such a repository (unless told it is
                // safe), and its files are another user's to make slow or
                // strange: trusted for nothing.
                return Some(Repo::unusable(
                    dir,
                    format!(
                        "{} belongs to uid {}, not to uid {} that appends",
                        dot.display(),
                        meta.uid(),
                        euid.as_raw()
                    ),
                ));
            }
            return Some(
                Repo::layout(dir, dot, &meta)
                    .unwrap_or_else(|e| Repo::unusable(dir, e.to_string())),
            );
        }
        None
    }

    /// The directories of the repository whose `.git` is `dot`.
    fn layout(dir: &Path, dot: PathBuf, meta: &fs::Metadata) -> io::Result<Repo> {
        let git_dir = if meta.is_dir() {
            dot
        } else {
            let text = read_small(&dot, SMALL_CAP)?;
            let target = text
                .strip_prefix("gitdir:")
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| invalid(&dot, "has no `gitdir:` line"))?;
            dir.join(target)
        };
        let common_dir = match read_small(&git_dir.join("commondir"), SMALL_CAP) {
            Ok(text) => git_dir.join(text.trim()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => git_dir.clone(),
            Err(e) => return Err(e),
        };
        let reftable = fs::metadata(common_dir.join("reftable")).is_ok_and(|m| m.is_dir());
        Ok(Repo {
            work_tree: dir.to_path_buf(),
            git_dir,
            common_dir,
            reftable,
            unusable: None,
        })
    }

    fn unusable(dir: &Path, why: String) -> Repo {
        Repo {
            work_tree: dir.to_path_buf(),
            git_dir: dir.join(".git"),
            common_dir: dir.join(".git"),
            reftable: false,
            unusable: Some(why),
        }
    }

    /// HEAD, its reflog, the index lock and the index's identity: a few
    /// small reads and `stat`s.
    pub fn facts(&self) -> io::Result<Facts> {
        if let Some(why) = &self.unusable {
            return Err(io::Error::other(why.clone()));
        }
        let (branch, commit, reflog) = if self.reftable {
            self.head_by_spawning()?
        } else {
            let (branch, commit) = self.head()?;
            let reflog = match fs::metadata(self.git_dir.join("logs/HEAD")) {
                Ok(meta) => meta.len(),
                Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
                Err(e) => return Err(e),
            };
            (branch, commit, reflog)
        };
        let locked = match fs::symlink_metadata(self.git_dir.join("index.lock")) {
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(e),
        };
        let stamp = |name: &str| match fs::metadata(self.git_dir.join(name)) {
            Ok(meta) => Ok(Some(FileStamp::of(&meta))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        };
        Ok(Facts {
            branch,
            commit,
            reflog,
            orig_head: stamp("ORIG_HEAD")?,
            locked,
            index: stamp("index")?,
        })
    }

    /// The branch HEAD is on and the commit it names, from `HEAD`, loose
    /// refs and `packed-refs`.
    fn head(&self) -> io::Result<(Option<String>, Option<String>)> {
        let head_path = self.git_dir.join("HEAD");
        let head = read_small(&head_path, SMALL_CAP)?;
        let head = head.trim();
        let Some(target) = head.strip_prefix("ref:") else {
            return Ok((None, Some(object_id(&head_path, head)?.to_string())));
        };
        let branch = target.trim().to_string();
        let commit = self.resolve(&branch, SYMREF_DEPTH)?;
        Ok((Some(branch), commit))
    }

    /// The commit `name` points to (`None` when the ref does not exist).
    fn resolve(&self, name: &str, depth: usize) -> io::Result<Option<String>> {
        let valid = name.starts_with("refs/")
            && !name
                .bytes()
                .any(|b| b == 0 || b.is_ascii_control() || b == b'\\')
            && name
                .split('/')
                .all(|part| !part.is_empty() && part != "." && part != "..");
        if !valid {
            return Err(invalid(&self.git_dir.join("HEAD"), "names an invalid ref"));
        }
        // Per-worktree refs live in the worktree's git directory, all the
        // others in the common one.
        let per_worktree = ["refs/worktree/", "refs/bisect/", "refs/rewritten/"]
            .iter()
            .any(|p| name.starts_with(p));
        let base = if per_worktree {
            &self.git_dir
        } else {
            &self.common_dir
        };
        let loose = base.join(name);
        match read_small(&loose, SMALL_CAP) {
            Ok(text) => {
                let text = text.trim();
                return match text.strip_prefix("ref:") {
                    Some(next) if depth > 0 => self.resolve(next.trim(), depth - 1),
                    Some(_) => Err(invalid(&loose, "is a symbolic ref chain too long")),
                    None => object_id(&loose, text).map(|id| Some(id.to_string())),
                };
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::IsADirectory
                ) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {}
            Err(e) => return Err(e),
        }
        let packed_path = self.common_dir.join("packed-refs");
        let packed = match read_small(&packed_path, PACKED_REFS_CAP) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        for line in packed.lines() {
            if line.starts_with('#') || line.starts_with('^') {
                continue;
            }
            if let Some((id, ref_name)) = line.split_once(' ')
                && ref_name == name
            {
                return object_id(&packed_path, id).map(|id| Some(id.to_string()));
            }
        }
        Ok(None)
    }

    /// HEAD of a reftable repository, asked of git itself.
    fn head_by_spawning(&self) -> io::Result<(Option<String>, Option<String>, u64)> {
        let branch = self.git(&["symbolic-ref", "-q", "HEAD"])?;
        let commit = self.git(&["rev-parse", "-q", "--verify", "HEAD"])?;
        let reflog = match commit {
            Some(_) => self
                .git(&["reflog", "show", "--format=%H", "HEAD"])?
                .map_or(0, |log| log.lines().count() as u64),
            None => 0,
        };
        Ok((branch, commit, reflog))
    }

    /// `git ARGS` in the work tree: its trimmed output, `None` when it
    /// exits 1 with nothing to say (a detached HEAD, an unborn branch).
    /// Any other failure (git missing, too old for reftables, refusing the
    /// repository) is an error.
    fn git(&self, args: &[&str]) -> io::Result<Option<String>> {
        let out = Command::new("git")
            .arg("-C")
            .arg(&self.work_tree)
            .args(args)
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE")
            .env_remove("GIT_COMMON_DIR")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        match out.status.code() {
            Some(0) => Ok(Some(text)),
            Some(1) if text.is_empty() => Ok(None),
            _ => Err(io::Error::other(format!(
                "`git {}` failed in {}",
                args.join(" "),
                self.work_tree.display()
            ))),
        }
    }

    /// Whether git's index holds `shard` (at any stage), or may: a shard
    /// below a sparse directory entry counts as held.
    pub fn index_holds(&self, shard: &Path) -> io::Result<bool> {
        if let Some(why) = &self.unusable {
            return Err(io::Error::other(why.clone()));
        }
        let rel = shard
            .strip_prefix(&self.work_tree)
            .map_err(|_| invalid(shard, "is not inside the work tree"))?;
        let rel = rel.as_os_str().as_bytes();
        let path = self.git_dir.join("index");
        let (mut file, meta) = match open_regular(&path) {
            Ok(opened) => opened,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        if meta.len() > INDEX_CAP {
            return Err(invalid(&path, "is larger than 2 GiB"));
        }
        let mut data = Vec::with_capacity(meta.len() as usize);
        (&mut file).take(INDEX_CAP).read_to_end(&mut data)?;
        count_read(data.len());
        let options = gix_index::decode::Options {
            thread_limit: Some(1),
            alloc_limit_bytes: Some(INDEX_CAP as usize),
            ..Default::default()
        };
        let mtime = filetime::FileTime::from_last_modification_time(&meta);
        let decode = |e: &dyn std::fmt::Display| invalid(&path, &format!("cannot be read: {e}"));
        // The configured hash first, then the other: a configuration this
        // reader misses costs a second decode, not a wrong answer.
        let (preferred, other) = self.object_hashes();
        let (state, kind) = match gix_index::State::from_bytes(&data, mtime, preferred, options) {
            Ok((state, _)) => (state, preferred),
            Err(first) => match gix_index::State::from_bytes(&data, mtime, other, options) {
                Ok((state, _)) => (state, other),
                Err(_) => return Err(decode(&first)),
            },
        };
        let split;
        let state = if state.link().is_some() {
            // A split index: gix-index merges in the shared index.
            split = gix_index::File::at(&path, kind, true, options).map_err(|e| decode(&e))?;
            &*split
        } else {
            &state
        };
        let entries = state.entries();
        let found = entries
            .binary_search_by(|e| {
                let p: &[u8] = e.path(state).as_ref();
                p.cmp(rel)
            })
            .is_ok();
        if found {
            return Ok(true);
        }
        let under_sparse = state.is_sparse()
            && entries.iter().any(|e| {
                let dir: &[u8] = e.path(state).as_ref();
                e.mode.is_sparse()
                    && rel.starts_with(dir)
                    && (dir.ends_with(b"/") || rel.get(dir.len()) == Some(&b'/'))
            });
        Ok(under_sparse)
    }

    /// The object hash the repository's configuration names (SHA-1 unless
    /// it says `objectFormat = sha256`), then the other one.
    fn object_hashes(&self) -> (gix_index::hash::Kind, gix_index::hash::Kind) {
        use gix_index::hash::Kind;
        let config =
            read_small(&self.common_dir.join("config"), SMALL_CAP * 64).unwrap_or_default();
        let sha256 = config.lines().any(|line| {
            let line: String = line.chars().filter(|c| !c.is_whitespace()).collect();
            line.eq_ignore_ascii_case("objectformat=sha256")
        });
        if sha256 {
            (Kind::Sha256, Kind::Sha1)
        } else {
            (Kind::Sha1, Kind::Sha256)
        }
    }
}

/// Opens `path` for reading without blocking on a FIFO or a device, and
/// only if it is a regular file.
fn open_regular(path: &Path) -> io::Result<(File, fs::Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(io::Error::from(io::ErrorKind::IsADirectory));
    }
    if !meta.is_file() {
        return Err(invalid(path, "is not a regular file"));
    }
    Ok((file, meta))
}

/// A small git file as text, at most `cap` bytes of it counted as read.
fn read_small(path: &Path, cap: u64) -> io::Result<String> {
    let (file, _) = open_regular(path)?;
    let mut bytes = Vec::new();
    file.take(cap + 1).read_to_end(&mut bytes)?;
    count_read(bytes.len());
    if bytes.len() as u64 > cap {
        return Err(invalid(
            path,
            "is larger than a git file of its kind can be",
        ));
    }
    String::from_utf8(bytes).map_err(|_| invalid(path, "is not UTF-8"))
}

/// `text` when it is a full hex object id (SHA-1 or SHA-256).
fn object_id<'a>(path: &Path, text: &'a str) -> io::Result<&'a str> {
    let hex = text.bytes().all(|b| b.is_ascii_hexdigit());
    if hex && (text.len() == 40 || text.len() == 64) {
        Ok(text)
    } else {
        Err(invalid(path, "does not hold an object id"))
    }
}

fn invalid(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{} {what}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    const A: &str = "0123456789abcdef0123456789abcdef01234567";
    const B: &str = "89abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn head_is_read_from_loose_and_packed_refs_and_linked_worktrees() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let git = root.join("repo/.git");
        write(&git.join("HEAD"), "ref: refs/heads/main\n");
        let store = root.join("repo/a/b");
        fs::create_dir_all(&store).unwrap();
        let repo = Repo::discover(&store).unwrap();
        assert_eq!(repo.work_tree, root.join("repo"));

        // Unborn, then packed, then loose (which wins).
        let facts = repo.facts().unwrap();
        assert_eq!(facts.branch.as_deref(), Some("refs/heads/main"));
        assert_eq!(
            (facts.commit, facts.reflog, facts.locked, facts.index),
            (None, 0, false, None)
        );
        write(
            &git.join("packed-refs"),
            &format!("# pack-refs\n{B} refs/heads/main\n^{A}\n"),
        );
        assert_eq!(repo.facts().unwrap().commit.as_deref(), Some(B));
        write(&git.join("refs/heads/main"), &format!("{A}\n"));
        assert_eq!(repo.facts().unwrap().commit.as_deref(), Some(A));
        write(&git.join("logs/HEAD"), "x\n");
        write(&git.join("index.lock"), "");
        let facts = repo.facts().unwrap();
        assert_eq!((facts.reflog, facts.locked), (2, true));

        // Detached.
        write(&git.join("HEAD"), &format!("{B}\n"));
        let facts = repo.facts().unwrap();
        assert_eq!((facts.branch, facts.commit.as_deref()), (None, Some(B)));

        // A linked worktree: HEAD of its own, refs of the common dir.
        let linked = root.join("wt");
        write(&git.join("worktrees/wt/HEAD"), "ref: refs/heads/main\n");
        write(&git.join("worktrees/wt/commondir"), "../..\n");
        write(
            &linked.join(".git"),
            &format!("gitdir: {}\n", git.join("worktrees/wt").display()),
        );
        let repo = Repo::discover(&linked.join("store")).unwrap();
        assert_eq!(repo.work_tree, linked);
        assert_eq!(repo.facts().unwrap().commit.as_deref(), Some(A));
    }

    #[test]
    fn bad_git_files_are_errors_not_guesses() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let git = root.join(".git");
        let repo = |head: &str| {
            write(&git.join("HEAD"), head);
            Repo::discover(&root).unwrap().facts()
        };
        for head in [
            "ref: refs/heads/../../../etc/passwd",
            "ref: HEAD",
            "not an id",
            &"a".repeat(5000),
        ] {
            assert!(repo(head).is_err(), "{head:.40}");
        }
        write(&git.join("refs/heads/x"), "ref: refs/heads/x\n");
        assert!(repo("ref: refs/heads/x").is_err(), "a symbolic ref loop");
        assert_eq!(Repo::discover(&git.join("refs")), None);
    }

    #[test]
    fn fifos_in_place_of_git_files_are_errors_not_hangs() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let git = root.join(".git");
        write(&git.join("HEAD"), "ref: refs/heads/main\n");
        let mkfifo = |path: &Path| {
            let _ = fs::remove_file(path);
            let status = Command::new("mkfifo").arg(path).status().unwrap();
            assert!(status.success());
        };
        let repo = Repo::discover(&root).unwrap();
        mkfifo(&git.join("index"));
        assert!(repo.index_holds(&root.join("a.jsonl")).is_err());
        mkfifo(&git.join("HEAD"));
        assert!(repo.facts().is_err());
        // A `.git` that is a FIFO, or a symlink loop: unusable, not an
        // error of `append` and not a hang.
        let other = root.join("other");
        fs::create_dir_all(&other).unwrap();
        mkfifo(&other.join(".git"));
        let fifo = Repo::discover(&other).unwrap();
        assert!(fifo.unusable.is_some() && fifo.facts().is_err());
        fs::remove_file(other.join(".git")).unwrap();
        std::os::unix::fs::symlink(".git", other.join(".git")).unwrap();
        let looped = Repo::discover(&other).unwrap();
        assert!(looped.unusable.is_some() && looped.facts().is_err());
    }
}
