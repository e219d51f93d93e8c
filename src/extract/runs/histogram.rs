//! Records per time bucket: the histogram a web page draws.

use std::collections::BTreeMap;
use std::io;
use std::ops::ControlFlow;

use serde::Serialize;

use super::cut::{self, BUCKETS_AT_MOST, Other};
use crate::catalog::{Catalog, Source, Timestamp, Warning};
use crate::error::Result;
use crate::extract::{Plan, Position, Selected};
use crate::records::read::Record;
use crate::records::timestamp::Micros;

/// A histogram's bucket width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Bucket {
    Hour,
    Day,
    Week,
}

impl Bucket {
    pub fn parse(text: &str) -> Option<Bucket> {
        match text {
            "hour" => Some(Bucket::Hour),
            "day" => Some(Bucket::Day),
            "week" => Some(Bucket::Week),
            _ => None,
        }
    }

    /// The start of the bucket holding `ts` (UTC; weeks start on Monday).
    pub(super) fn start(self, ts: Micros) -> Micros {
        const HOUR: Micros = 3_600_000_000;
        const DAY: Micros = 24 * HOUR;
        match self {
            Bucket::Hour => ts.div_euclid(HOUR) * HOUR,
            Bucket::Day => ts.div_euclid(DAY) * DAY,
            // 1970-01-01 was a Thursday: Monday is three days later.
            Bucket::Week => {
                let monday = 4 * DAY;
                (ts - monday).div_euclid(7 * DAY) * 7 * DAY + monday
            }
        }
    }
}

/// One histogram bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BucketCount {
    pub start: Timestamp,
    pub records: u64,
    pub failed: u64,
}

/// Records per time bucket: `GET /api/histogram`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Histogram {
    pub bucket: Bucket,
    /// The buckets with the most records (ties: the earlier), in time
    /// order: timestamps are a writer's, and so is how many buckets they
    /// spread over.
    pub buckets: Vec<BucketCount>,
    /// The buckets left out, `null` when none was.
    pub other: Option<Other>,
    /// Records without a timestamp.
    pub untimed: u64,
    pub truncated: bool,
    pub warnings: Vec<Warning>,
}

/// The records of `plan` per `bucket` (failed ones counted as such).
pub fn histogram(catalog: &Catalog, plan: &mut Plan, bucket: Bucket) -> Result<Histogram> {
    let mut selection = plan.selection().clone();
    selection.failed = true;
    selection.limit = None;
    plan.set_selection(selection);
    let mut tally = BucketTally {
        bucket,
        counts: BTreeMap::new(),
        untimed: 0,
    };
    let _ = plan.visit(catalog, Position::default(), false, &mut tally)?;
    let mut buckets: Vec<BucketCount> = tally
        .counts
        .into_iter()
        .map(|(start, (records, failed))| BucketCount {
            start: Timestamp(start),
            records,
            failed,
        })
        .collect();
    let left_out = cut::keep_largest(&mut buckets, BUCKETS_AT_MOST, |b| b.records);
    Ok(Histogram {
        bucket,
        buckets,
        other: (!left_out.is_empty()).then(|| Other {
            values: left_out.len() as u64,
            records: left_out.iter().map(|b| b.records).sum(),
            failed: Some(left_out.iter().map(|b| b.failed).sum()),
        }),
        untimed: tally.untimed,
        truncated: plan.truncated(),
        warnings: plan.warnings().to_vec(),
    })
}

struct BucketTally {
    bucket: Bucket,
    counts: BTreeMap<Micros, (u64, u64)>,
    untimed: u64,
}

impl Selected for BucketTally {
    fn selected(
        &mut self,
        _source: &Source,
        _file: &str,
        record: Record<'_>,
        _after: Position,
    ) -> io::Result<ControlFlow<()>> {
        match record.timestamp {
            Some(ts) => {
                let count = self.counts.entry(self.bucket.start(ts)).or_default();
                count.0 += 1;
                count.1 += u64::from(record.failed);
            }
            None => self.untimed += 1,
        }
        Ok(ControlFlow::Continue(()))
    }
}
