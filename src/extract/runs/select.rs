//! Runs chosen by what their records say (a model, an agent, a stop
//! reason), after the tally: and what the chosen runs add up to.

use std::collections::BTreeMap;

use serde::Serialize;

use super::cut::{self, Other, RunsOther};
use super::{RunSummary, Runs, Summary};
use crate::catalog::Warning;

/// The run-level filters: each set one keeps the runs whose value is
/// exactly it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    pub model: Option<String>,
    pub agent: Option<String>,
    pub stop: Option<String>,
    /// Only the runs of this group (see [`group_of`]).
    pub group: Option<String>,
    /// Only the runs in no group.
    pub ungrouped: bool,
}

/// Groups a page of `ungrouped` runs names at most.
pub const GROUPS_AT_MOST: usize = 1000;

/// The group of a run: the directory below the first level its name is
/// in (`a/b/` of `a/b/x.jsonl` and of `a/b/c/x.jsonl`); `None` for a run at
/// the top or in a first-level directory. The Runs page shows each group
/// folded, with its count.
pub fn group_of(run: &str) -> Option<&str> {
    let first = run.find('/')?;
    let second = first + 1 + run[first + 1..].find('/')?;
    Some(&run[..=second])
}

/// The groups of the runs a page left out (`ungrouped`): runs by group,
/// the [`GROUPS_AT_MOST`] with the most runs, and what the rest add up to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Groups {
    pub runs: BTreeMap<String, u64>,
    pub other: Option<GroupsLeft>,
}

/// Groups left out of [`Groups`], and their runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GroupsLeft {
    pub groups: u64,
    pub runs: u64,
}

impl RunFilter {
    /// The filters' names, as a request and the CLI spell them.
    pub const NAMES: [&'static str; 3] = ["model", "agent", "stop"];

    pub fn is_empty(&self) -> bool {
        self.model.is_none()
            && self.agent.is_none()
            && self.stop.is_none()
            && self.group.is_none()
            && !self.ungrouped
    }

    /// Sets the filter `name` (one of [`NAMES`](Self::NAMES)); false for
    /// any other name.
    pub fn set(&mut self, name: &str, value: String) -> bool {
        let slot = match name {
            "model" => &mut self.model,
            "agent" => &mut self.agent,
            "stop" => &mut self.stop,
            _ => return false,
        };
        *slot = Some(value);
        true
    }

    pub fn matches(&self, run: &RunSummary) -> bool {
        let same = |want: &Option<String>, have: &Option<String>| {
            want.as_ref().is_none_or(|w| have.as_ref() == Some(w))
        };
        let group = group_of(&run.run);
        same(&self.model, &run.model)
            && same(&self.agent, &run.agent)
            && same(&self.stop, &run.outcome.stop)
            && self.group.as_deref().is_none_or(|g| group == Some(g))
            && !(self.ungrouped && group.is_some())
    }
}

/// The values of `run` each reviewed facet counts.
fn reviewed_values(run: &RunSummary) -> [(&'static str, Option<&String>); 3] {
    [
        ("model", run.model.as_ref()),
        ("agent", run.agent.as_ref()),
        ("stop", run.outcome.stop.as_ref()),
    ]
}

impl Summary {
    /// What `runs` add up to, with the selection's roles (and what their
    /// list left out already), each list a writer decides the length of
    /// cut.
    pub(super) fn of<'a>(
        runs: impl Iterator<Item = &'a RunSummary>,
        roles: (BTreeMap<String, u64>, Option<Other>),
        truncated: bool,
        warnings: Vec<Warning>,
    ) -> Summary {
        let (mut roles, roles_other) = roles;
        let (mut count, mut records, mut failed) = (0, 0, 0);
        let mut facets: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        let mut reviewed: BTreeMap<&'static str, BTreeMap<String, u64>> = BTreeMap::new();
        for run in runs {
            count += 1;
            records += run.records;
            failed += run.failed;
            // A run's records all come from sources of one directory, so
            // they share its attributes.
            for (key, value) in &run.path_attrs {
                *facets
                    .entry(key.clone())
                    .or_default()
                    .entry(value.clone())
                    .or_default() += run.records;
            }
            for (name, value) in reviewed_values(run) {
                if let Some(value) = value {
                    *reviewed
                        .entry(name)
                        .or_default()
                        .entry(value.clone())
                        .or_default() += 1;
                }
            }
        }
        let mut other = RunsOther::cut(&mut facets, &mut roles);
        other.roles = other.roles.or(roles_other);
        for (name, values) in reviewed.iter_mut() {
            if let Some(cut) = cut::keep_largest_counts(values, cut::VALUES_AT_MOST) {
                other.reviewed.insert(name, cut);
            }
        }
        Summary {
            runs: count,
            records,
            failed,
            facets,
            roles,
            reviewed,
            other,
            truncated,
            warnings,
        }
    }
}

impl Runs {
    /// The run named `run`.
    pub fn named(&self, run: &str) -> Option<&RunSummary> {
        self.runs.iter().find(|r| r.run == run)
    }

    /// The groups of the runs `filter` keeps but for its `ungrouped`
    /// (what a page of `ungrouped` runs leaves out).
    pub fn groups(&self, filter: &RunFilter) -> Groups {
        let filter = RunFilter {
            ungrouped: false,
            ..filter.clone()
        };
        let mut runs: BTreeMap<String, u64> = BTreeMap::new();
        for run in self.runs.iter().filter(|r| filter.matches(r)) {
            if let Some(group) = group_of(&run.run) {
                match runs.get_mut(group) {
                    Some(n) => *n += 1,
                    None => {
                        runs.insert(group.to_string(), 1);
                    }
                }
            }
        }
        let other = cut::keep_largest_counts(&mut runs, GROUPS_AT_MOST).map(|o| GroupsLeft {
            groups: o.values,
            runs: o.records,
        });
        Groups { runs, other }
    }

    /// The runs `filter` keeps, by name.
    pub fn chosen<'a>(&'a self, filter: &'a RunFilter) -> Vec<&'a RunSummary> {
        self.runs.iter().filter(|r| filter.matches(r)).collect()
    }

    /// The summary of the runs `filter` keeps (the selection's own when
    /// it keeps every one).
    pub fn summary_of(&self, filter: &RunFilter) -> Summary {
        if filter.is_empty() {
            return self.summary.clone();
        }
        let all = &self.summary;
        Summary::of(
            self.runs.iter().filter(|r| filter.matches(r)),
            (all.roles.clone(), all.other.roles),
            all.truncated,
            all.warnings.clone(),
        )
    }
}
