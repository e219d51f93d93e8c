//! Two runs side by side: their summaries, then their steps aligned one to
//! one (step n of one against step n of the other), each pair marked where
//! their tool calls or results differ (`GET /api/compare`, the Compare
//! page). Steps are answered a window at a time (`from`, `limit`).

use std::io;
use std::ops::ControlFlow;
use std::path::Path;

use serde::Serialize;

use super::steps::{Answered, Call, Step, Stepper};
use super::{PEEK_LIMIT, RunSummary};
use crate::catalog::{Catalog, Source};
use crate::error::Result;
use crate::extract::select::Glob;
use crate::extract::{Plan, Position, Selected, Selection, Shape};
use crate::records::read::{Body, Record};

/// Steps a comparison answers at most at once.
pub const STEPS_AT_MOST: u64 = 500;
/// Steps it answers when not told.
pub const STEPS_DEFAULT: u64 = 100;

/// What `GET /api/compare` answers.
#[derive(Debug, Serialize)]
pub struct Comparison {
    pub a: Side,
    pub b: Side,
    /// The first step of `pairs` (counted from 1).
    pub from: u64,
    pub pairs: Vec<Pair>,
    /// Pairs of this window whose calls or results differ.
    pub differing: u64,
    /// The `from` of the next window, while either run has more steps.
    pub next_from: Option<u64>,
}

/// One run of a comparison.
#[derive(Debug, Serialize)]
pub struct Side {
    /// Its row of `/api/runs`.
    pub summary: RunSummary,
    /// Records read, and steps counted (as `summary.steps`, unless the
    /// run changed between the two reads).
    pub records: u64,
    pub steps: u64,
}

/// Step `step` of both runs (`null` where a run has no such step).
#[derive(Debug, Serialize)]
pub struct Pair {
    pub step: u64,
    pub a: Option<Step>,
    pub b: Option<Step>,
    /// The tools called, or their arguments, differ (or one side has no
    /// such step).
    pub calls_differ: bool,
    /// The results' outputs or failures differ.
    pub results_differ: bool,
}

/// Compares runs `a` and `b` of `rel` (rows of its `/api/runs`): steps
/// `from..from+limit`.
pub fn compare(
    catalog: &Catalog,
    rel: &Path,
    a: RunSummary,
    b: RunSummary,
    from: u64,
    limit: u64,
) -> Result<Comparison> {
    let from = from.max(1);
    let (a, a_steps) = side(catalog, rel, a, from, limit)?;
    let (b, b_steps) = side(catalog, rel, b, from, limit)?;
    let shown = a_steps.len().max(b_steps.len()) as u64;
    let (mut a_steps, mut b_steps) = (a_steps.into_iter(), b_steps.into_iter());
    let pairs: Vec<Pair> = (0..shown)
        .map(|i| Pair::of(from + i, a_steps.next(), b_steps.next()))
        .collect();
    let end = from + shown;
    let next_from = (a.steps.max(b.steps) >= end && shown > 0).then_some(end);
    Ok(Comparison {
        differing: pairs
            .iter()
            .filter(|p| p.calls_differ || p.results_differ)
            .count() as u64,
        a,
        b,
        from,
        pairs,
        next_from,
    })
}

impl Pair {
    fn of(step: u64, a: Option<Step>, b: Option<Step>) -> Pair {
        fn calls(s: &Option<Step>) -> Option<(&[Call], u64)> {
            s.as_ref().map(|s| (s.calls.as_slice(), s.unlisted_calls))
        }
        fn results(s: &Option<Step>) -> Option<(Vec<(bool, u64)>, u64)> {
            s.as_ref().map(|s| {
                let outcomes = s.results.iter().map(Answered::outcome).collect();
                (outcomes, s.unlisted_results)
            })
        }
        Pair {
            step,
            calls_differ: calls(&a) != calls(&b),
            results_differ: results(&a) != results(&b),
            a,
            b,
        }
    }
}

impl Answered {
    /// What two results are compared by: whether each failed, and its
    /// output (not the call it answers: the calls are compared apart).
    fn outcome(&self) -> (bool, u64) {
        (self.error, self.whole)
    }
}

/// Reads one run's steps: its summary with the steps of the window.
fn side(
    catalog: &Catalog,
    rel: &Path,
    summary: RunSummary,
    from: u64,
    limit: u64,
) -> Result<(Side, Vec<Step>)> {
    let selection = Selection {
        file: Some(Glob::new(&summary.file)?),
        failed: true,
        ..Selection::default()
    };
    let plan = Plan::new(catalog, rel, selection, Shape::Plain)?;
    let mut stepper = Stepper::new(from, limit);
    let _ = plan.visit(
        catalog,
        Position::default(),
        true,
        &mut Reader(&mut stepper),
    )?;
    let side = Side {
        summary,
        records: stepper.records,
        steps: stepper.steps,
    };
    Ok((side, stepper.into_steps()))
}

/// Hands a plan's records to a [`Stepper`].
struct Reader<'a>(&'a mut Stepper);

impl Selected for Reader<'_> {
    fn selected(
        &mut self,
        _: &Source,
        _: &str,
        record: Record<'_>,
        _: Position,
    ) -> io::Result<ControlFlow<()>> {
        // As the runs' tally: a failed record or one too large to look
        // into is counted, and is in no step.
        match record.body {
            Body::Bytes(bytes) if !record.failed && bytes.len() <= PEEK_LIMIT => self.0.add(bytes),
            _ => self.0.skip(),
        }
        Ok(ControlFlow::Continue(()))
    }
}
