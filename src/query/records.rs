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
//! A scan is split into partitions of about equal bytes, each read on a
//! blocking thread that builds batches of at most [`BATCH_ROWS`] rows or
//! [`BATCH_BYTES`] of record text and sends them through a bounded
//! channel: nothing materializes a whole source.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::fmt;
use std::io::{self, Read};
use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, LargeStringBuilder, RecordBatch, RecordBatchOptions, StringBuilder,
    TimestampMicrosecondBuilder, UInt64Builder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::DataFusionError;
use datafusion::datasource::TableType;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use datafusion::scalar::ScalarValue;
use tokio::sync::mpsc::Sender;

use crate::catalog::{Catalog, Source};
use crate::extract::{Glob, Plan, Position, Selected, Selection};
use crate::records::read::{Body, Record};

/// Rows per batch.
const BATCH_ROWS: usize = 8192;
/// Record text per batch.
const BATCH_BYTES: usize = 8 << 20;
/// The largest record a query holds as text.
const MAX_RECORD_TEXT: u64 = 256 << 20;

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
        let mut fields = vec![Field::new("_file_", DataType::Utf8, false)];
        fields.extend(attrs.iter().map(|a| Field::new(a, DataType::Utf8, true)));
        fields.extend([
            Field::new("line", DataType::UInt64, false),
            Field::new(
                "timestamp",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new("failed", DataType::Boolean, false),
            Field::new("record", DataType::LargeUtf8, false),
        ]);
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
        let bodies = schema.field_with_name("record").is_ok();
        let narrowed = self.plan.part(|_, source| selection.may_match(source));
        let partition = |keep: &dyn Fn(usize) -> bool| -> Arc<dyn PartitionStream> {
            let mut part = narrowed.part(|i, _| keep(i));
            part.set_selection(selection.clone());
            Arc::new(RecordsPartition {
                plan: Arc::new(part),
                catalog: Arc::clone(&self.catalog),
                schema: Arc::clone(&schema),
                attrs: self.attrs.clone(),
                bodies,
            })
        };
        let mut partitions: Vec<Arc<dyn PartitionStream>> = narrowed
            .balanced(self.partitions)
            .into_iter()
            .map(|group| partition(&|i| group.binary_search(&i).is_ok()))
            .collect();
        if partitions.is_empty() {
            // No source: one partition that yields no rows.
            partitions.push(partition(&|_| false));
        }
        Ok(Arc::new(StreamingTableExec::try_new(
            schema,
            partitions,
            None,
            Vec::new(),
            false,
            None,
        )?))
    }
}

/// One partition of a scan: some of the plan's sources.
struct RecordsPartition {
    plan: Arc<Plan>,
    catalog: Arc<Catalog>,
    schema: SchemaRef,
    attrs: Vec<String>,
    bodies: bool,
}

impl fmt::Debug for RecordsPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordsPartition")
            .field("sources", &self.plan.sources().len())
            .finish()
    }
}

impl PartitionStream for RecordsPartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut builder = RecordBatchReceiverStreamBuilder::new(Arc::clone(&self.schema), 2);
        let sender = builder.tx();
        let plan = Arc::clone(&self.plan);
        let catalog = Arc::clone(&self.catalog);
        let mut batches = Batches::new(Arc::clone(&self.schema), &self.attrs, sender);
        let bodies = self.bodies;
        builder.spawn_blocking(move || {
            let read = plan.visit(&catalog, Position::default(), bodies, &mut batches);
            match read {
                Ok(_) => {
                    batches.flush();
                    Ok(())
                }
                Err(e) => {
                    let message = e.render();
                    Err(DataFusionError::External(Box::new(e)).context(message))
                }
            }
        });
        builder.build()
    }
}

/// Builds batches of the projected columns from selected records.
struct Batches {
    schema: SchemaRef,
    /// For each projected column, what fills it.
    columns: Vec<Column>,
    rows: usize,
    bytes: usize,
    sender: Sender<datafusion::common::Result<RecordBatch>>,
    hung_up: bool,
}

enum Column {
    File(StringBuilder),
    Attr(String, StringBuilder),
    Line(UInt64Builder),
    Timestamp(TimestampMicrosecondBuilder),
    Failed(BooleanBuilder),
    Record(LargeStringBuilder),
}

impl Batches {
    fn new(
        schema: SchemaRef,
        attrs: &[String],
        sender: Sender<datafusion::common::Result<RecordBatch>>,
    ) -> Batches {
        let columns = schema
            .fields()
            .iter()
            .map(|field| match field.name().as_str() {
                "_file_" => Column::File(StringBuilder::new()),
                "line" => Column::Line(UInt64Builder::new()),
                "timestamp" => {
                    Column::Timestamp(TimestampMicrosecondBuilder::new().with_timezone("UTC"))
                }
                "failed" => Column::Failed(BooleanBuilder::new()),
                "record" => Column::Record(LargeStringBuilder::new()),
                attr => {
                    debug_assert!(attrs.iter().any(|a| a == attr));
                    Column::Attr(attr.to_string(), StringBuilder::new())
                }
            })
            .collect();
        Batches {
            schema,
            columns,
            rows: 0,
            bytes: 0,
            sender,
            hung_up: false,
        }
    }

    /// Sends what is built; false when the query stopped reading.
    fn flush(&mut self) -> bool {
        if self.rows == 0 {
            return !self.hung_up;
        }
        let arrays: Vec<ArrayRef> = self
            .columns
            .iter_mut()
            .map(|c| -> ArrayRef {
                match c {
                    Column::File(b) | Column::Attr(_, b) => Arc::new(b.finish()),
                    Column::Line(b) => Arc::new(b.finish()),
                    Column::Timestamp(b) => Arc::new(b.finish()),
                    Column::Failed(b) => Arc::new(b.finish()),
                    Column::Record(b) => Arc::new(b.finish()),
                }
            })
            .collect();
        // A projection of no columns (`count(*)`) still has rows.
        let options = RecordBatchOptions::new().with_row_count(Some(self.rows));
        self.rows = 0;
        self.bytes = 0;
        let batch = RecordBatch::try_new_with_options(Arc::clone(&self.schema), arrays, &options)
            .map_err(|e| DataFusionError::ArrowError(Box::new(e), None));
        if self.sender.blocking_send(batch).is_err() {
            self.hung_up = true;
        }
        !self.hung_up
    }
}

impl Selected for Batches {
    fn selected(
        &mut self,
        source: &Source,
        file: &str,
        record: Record<'_>,
        _after: Position,
    ) -> io::Result<ControlFlow<()>> {
        let failed = record.failed;
        let mut body = Some(record.body);
        for column in &mut self.columns {
            match column {
                Column::File(b) => b.append_value(file),
                Column::Attr(name, b) => b.append_option(source.path_attrs.get(name.as_str())),
                Column::Line(b) => b.append_value(record.line),
                Column::Timestamp(b) => b.append_option(record.timestamp),
                Column::Failed(b) => b.append_value(failed),
                Column::Record(b) => {
                    let body = body.take().expect("one record column per schema");
                    self.bytes += append_text(b, body)?;
                }
            }
        }
        self.rows += 1;
        if (self.rows >= BATCH_ROWS || self.bytes >= BATCH_BYTES) && !self.flush() {
            return Ok(ControlFlow::Break(()));
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// Appends a record's text to the `record` column: as stored (a valid
/// record is UTF-8, it was validated), a failed one with its invalid UTF-8
/// replaced. Returns the bytes appended.
fn append_text(column: &mut LargeStringBuilder, body: Body<'_>) -> io::Result<usize> {
    let bytes = match body {
        Body::Bytes(bytes) => Cow::Borrowed(bytes),
        Body::Stream { len, .. } if len > MAX_RECORD_TEXT => {
            return Err(io::Error::other(format!(
                "a record of {len} bytes is larger than a query holds ({} MiB); `pchronicle cat` streams it",
                MAX_RECORD_TEXT >> 20
            )));
        }
        Body::Stream { reader, len } => {
            let mut all = Vec::with_capacity(len as usize);
            reader.take(MAX_RECORD_TEXT).read_to_end(&mut all)?;
            Cow::Owned(all)
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    column.append_value(&text);
    Ok(text.len())
}
