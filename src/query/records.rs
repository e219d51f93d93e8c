//! The `records` table: a plan's records as Arrow batches, streamed.
//!
//! The table is a DataFusion [`TableProvider`] over an [`extract::Plan`].
//! What DataFusion pushes down narrows the plan before anything is read:
//! a comparison of `timestamp` with a constant becomes the time window,
//! `failed = false` leaves failed records out, an equality on a hive
//! attribute column or on `_file_` (or a `LIKE` on `_file_`) selects
//! sources. Each is `Inexact`: DataFusion checks the rows again, so a
//! filter understood only in part is still right. A projection without
//! `record` lets a compact-jsonl leaf be scanned without its record
//! columns.
//!
//! A scan is a [`RecordsScan`] of the narrowed plan, split into
//! partitions of about equal bytes (see `scan.rs`).

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::TableType;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::scalar::ScalarValue;

use super::scan::{RecordsScan, Rows, records_field};
use crate::catalog::Catalog;
use crate::extract::{Glob, Plan, Selection};

/// The columns every `records` table has, around the hive attributes.
const FIXED: [&str; 5] = ["_file_", "line", "timestamp", "failed", "record"];

/// The `records` table of one plan.
pub struct RecordsTable {
    plan: Arc<Plan>,
    catalog: Arc<Catalog>,
    schema: SchemaRef,
    /// The hive attribute columns, in schema order (after `_file_`).
    attrs: Vec<String>,
    partitions: usize,
}

impl fmt::Debug for RecordsTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordsTable")
            .field("sources", &self.plan.sources().len())
            .field("attrs", &self.attrs)
            .finish()
    }
}

impl RecordsTable {
    pub fn new(plan: Plan, catalog: Arc<Catalog>, partitions: usize) -> RecordsTable {
        let attrs: Vec<String> = plan
            .sources()
            .iter()
            .flat_map(|s| s.path_attrs.keys().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter(|name| !FIXED.contains(&name.as_str()))
            .collect();
        let fields: Vec<_> = std::iter::once("_file_")
            .chain(attrs.iter().map(String::as_str))
            .chain(["line", "timestamp", "failed", "record"])
            .map(records_field)
            .collect();
        RecordsTable {
            plan: Arc::new(plan),
            catalog,
            schema: Arc::new(Schema::new(fields)),
            attrs,
            partitions: partitions.max(1),
        }
    }

    /// The attribute columns.
    pub fn attrs(&self) -> &[String] {
        &self.attrs
    }

    /// Narrows `selection` by what `filter` says, if it is a form this
    /// table understands; true when it was used.
    fn push_down(&self, filter: &Expr, selection: &mut Selection) -> bool {
        match filter {
            Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                if *op == Operator::And {
                    let l = self.push_down(left, selection);
                    let r = self.push_down(right, selection);
                    return l || r;
                }
                let (column, value, op) = match (column_of(left), column_of(right)) {
                    (Some(c), None) => (c, right.as_ref(), *op),
                    (None, Some(c)) => match op.swap() {
                        Some(swapped) => (c, left.as_ref(), swapped),
                        None => return false,
                    },
                    _ => return false,
                };
                self.push_comparison(column, op, value, selection)
            }
            Expr::Like(like) if !like.negated && like.escape_char.is_none() => {
                let (Some("_file_"), Some(ScalarValue::Utf8(Some(pattern)))) =
                    (column_of(&like.expr), literal(&like.pattern))
                else {
                    return false;
                };
                if like.case_insensitive || selection.file.is_some() {
                    return false;
                }
                match like_to_glob(pattern).map(|g| Glob::new(&g)) {
                    Some(Ok(glob)) => {
                        selection.file = Some(glob);
                        true
                    }
                    _ => false,
                }
            }
            _ => false,
        }
    }

    fn push_comparison(
        &self,
        column: &str,
        op: Operator,
        value: &Expr,
        selection: &mut Selection,
    ) -> bool {
        let Some(value) = literal(value) else {
            return false;
        };
        match (column, op, value) {
            ("timestamp", op, value) => {
                let Some(micros) = micros_of(value) else {
                    return false;
                };
                let since = |s: &mut Selection, t: i64| {
                    s.since = Some(s.since.map_or(t, |old| old.max(t)));
                };
                let until = |s: &mut Selection, t: i64| {
                    s.until = Some(s.until.map_or(t, |old| old.min(t)));
                };
                match op {
                    Operator::GtEq => since(selection, micros),
                    Operator::Gt => since(selection, micros.saturating_add(1)),
                    Operator::Lt => until(selection, micros),
                    Operator::LtEq => until(selection, micros.saturating_add(1)),
                    Operator::Eq => {
                        since(selection, micros);
                        until(selection, micros.saturating_add(1));
                    }
                    _ => return false,
                }
                true
            }
            ("failed", Operator::Eq, ScalarValue::Boolean(Some(false))) => {
                selection.failed = false;
                true
            }
            ("_file_", Operator::Eq, ScalarValue::Utf8(Some(name))) if selection.file.is_none() => {
                let escaped: String = name
                    .chars()
                    .flat_map(|c| {
                        let quote = matches!(c, '*' | '?' | '[' | ']' | '\\');
                        quote.then_some('\\').into_iter().chain([c])
                    })
                    .collect();
                match Glob::new(&escaped) {
                    Ok(glob) => {
                        selection.file = Some(glob);
                        true
                    }
                    Err(_) => false,
                }
            }
            (attr, Operator::Eq, ScalarValue::Utf8(Some(value)))
                if self.attrs.iter().any(|a| a == attr) && !selection.attrs.contains_key(attr) =>
            {
                selection
                    .attrs
                    .insert(attr.to_string(), vec![value.clone()]);
                true
            }
            _ => false,
        }
    }
}

fn column_of(expr: &Expr) -> Option<&str> {
    match expr {
        Expr::Column(c) => Some(c.name.as_str()),
        _ => None,
    }
}

fn literal(expr: &Expr) -> Option<&ScalarValue> {
    match expr {
        Expr::Literal(value, _) => Some(value),
        _ => None,
    }
}

/// A timestamp constant as UTC microseconds.
fn micros_of(value: &ScalarValue) -> Option<i64> {
    let utc = |tz: &Option<Arc<str>>| {
        tz.as_deref()
            .is_none_or(|tz| matches!(tz, "UTC" | "+00:00" | "Z"))
    };
    match value {
        ScalarValue::TimestampMicrosecond(Some(v), tz) if utc(tz) => Some(*v),
        ScalarValue::TimestampNanosecond(Some(v), tz) if utc(tz) => Some(v.div_euclid(1000)),
        ScalarValue::TimestampMillisecond(Some(v), tz) if utc(tz) => v.checked_mul(1000),
        ScalarValue::TimestampSecond(Some(v), tz) if utc(tz) => v.checked_mul(1_000_000),
        _ => None,
    }
}

/// A SQL `LIKE` pattern as a glob (`%` is any run, `/` included). `_`
/// is one character of any kind, `/` included, which no glob token is,
/// and `\` escapes the next character: such patterns are left to
/// DataFusion alone.
fn like_to_glob(pattern: &str) -> Option<String> {
    let mut glob = String::new();
    for c in pattern.chars() {
        match c {
            '%' => glob.push_str("**"),
            // `\` escapes in LIKE (its default escape character).
            '_' | '\\' => return None,
            '*' | '?' | '[' | ']' => {
                glob.push('\\');
                glob.push(c);
            }
            c => glob.push(c),
        }
    }
    Some(glob)
}

#[async_trait]
impl TableProvider for RecordsTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::common::Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                let mut probe = Selection::default();
                if self.push_down(f, &mut probe) {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        let mut selection = self.plan.selection().clone();
        // Failed records are rows of the table unless a filter says not.
        selection.failed = true;
        for filter in filters {
            self.push_down(filter, &mut selection);
        }
        let columns: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        let schema = Arc::new(self.schema.project(&columns)?);
        let mut plan = self.plan.part(|_, source| selection.may_match(source));
        plan.set_selection(selection);
        let parts = plan.balanced(self.partitions);
        Ok(Arc::new(RecordsScan::new(
            Arc::clone(&self.catalog),
            Arc::new(plan),
            schema,
            Rows::Columns,
            parts,
        )))
    }
}
