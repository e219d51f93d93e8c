//! One page of a selection's runs, in a sort order, after a place in it.
//!
//! Every order is total: by a figure (largest first, runs without it
//! last), ties by name; or by name alone. So the place after a page is
//! the last run's figure and name, not an index: a page asked for after
//! it starts where the last one ended even when runs were added or
//! removed meanwhile, and a page costs one pass over the runs, not a
//! sort of all of them.

use std::cmp::Ordering;

use serde::Serialize;

use super::{Groups, RunSummary, Runs};
use crate::catalog::Warning;

/// Runs in one page at most.
pub const PAGE_AT_MOST: usize = 1_000;
/// Runs in a page when the request does not say.
pub const PAGE_DEFAULT: usize = 200;

/// What runs are ordered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sort {
    /// By name (`run`), A to Z.
    #[default]
    Name,
    /// The latest last record first.
    Newest,
    /// The longest duration first.
    Longest,
    /// The most failed records first.
    Failed,
    /// The most tokens first.
    Tokens,
    /// The most records first.
    Records,
    /// The most steps first.
    Steps,
    /// The most tool calls first.
    Calls,
    /// The most failed tool results first.
    Errors,
    /// The highest score (or reward) first.
    Score,
}

impl Sort {
    pub const ALL: [Sort; 10] = [
        Sort::Name,
        Sort::Newest,
        Sort::Longest,
        Sort::Failed,
        Sort::Tokens,
        Sort::Records,
        Sort::Steps,
        Sort::Calls,
        Sort::Errors,
        Sort::Score,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Sort::Name => "name",
            Sort::Newest => "newest",
            Sort::Longest => "longest",
            Sort::Failed => "failed",
            Sort::Tokens => "tokens",
            Sort::Records => "records",
            Sort::Steps => "steps",
            Sort::Calls => "calls",
            Sort::Errors => "errors",
            Sort::Score => "score",
        }
    }

    /// Every sort's name, for an error or a help text.
    pub fn names() -> String {
        let names: Vec<&str> = Sort::ALL.iter().map(|s| s.name()).collect();
        names.join(", ")
    }

    pub fn parse(text: &str) -> Option<Sort> {
        Sort::ALL.into_iter().find(|s| s.name() == text)
    }

    /// The figure `run` is ordered by (every count and time is exact in
    /// an `f64`: they stay far below 2^53; a score is one already).
    pub fn figure(self, run: &RunSummary) -> Option<f64> {
        match self {
            Sort::Name => None,
            Sort::Newest => run.last.map(|t| t.0 as f64),
            Sort::Longest => run.duration_seconds,
            Sort::Failed => Some(run.failed as f64),
            Sort::Tokens => run.tokens.map(|t| t.total as f64),
            Sort::Records => Some(run.records as f64),
            Sort::Steps => Some(run.steps as f64),
            Sort::Calls => Some(run.tool_calls as f64),
            Sort::Errors => Some(run.tool_errors as f64),
            Sort::Score => run.outcome.score,
        }
    }

    /// Where `a` stands against `b`: figure largest first (none last),
    /// then name.
    fn compare(self, a: (Option<f64>, &str), b: (Option<f64>, &str)) -> Ordering {
        let by_figure = match (a.0, b.0) {
            (Some(x), Some(y)) => y.total_cmp(&x),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        by_figure.then_with(|| a.1.cmp(b.1))
    }
}

/// The place after a run in an order: its figure and its name.
#[derive(Debug, Clone, PartialEq)]
pub struct After {
    pub figure: Option<f64>,
    pub name: String,
}

/// One page: its runs, and the place after the last when more follow.
pub struct Page<'a> {
    pub runs: Vec<&'a RunSummary>,
    pub next: Option<After>,
}

/// A page as `GET /api/runs` and `pchronicle runs --json` answer it.
#[derive(Serialize)]
pub struct PageAnswer<'a> {
    pub runs: Vec<&'a RunSummary>,
    /// Runs in the whole selection.
    pub total: u64,
    pub sort: &'static str,
    /// The cursor of the next page (`after=`), `null` after the last (and
    /// always from the CLI, which has no server to hand it back to).
    pub next: Option<String>,
    pub truncated: bool,
    pub warnings: &'a [Warning],
    /// The groups of the runs left out, on the first page of `ungrouped`
    /// runs only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<Groups>,
}

impl<'a> PageAnswer<'a> {
    /// `page` of `all`'s runs (`total` of them chosen), sorted by
    /// `sort`, with `next` as its cursor.
    pub fn of(
        all: &'a Runs,
        total: usize,
        page: Page<'a>,
        sort: Sort,
        next: Option<String>,
    ) -> PageAnswer<'a> {
        PageAnswer {
            runs: page.runs,
            total: total as u64,
            sort: sort.name(),
            next,
            truncated: all.summary.truncated,
            warnings: &all.summary.warnings,
            groups: None,
        }
    }

    /// Its JSON, one line.
    pub fn to_json(&self) -> String {
        let mut body = serde_json::to_string(self).expect("a page of runs serializes");
        body.push('\n');
        body
    }
}

/// The first `limit` runs of `runs` in `sort`'s order that come after
/// `after` (from the first without it).
pub fn page<'a>(
    runs: impl IntoIterator<Item = &'a RunSummary>,
    sort: Sort,
    after: Option<&After>,
    limit: usize,
) -> Page<'a> {
    fn key(sort: Sort, run: &RunSummary) -> (Option<f64>, &str) {
        (sort.figure(run), run.run.as_str())
    }
    let mut left: Vec<&RunSummary> = runs
        .into_iter()
        .filter(|run| {
            after.is_none_or(|a| {
                sort.compare(key(sort, run), (a.figure, &a.name)) == Ordering::Greater
            })
        })
        .collect();
    let order = |a: &&RunSummary, b: &&RunSummary| sort.compare(key(sort, a), key(sort, b));
    let more = left.len() > limit;
    if more {
        left.select_nth_unstable_by(limit, order);
        left.truncate(limit);
    }
    left.sort_unstable_by(order);
    let next = match left.last() {
        Some(last) if more => Some(After {
            figure: sort.figure(last),
            name: last.run.clone(),
        }),
        _ => None,
    };
    Page { runs: left, next }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Timestamp;

    fn run(name: &str, records: u64, last: Option<i64>) -> RunSummary {
        RunSummary {
            run: name.into(),
            file: name.into(),
            records,
            last: last.map(Timestamp),
            ..crate::extract::runs::tests::empty_summary()
        }
    }

    fn names(page: &Page<'_>) -> Vec<String> {
        page.runs.iter().map(|r| r.run.clone()).collect()
    }

    /// Every sort, read page by page, gives every run once, in the order
    /// of a whole sort.
    #[test]
    fn pages_read_in_turn_are_the_whole_order() {
        let runs: Vec<RunSummary> = (0..103)
            .map(|i| {
                let last = (i % 4 != 0).then_some((i % 7) as i64);
                run(&format!("r{:03}", (i * 37) % 103), i % 5, last)
            })
            .collect();
        for sort in Sort::ALL {
            let mut whole: Vec<&RunSummary> = runs.iter().collect();
            whole.sort_by(|a, b| sort.compare((sort.figure(a), &a.run), (sort.figure(b), &b.run)));
            let whole: Vec<String> = whole.iter().map(|r| r.run.clone()).collect();
            let mut read = Vec::new();
            let mut after = None;
            loop {
                let page = page(&runs, sort, after.as_ref(), 10);
                assert!(page.runs.len() <= 10);
                read.extend(names(&page));
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            assert_eq!(read, whole, "{sort:?}");
        }
    }

    #[test]
    fn a_page_goes_on_after_its_place_when_runs_change_meanwhile() {
        let mut runs = vec![run("a", 5, None), run("b", 3, None), run("c", 1, None)];
        let first = page(&runs, Sort::Records, None, 1);
        assert_eq!(names(&first), ["a"]);
        let first = first.next;
        // A run is added before the place, and one after it.
        runs.push(run("0", 9, None));
        runs.push(run("d", 4, None));
        let next = page(&runs, Sort::Records, first.as_ref(), 10);
        assert_eq!(names(&next), ["d", "b", "c"]);
        assert!(next.next.is_none());
    }
}
