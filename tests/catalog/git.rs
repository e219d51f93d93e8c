//! Shards in a git work tree, with the real `git` in temporary
//! repositories: whatever moves HEAD or puts the shard in git's index
//! seals it, and an untouched repository lets the writer continue.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use pchronicle::shards::git::{Repo, bytes_read};
use pchronicle::shards::rotation::{self, Git, Sealed, ShardState};
use pchronicle::shards::{ShardFormat, Writer, validate_record};

/// Runs git in `dir` with no user or system configuration; its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .env_remove("GIT_DIR")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_WORK_TREE")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A repository with one commit, and the record store inside it.
struct Checkout {
    _tmp: tempfile::TempDir,
    work_tree: PathBuf,
    store: PathBuf,
}

fn checkout(init: &[&str]) -> Checkout {
    let tmp = tempfile::tempdir().unwrap();
    let work_tree = tmp.path().canonicalize().unwrap().join("repo");
    fs::create_dir_all(&work_tree).unwrap();
    let mut args = vec!["init", "-q", "-b", "main"];
    args.extend_from_slice(init);
    git(&work_tree, &args);
    fs::write(work_tree.join("README"), "hello\n").unwrap();
    git(&work_tree, &["add", "README"]);
    git(&work_tree, &["commit", "-q", "-m", "first"]);
    let store = work_tree.join("records/journal");
    Checkout {
        _tmp: tmp,
        work_tree,
        store,
    }
}

fn record(i: usize) -> String {
    format!(r#"{{"id":"r-{i}","ts":"2026-12-01T10:00:00Z","n":{i}}}"#)
}

fn append(store: &Path, i: usize) -> pchronicle::shards::Appended {
    let mut writer = Writer::open(store, "s1", ShardFormat::Line).unwrap();
    writer
        .append(validate_record(record(i).as_bytes()).unwrap())
        .unwrap()
}

/// What the rule says now about the shard the state hint names.
fn verdict(store: &Path) -> Result<(), Sealed> {
    let writer = Writer::open(store, "s1", ShardFormat::Line).unwrap();
    let state: Option<ShardState> = writer.load_state();
    let repo = Repo::discover(store);
    let git = repo.as_ref().map(|repo| Git {
        repo,
        facts: repo.facts(),
    });
    rotation::reusable(state.as_ref(), "s1", ShardFormat::Line, store, git.as_ref()).map(drop)
}

/// Appends twice (one shard), does `act`, and checks that the rule names
/// `why` and the next append starts a new shard, leaving the first one
/// untouched; the new shard is then continued.
fn sealed_by(c: &Checkout, act: impl FnOnce(&Checkout, &Path), why: Sealed) {
    let first = append(&c.store, 0).shard;
    assert_eq!(append(&c.store, 1).shard, first, "continued before");
    let before = fs::read(&first).unwrap();
    act(c, &first);
    assert_eq!(verdict(&c.store), Err(why));
    let next = append(&c.store, 2);
    assert!(next.started, "a new shard is started");
    assert_ne!(next.shard, first);
    assert_eq!(
        fs::read(&first).unwrap(),
        before,
        "the sealed shard is untouched"
    );
    assert_eq!(
        append(&c.store, 3).shard,
        next.shard,
        "the new one continues"
    );
}

/// `git add SHARD`.
fn stage(c: &Checkout, shard: &Path) {
    git(&c.work_tree, &["add", &rel(c, shard)]);
}

fn rel(c: &Checkout, path: &Path) -> String {
    path.strip_prefix(&c.work_tree)
        .unwrap()
        .to_str()
        .unwrap()
        .to_string()
}

#[test]
fn an_untouched_repository_continues_the_shard() {
    let c = checkout(&[]);
    let first = append(&c.store, 0).shard;
    // What leaves the shard alone: another file staged and committed
    // before the writer's state is taken, `git status` refreshing the
    // index, another file staged after.
    fs::write(c.work_tree.join("other"), "x\n").unwrap();
    git(&c.work_tree, &["add", "other"]);
    git(&c.work_tree, &["commit", "-q", "-m", "other"]);
    let first = {
        let a = append(&c.store, 1);
        assert_ne!(a.shard, first, "the commit sealed the first shard");
        a.shard
    };
    assert_eq!(append(&c.store, 2).shard, first);
    git(&c.work_tree, &["status", "--porcelain"]);
    fs::write(c.work_tree.join("another"), "y\n").unwrap();
    git(&c.work_tree, &["add", "another"]);
    assert_eq!(verdict(&c.store), Ok(()));
    for i in 3..10 {
        let a = append(&c.store, i);
        assert!(!a.started);
        assert_eq!(a.shard, first);
    }
}

#[test]
fn a_commit_seals_the_shard() {
    let c = checkout(&[]);
    sealed_by(
        &c,
        |c, shard| {
            git(&c.work_tree, &["add", &rel(c, shard)]);
            git(&c.work_tree, &["commit", "-q", "-m", "records"]);
        },
        Sealed::HeadMoved,
    );
}

#[test]
fn staging_seals_the_shard() {
    let c = checkout(&[]);
    sealed_by(&c, stage, Sealed::InGitIndex);
}

#[test]
fn a_shard_committed_and_unchanged_stays_sealed_when_the_state_is_lost() {
    let c = checkout(&[]);
    let first = append(&c.store, 0).shard;
    git(&c.work_tree, &["add", &rel(&c, &first)]);
    git(&c.work_tree, &["commit", "-q", "-m", "records"]);
    // A state that names the committed shard with every other fact
    // current: only git's index can tell.
    let writer = Writer::open(&c.store, "s1", ShardFormat::Line).unwrap();
    let mut state = writer.load_state().unwrap();
    let repo = Repo::discover(&c.store).unwrap();
    let facts = repo.facts().unwrap();
    state.git = Some(facts.state(facts.index));
    writer.save_state(&state).unwrap();
    drop(writer);
    assert_eq!(verdict(&c.store), Err(Sealed::InGitIndex));
    assert_ne!(append(&c.store, 1).shard, first);
}

#[test]
fn switching_branch_seals_the_shard() {
    let c = checkout(&[]);
    sealed_by(
        &c,
        |c, _| {
            git(&c.work_tree, &["checkout", "-q", "-b", "topic"]);
        },
        Sealed::HeadMoved,
    );
}

#[test]
fn a_commit_undone_by_a_mixed_reset_seals_the_shard() {
    let c = checkout(&[]);
    sealed_by(
        &c,
        |c, _| {
            let head = git(&c.work_tree, &["rev-parse", "HEAD"]);
            fs::write(c.work_tree.join("other"), "x\n").unwrap();
            git(&c.work_tree, &["add", "other"]);
            git(&c.work_tree, &["commit", "-q", "-m", "other"]);
            git(&c.work_tree, &["reset", "-q", "HEAD~1"]);
            assert_eq!(git(&c.work_tree, &["rev-parse", "HEAD"]), head);
        },
        Sealed::ReflogMoved,
    );
}

#[test]
fn without_a_reflog_a_commit_undone_by_a_reset_still_seals() {
    // No logs/HEAD: ORIG_HEAD, which the reset writes, tells instead.
    let c = checkout(&[]);
    git(&c.work_tree, &["config", "core.logAllRefUpdates", "false"]);
    fs::remove_dir_all(c.work_tree.join(".git/logs")).unwrap();
    sealed_by(
        &c,
        |c, shard| {
            stage(c, shard);
            git(&c.work_tree, &["commit", "-q", "-m", "records"]);
            git(&c.work_tree, &["branch", "saved"]);
            git(&c.work_tree, &["reset", "-q", "HEAD~1"]);
            assert!(!c.work_tree.join(".git/logs/HEAD").exists());
        },
        Sealed::ReflogMoved,
    );
}

#[test]
fn a_held_index_lock_seals_the_shard() {
    let c = checkout(&[]);
    let lock = c.work_tree.join(".git/index.lock");
    let first = append(&c.store, 0).shard;
    assert_eq!(append(&c.store, 1).shard, first);
    let before = fs::read(&first).unwrap();
    fs::write(&lock, "").unwrap();
    assert_eq!(verdict(&c.store), Err(Sealed::IndexLocked));
    // While it is held, every append starts a shard; once released, the
    // last one continues.
    let a = append(&c.store, 2);
    let b = append(&c.store, 3);
    assert!(a.started && b.started && a.shard != first && b.shard != a.shard);
    fs::remove_file(&lock).unwrap();
    let c2 = append(&c.store, 4);
    assert!(!c2.started);
    assert_eq!(c2.shard, b.shard);
    assert_eq!(fs::read(&first).unwrap(), before);
}

#[test]
fn a_linked_worktree_is_read_through_its_gitdir_file() {
    let main = checkout(&[]);
    let linked = main.work_tree.parent().unwrap().join("linked");
    git(
        &main.work_tree,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "side",
            linked.to_str().unwrap(),
        ],
    );
    assert!(linked.join(".git").is_file());
    let c = Checkout {
        _tmp: tempfile::tempdir().unwrap(),
        store: linked.join("records/journal"),
        work_tree: linked.clone(),
    };
    let repo = Repo::discover(&c.store).unwrap();
    assert_eq!(repo.work_tree, linked);
    assert_ne!(repo.git_dir, repo.common_dir);
    // A commit in the main worktree leaves the linked one's shard alone.
    let first = append(&c.store, 0).shard;
    fs::write(main.work_tree.join("other"), "x\n").unwrap();
    git(&main.work_tree, &["add", "other"]);
    git(&main.work_tree, &["commit", "-q", "-m", "other"]);
    assert_eq!(verdict(&c.store), Ok(()));
    assert_eq!(append(&c.store, 1).shard, first);
    // Staging in the linked worktree seals it; so does a commit there.
    sealed_by(&c, stage, Sealed::InGitIndex);
    sealed_by(
        &c,
        |c, _| {
            fs::write(c.work_tree.join("side-file"), "s\n").unwrap();
            git(&c.work_tree, &["add", "side-file"]);
            git(&c.work_tree, &["commit", "-q", "-m", "side"]);
        },
        Sealed::HeadMoved,
    );
}

#[test]
fn a_reftable_repository_is_asked_through_git() {
    let c = checkout(&["--ref-format=reftable"]);
    let repo = Repo::discover(&c.store).unwrap();
    assert!(repo.reftable);
    sealed_by(
        &c,
        |c, _| {
            git(&c.work_tree, &["checkout", "-q", "-b", "topic"]);
        },
        Sealed::HeadMoved,
    );
    sealed_by(
        &c,
        |c, _| {
            fs::write(c.work_tree.join("other"), "x\n").unwrap();
            git(&c.work_tree, &["add", "other"]);
            git(&c.work_tree, &["commit", "-q", "-m", "other"]);
            git(&c.work_tree, &["reset", "-q", "HEAD~1"]);
        },
        Sealed::ReflogMoved,
    );
}

#[test]
fn indexes_git_writes_in_other_layouts_are_searched_too() {
    // Version 4 (prefix-compressed paths) and a split index.
    for config in [
        &["config", "index.version", "4"][..],
        &["config", "core.splitIndex", "true"],
    ] {
        let c = checkout(&[]);
        git(&c.work_tree, config);
        sealed_by(&c, stage, Sealed::InGitIndex);
    }
}

#[test]
fn most_appends_read_no_index_bytes() {
    let c = checkout(&[]);
    for i in 0..100 {
        fs::write(c.work_tree.join(format!("file-{i:03}")), "x\n").unwrap();
    }
    git(&c.work_tree, &["add", "."]);
    git(&c.work_tree, &["commit", "-q", "-m", "files"]);
    let mut writer = Writer::open(&c.store, "s1", ShardFormat::Line).unwrap();
    let index_len = fs::metadata(c.work_tree.join(".git/index")).unwrap().len();
    let record = record(0);
    let record = validate_record(record.as_bytes()).unwrap();
    writer.append(record).unwrap();
    // The clock must tick past the index's mtime for the searched index to
    // be trusted; the first appends may search it once.
    std::thread::sleep(std::time::Duration::from_millis(30));
    writer.append(record).unwrap();
    writer.append(record).unwrap();
    let before = bytes_read();
    for _ in 0..100 {
        writer.append(record).unwrap();
    }
    let per_append = (bytes_read() - before) / 100;
    assert!(
        per_append < 200 && index_len > 4000,
        "{per_append} bytes of git files per append (the index is {index_len})"
    );
}

#[test]
fn git_add_of_the_store_never_stages_the_writers_state() {
    let c = checkout(&[]);
    let shard = append(&c.store, 0).shard;
    assert!(c.store.join(".pchronicle/shards").is_dir());
    git(&c.work_tree, &["add", "records"]);
    let staged = git(&c.work_tree, &["diff", "--cached", "--name-only"]);
    assert_eq!(staged.lines().collect::<Vec<_>>(), [rel(&c, &shard)]);
}

#[test]
fn a_damaged_git_index_is_an_error_or_an_answer_never_a_panic() {
    let c = checkout(&[]);
    for i in 0..20 {
        fs::write(c.work_tree.join(format!("f{i}")), "x\n").unwrap();
    }
    git(&c.work_tree, &["add", "."]);
    let index = c.work_tree.join(".git/index");
    let good = fs::read(&index).unwrap();
    let repo = Repo::discover(&c.store).unwrap();
    let shard = c.store.join("s1.0a1b2c3d.jsonl");
    let mut damaged: Vec<Vec<u8>> = (0..good.len()).map(|n| good[..n].to_vec()).collect();
    for at in (0..good.len()).step_by(3) {
        let mut bytes = good.clone();
        bytes[at] ^= 0xff;
        damaged.push(bytes);
    }
    // An entry count far beyond the file.
    let mut huge = good.clone();
    huge[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
    damaged.push(huge);
    for bytes in &damaged {
        fs::write(&index, bytes).unwrap();
        let _ = repo.index_holds(&shard);
    }
    fs::write(&index, &good).unwrap();
    assert!(!repo.index_holds(&shard).unwrap());
}
