//! The catalog's side of [`super::watch`]: its answers kept while nothing
//! below them changed, and the watches its classifications add.

use std::path::Path;
use std::sync::Arc;

use super::watch::{Answer, Begun, Question};
use super::{Catalog, Counting, NodeKind, Snapshot};
use crate::error::Result;
use crate::warehouse::Dir;

/// When an answer made outside the catalog from its answers was begun
/// (see [`Catalog::change_mark`]).
#[derive(Debug, Clone, Copy)]
pub struct ChangeMark(Begun);

impl Catalog {
    /// A mark to tell later whether anything changed below a path since
    /// ([`Catalog::unchanged_since`]); `None` when this catalog does not
    /// watch.
    pub fn change_mark(&self) -> Option<ChangeMark> {
        self.quiet.as_ref().map(|quiet| ChangeMark(quiet.begin()))
    }

    /// Whether nothing changed at or below the directory `rel` since
    /// `mark`, as reported by watches that were in place all along: what
    /// was made from it then (a rendered `.sources`) stands as it is.
    pub fn unchanged_since(&self, rel: &Path, mark: &ChangeMark) -> bool {
        let path = self.absolute(rel);
        self.quiet
            .as_ref()
            .is_some_and(|quiet| quiet.unchanged(&path, &mark.0))
            && self.watched(&path)
    }

    /// `rel` below the root, as the watcher names directories.
    fn absolute(&self, rel: &Path) -> std::path::PathBuf {
        let mut path = self.root.clone();
        path.extend(rel.components().filter_map(|c| match c {
            std::path::Component::Normal(name) => Some(name),
            _ => None,
        }));
        path
    }

    /// `gather` of `rel`, given again while nothing below it changed. Only
    /// a directory's Snapshot whose every count is final is kept.
    pub(super) fn open_kept(&self, rel: &Path, counting: Counting) -> Result<Arc<Snapshot>> {
        self.kept_or_made(
            rel,
            Question::Open(counting),
            || self.gather(rel, &mut None, counting).map(Arc::new),
            |snapshot| {
                (snapshot.kind == NodeKind::Directory && snapshot.settled())
                    .then(|| Answer::Open(snapshot.clone()))
            },
            |answer| match answer {
                Answer::Open(snapshot) => Some(snapshot),
                _ => None,
            },
        )
    }

    /// The answer to `question` of `rel` kept while nothing below it
    /// changed, else `make`'s, kept when `keep` gives it as an answer.
    /// Without watching, `make`'s answer.
    pub(super) fn kept_or_made<T>(
        &self,
        rel: &Path,
        question: Question,
        make: impl FnOnce() -> Result<Arc<T>>,
        keep: impl FnOnce(&Arc<T>) -> Option<Answer>,
        from: impl FnOnce(Answer) -> Option<Arc<T>>,
    ) -> Result<Arc<T>> {
        let Some(quiet) = &self.quiet else {
            return make();
        };
        if let Some(answer) = quiet.get(rel, question).and_then(from) {
            return Ok(answer);
        }
        let begun = quiet.begin();
        let made = make()?;
        if let Some(answer) = keep(&made) {
            quiet.keep(rel, question, &self.absolute(rel), begun, answer);
        }
        Ok(made)
    }

    /// Whether this catalog keeps its answers while nothing below them
    /// changes (it watches, on a filesystem that reports changes).
    pub fn keeps_answers(&self) -> bool {
        self.quiet.is_some()
    }

    /// Whether the answer [`Catalog::open`] gives for `rel` is kept now
    /// and still quiet, so that asking for it again costs no walk. Never
    /// in a view of the past (its answers are cut from the kept ones, at a
    /// cost of their own).
    pub fn keeps(&self, rel: &Path) -> bool {
        self.frozen_at().is_none()
            && self
                .quiet
                .as_ref()
                .is_some_and(|quiet| quiet.holds(rel, Question::Open(Counting::Read)))
    }

    /// Drops every kept answer.
    pub(super) fn forget_kept(&self) {
        if let Some(quiet) = &self.quiet {
            quiet.clear();
        }
    }

    /// Watches `dir` (and the subdirectories classifying it reads) before
    /// it is read, when watching; false when it could not be watched.
    pub(super) fn watch(&self, dir: &Dir) -> bool {
        match &self.quiet {
            Some(quiet) => quiet.watcher().watch(dir, &self.classify_subdirs),
            None => true,
        }
    }

    /// Whether `path` is watched, or nothing is.
    pub(super) fn watched(&self, path: &Path) -> bool {
        self.quiet
            .as_ref()
            .is_none_or(|quiet| quiet.watcher().is_watched(path))
    }
}
