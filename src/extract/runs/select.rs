//! Runs chosen by what their records say (a model, an agent, a stop
//! reason), after the tally: and what the chosen runs add up to.

use std::collections::BTreeMap;

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
}

impl RunFilter {
    /// The filters' names, as a request and the CLI spell them.
    pub const NAMES: [&'static str; 3] = ["model", "agent", "stop"];

    pub fn is_empty(&self) -> bool {
        self.model.is_none() && self.agent.is_none() && self.stop.is_none()
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
        same(&self.model, &run.model)
            && same(&self.agent, &run.agent)
            && same(&self.stop, &run.outcome.stop)
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
