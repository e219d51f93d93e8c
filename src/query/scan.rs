//! The scan under the `records` table (and under a `cat` spread over
//! workers): some of a plan's sources, cut into partitions, each read on
//! a blocking thread that builds batches of at most [`BATCH_ROWS`] rows
//! or [`BATCH_BYTES`] of record text and sends them through a bounded
//! channel, so nothing materializes a whole source.
//!
//! A scan is a node of its own (not DataFusion's streaming table) so that
//! it can be described to a worker and rebuilt there (`distributed/`):
//! everything it reads is named by its plan, its partitions and what its
//! rows are.

use std::borrow::Cow;
use std::fmt;
use std::io::{self, Read, Write};
use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, Int64Builder, LargeBinaryBuilder, LargeStringBuilder, RecordBatch,
    RecordBatchOptions, StringBuilder, TimestampMicrosecondBuilder, UInt64Builder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::common::DataFusionError;
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, Partitioning};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, SendableRecordBatchStream,
};
use tokio::sync::mpsc::Sender;

use crate::catalog::{Catalog, Source};
use crate::extract::{Output, Plan, Position, Selected};
use crate::records::read::{Body, Record};

/// Rows per batch.
const BATCH_ROWS: usize = 8192;
/// Record text per batch.
const BATCH_BYTES: usize = 8 << 20;
/// Output bytes per batch of a `cat` scan: small, since its batches are
/// held in order until their turn to be written.
const LINES_BATCH_BYTES: usize = 1 << 20;
/// The largest record a query holds as text.
const MAX_RECORD_TEXT: u64 = 256 << 20;

/// The column of a `cat` scan: each record's bytes as `cat` writes them.
pub const OUTPUT_COLUMN: &str = "output";

/// What a scan's rows are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// Columns of the `records` table (its schema says which).
    Columns,
    /// One row per record: the bytes `cat` writes for it, its line break
    /// included, in the plan's shape.
    Lines,
    /// One row per record file: its counts, and the size and modification
    /// time of the file they were made of ([`COUNT_COLUMNS`]).
    Counts,
}

/// The columns of a [`Rows::Counts`] scan.
pub const COUNT_COLUMNS: [&str; 7] = [
    "_file_",
    "size",
    "mtime_ns",
    "record_count",
    "failed_count",
    "min_timestamp",
    "max_timestamp",
];

/// The type of each column a `records` table may have: `_file_`,
/// `line`, `timestamp`, `failed` and `record`; any other name is a hive
/// attribute (text, absent where a source has none).
pub fn records_field(name: &str) -> Field {
    match name {
        "_file_" => Field::new(name, DataType::Utf8, false),
        "line" => Field::new(name, DataType::UInt64, false),
        "timestamp" => Field::new(
            name,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        "failed" => Field::new(name, DataType::Boolean, false),
        "record" => Field::new(name, DataType::LargeUtf8, false),
        attr => Field::new(attr, DataType::Utf8, true),
    }
}

/// The schema of a scan of `rows` with `columns` (for [`Rows::Lines`],
/// its one column).
pub fn scan_schema(rows: Rows, columns: &[String]) -> SchemaRef {
    Arc::new(match rows {
        Rows::Columns => Schema::new(columns.iter().map(|c| records_field(c)).collect::<Vec<_>>()),
        Rows::Lines => Schema::new(vec![Field::new(
            OUTPUT_COLUMN,
            DataType::LargeBinary,
            false,
        )]),
        Rows::Counts => Schema::new(vec![
            Field::new(COUNT_COLUMNS[0], DataType::Utf8, false),
            Field::new(COUNT_COLUMNS[1], DataType::UInt64, false),
            Field::new(COUNT_COLUMNS[2], DataType::Int64, false),
            Field::new(COUNT_COLUMNS[3], DataType::UInt64, false),
            Field::new(COUNT_COLUMNS[4], DataType::UInt64, false),
            Field::new(COUNT_COLUMNS[5], DataType::Int64, true),
            Field::new(COUNT_COLUMNS[6], DataType::Int64, true),
        ]),
    })
}

/// Bounds how many partitions read at once in this process (a worker's
/// `--max-tasks`): found in the session's config, absent elsewhere.
#[derive(Debug)]
pub struct ReadSlots(pub Arc<tokio::sync::Semaphore>);

/// A scan of some of a plan's sources.
pub struct RecordsScan {
    pub(crate) catalog: Arc<Catalog>,
    /// The sources this scan reads (on a worker: those of its task).
    pub(crate) plan: Arc<Plan>,
    pub(crate) schema: SchemaRef,
    pub(crate) rows: Rows,
    /// Each partition's sources: indexes into the plan's, in order.
    pub(crate) parts: Vec<Vec<usize>>,
    properties: Arc<PlanProperties>,
}

impl fmt::Debug for RecordsScan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordsScan")
            .field("sources", &self.plan.sources().len())
            .field("partitions", &self.parts.len())
            .field("rows", &self.rows)
            .finish()
    }
}

impl RecordsScan {
    /// A scan of `plan`'s sources with `parts` as its partitions (at
    /// least one partition, which may read nothing).
    pub fn new(
        catalog: Arc<Catalog>,
        plan: Arc<Plan>,
        schema: SchemaRef,
        rows: Rows,
        mut parts: Vec<Vec<usize>>,
    ) -> RecordsScan {
        if parts.is_empty() {
            parts.push(Vec::new());
        }
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(parts.len()),
            EmissionType::Incremental,
            Boundedness::Bounded,
        )
        // Its batches come through a channel, which yields to the
        // runtime's budget.
        .with_scheduling_type(SchedulingType::Cooperative);
        RecordsScan {
            catalog,
            plan,
            schema,
            rows,
            parts,
            properties: Arc::new(properties),
        }
    }

    /// This scan over only the plan's sources `sources` (indexes, in
    /// order), cut into `partitions` parts the way its rows want: by
    /// weight for columns, in runs of neighbours for lines. Parts past
    /// the sources read nothing.
    pub fn narrowed(&self, sources: &[usize], partitions: usize) -> RecordsScan {
        let plan = self.plan.part(|i, _| sources.binary_search(&i).is_ok());
        let mut parts = match self.rows {
            Rows::Columns | Rows::Counts => plan.balanced(partitions),
            Rows::Lines => plan.contiguous(partitions),
        };
        parts.resize(partitions.max(1), Vec::new());
        RecordsScan::new(
            Arc::clone(&self.catalog),
            Arc::new(plan),
            Arc::clone(&self.schema),
            self.rows,
            parts,
        )
    }

    /// The whole plan this scan reads.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    pub fn rows(&self) -> Rows {
        self.rows
    }

    pub fn parts(&self) -> &[Vec<usize>] {
        &self.parts
    }
}

impl DisplayAs for RecordsScan {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RecordsScan: sources={}, partitions={}, rows={:?}",
            self.plan.sources().len(),
            self.parts.len(),
            self.rows
        )
    }
}

impl ExecutionPlan for RecordsScan {
    fn name(&self) -> &str {
        "RecordsScan"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal(
                "a records scan has no children".into(),
            ))
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> datafusion::common::Result<SendableRecordBatchStream> {
        let Some(part) = self.parts.get(partition) else {
            return Err(DataFusionError::Internal(format!(
                "a records scan of {} partitions was asked for partition {partition}",
                self.parts.len()
            )));
        };
        let mut builder = RecordBatchReceiverStreamBuilder::new(Arc::clone(&self.schema), 2);
        // Only query scans wait for a slot: the partitions of a `cat` or
        // of counts are read in order by the coordinator, and one waiting
        // for a slot held by a later one would wait for ever.
        let slots = context
            .session_config()
            .get_extension::<ReadSlots>()
            .filter(|_| self.rows == Rows::Columns)
            .map(|slots| Arc::clone(&slots.0));
        let mut sink = Sink {
            sender: builder.tx(),
            slots,
            held: None,
        };
        let plan = Arc::new(self.plan.part(|i, _| part.binary_search(&i).is_ok()));
        let catalog = Arc::clone(&self.catalog);
        let schema = Arc::clone(&self.schema);
        let rows = self.rows;
        builder.spawn_blocking(move || {
            sink.take_slot();
            let read = match rows {
                Rows::Columns => {
                    let bodies = schema.field_with_name("record").is_ok();
                    let mut batches = Batches::new(schema, sink);
                    plan.visit(&catalog, Position::default(), bodies, &mut batches)
                        .map(|_| batches.flush())
                }
                Rows::Lines => {
                    let mut lines = Lines::new(schema, sink);
                    plan.run(&catalog, Position::default(), &mut lines)
                        .map(|_| lines.send_batch())
                }
                Rows::Counts => counts(&catalog, &plan, schema, &mut sink).map(|()| true),
            };
            read.map(|_| ()).map_err(|e| {
                let message = e.render();
                DataFusionError::External(Box::new(e)).context(message)
            })
        });
        Ok(builder.build())
    }
}

/// Where a partition's batches go, and its place among the partitions
/// reading at once (given up while it waits for the batch to be taken).
struct Sink {
    sender: Sender<datafusion::common::Result<RecordBatch>>,
    slots: Option<Arc<tokio::sync::Semaphore>>,
    held: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Sink {
    /// Waits for a place among the partitions reading at once.
    fn take_slot(&mut self) {
        if let (Some(slots), None) = (&self.slots, &self.held) {
            self.held = futures::executor::block_on(Arc::clone(slots).acquire_owned()).ok();
        }
    }

    /// Sends a finished batch; false when the query stopped reading.
    fn send(&mut self, batch: std::result::Result<RecordBatch, arrow::error::ArrowError>) -> bool {
        let batch = batch.map_err(|e| DataFusionError::ArrowError(Box::new(e), None));
        self.held = None;
        let sent = self.sender.blocking_send(batch).is_ok();
        if sent {
            self.take_slot();
        }
        sent
    }

    /// Whether the query stopped reading.
    fn closed(&self) -> bool {
        self.sender.is_closed()
    }
}

/// Builds batches of the projected columns from selected records.
struct Batches {
    schema: SchemaRef,
    /// For each projected column, what fills it.
    columns: Vec<Column>,
    rows: usize,
    bytes: usize,
    /// Records seen since the last look at whether the query still reads.
    unchecked: usize,
    sink: Sink,
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
    fn new(schema: SchemaRef, sink: Sink) -> Batches {
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
                attr => Column::Attr(attr.to_string(), StringBuilder::new()),
            })
            .collect();
        Batches {
            schema,
            columns,
            rows: 0,
            bytes: 0,
            unchecked: 0,
            sink,
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
        let batch = RecordBatch::try_new_with_options(Arc::clone(&self.schema), arrays, &options);
        if !self.sink.send(batch) {
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
        self.unchecked += 1;
        if self.unchecked >= 1024 {
            self.unchecked = 0;
            if self.sink.closed() {
                return Ok(ControlFlow::Break(()));
            }
        }
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

/// Builds batches of `cat`'s output, one row per record.
struct Lines {
    schema: SchemaRef,
    rows: LargeBinaryBuilder,
    /// The record being written.
    current: Vec<u8>,
    count: usize,
    bytes: usize,
    sink: Sink,
    hung_up: bool,
}

impl Lines {
    fn new(schema: SchemaRef, sink: Sink) -> Lines {
        Lines {
            schema,
            rows: LargeBinaryBuilder::new(),
            current: Vec::new(),
            count: 0,
            bytes: 0,
            sink,
            hung_up: false,
        }
    }

    fn send_batch(&mut self) -> bool {
        if self.count == 0 {
            return !self.hung_up;
        }
        let column: ArrayRef = Arc::new(self.rows.finish());
        self.count = 0;
        self.bytes = 0;
        let batch = RecordBatch::try_new(Arc::clone(&self.schema), vec![column]);
        if !self.sink.send(batch) {
            self.hung_up = true;
        }
        !self.hung_up
    }
}

impl Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if (self.current.len() + bytes.len()) as u64 > MAX_RECORD_TEXT {
            return Err(io::Error::other(format!(
                "a record larger than a read over workers holds ({} MiB); `pchronicle cat` without workers streams it",
                MAX_RECORD_TEXT >> 20
            )));
        }
        self.current.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Output for Lines {
    fn record_end(&mut self, _after: Position) -> io::Result<ControlFlow<()>> {
        self.rows.append_value(&self.current);
        self.bytes += self.current.len();
        self.count += 1;
        self.current.clear();
        if (self.count >= BATCH_ROWS || self.bytes >= LINES_BATCH_BYTES) && !self.send_batch() {
            return Ok(ControlFlow::Break(()));
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// Counts each record file of `plan` and sends a row of its counts, as
/// the count cache would keep them, with what identifies the file read.
fn counts(
    catalog: &Catalog,
    plan: &Plan,
    schema: SchemaRef,
    sink: &mut Sink,
) -> crate::error::Result<()> {
    let mut columns = CountColumns::default();
    for source in plan.sources() {
        let path = plan.base().join(&source.file);
        let format = crate::records::RecordFormat::from_name(&source.file)
            .or_else(|| {
                path.file_name()
                    .and_then(|n| n.to_str())
                    .and_then(crate::records::RecordFormat::from_name)
            })
            .ok_or_else(|| {
                crate::error::Error::at(
                    crate::error::ErrorCode::RecordFileUnreadable,
                    &path,
                    "not a record file",
                )
            })?;
        let (file, stat) = catalog.open_file(&path)?;
        let stats = crate::records::count_open(file, format).map_err(|e| {
            crate::error::Error::reading(crate::error::ErrorCode::RecordFileUnreadable, &path, &e)
        })?;
        columns.file.append_value(&source.file);
        columns.size.append_value(stat.size);
        columns.mtime_ns.append_value(stat.mtime_ns());
        columns.records.append_value(stats.record_count);
        columns.failed.append_value(stats.failed_count);
        columns.min.append_option(stats.min_timestamp);
        columns.max.append_option(stats.max_timestamp);
        columns.rows += 1;
        if columns.rows >= 1024 && !sink.send(columns.finish(&schema)) {
            return Ok(());
        }
    }
    if columns.rows > 0 {
        sink.send(columns.finish(&schema));
    }
    Ok(())
}

#[derive(Default)]
struct CountColumns {
    file: StringBuilder,
    size: UInt64Builder,
    mtime_ns: Int64Builder,
    records: UInt64Builder,
    failed: UInt64Builder,
    min: Int64Builder,
    max: Int64Builder,
    rows: usize,
}

impl CountColumns {
    fn finish(
        &mut self,
        schema: &SchemaRef,
    ) -> std::result::Result<RecordBatch, arrow::error::ArrowError> {
        self.rows = 0;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.file.finish()),
            Arc::new(self.size.finish()),
            Arc::new(self.mtime_ns.finish()),
            Arc::new(self.records.finish()),
            Arc::new(self.failed.finish()),
            Arc::new(self.min.finish()),
            Arc::new(self.max.finish()),
        ];
        RecordBatch::try_new(Arc::clone(schema), columns)
    }
}
