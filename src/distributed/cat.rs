//! `cat` over workers, byte for byte the local `cat`.
//!
//! The plan's sources are cut into runs of neighbours of about equal
//! bytes, one run per task, each read as one partition whose rows are its
//! records' output bytes in stored order. Task `t` is partition `t` of
//! the coordinator's network boundary, so reading those partitions one
//! after the other gives the sources in `_file_` order. All of them read
//! at once meanwhile, each a few batches ahead ([`READ_AHEAD`]) and
//! within its stream's byte budget ([`CONNECTION_BUDGET`]).

use std::collections::VecDeque;
use std::fmt;
use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::array::{Array, LargeBinaryArray, RecordBatch};
use arrow::datatypes::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::DataFusionError;
use datafusion::common::tree_node::TreeNode;
use datafusion::datasource::TableType;
use datafusion::execution::config::SessionConfig;
use datafusion::execution::{SessionStateBuilder, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_expr::{EquivalenceProperties, Partitioning};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties,
    SendableRecordBatchStream,
};
use datafusion::prelude::SessionContext;
use datafusion_distributed::{DistributedExt, NetworkCoalesceExec};
use futures::StreamExt;
use tokio::sync::mpsc;

use super::coordinator::{Channels, Workers, admit, distribute, tasks_for};
use crate::catalog::Catalog;
use crate::error::{Error, ErrorCode, Result};
use crate::extract::{Output, Plan, Position};
use crate::query::scan::{RecordsScan, Rows, scan_schema};

/// Batches each partition may read ahead of the one being written.
const READ_AHEAD: usize = 4;

/// Bytes each task's stream may hold on the coordinator before the
/// worker is made to wait.
const CONNECTION_BUDGET: usize = 16 << 20;

/// A partition's batch, or its end (`None`).
type Queued = datafusion::common::Result<Option<RecordBatch>>;

/// Writes `plan`'s records to `out` as `Plan::run` does, read by
/// `workers`.
pub fn cat(
    workers: &Workers,
    catalog: Arc<Catalog>,
    plan: Plan,
    out: &mut dyn Output,
) -> Result<()> {
    let mut left = plan.selection().limit.unwrap_or(u64::MAX);
    let written =
        |e: std::io::Error| Error::new(ErrorCode::Io, format!("writing the records: {e}"));
    spread(workers, catalog, plan, Rows::Lines, |batch| {
        let Some(lines) = batch.column(0).as_any().downcast_ref::<LargeBinaryArray>() else {
            return Err(Error::new(
                ErrorCode::Io,
                "a worker sent rows of another kind",
            ));
        };
        for i in 0..lines.len() {
            if left == 0 {
                return Ok(ControlFlow::Break(()));
            }
            left -= 1;
            out.write_all(lines.value(i)).map_err(written)?;
            if out
                .record_end(Position::default())
                .map_err(written)?
                .is_break()
            {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    })
}

/// Reads `plan` as `rows` on `workers`, its sources cut into runs of
/// neighbours, and hands the batches to `each` in the plan's order until
/// it says stop.
pub(crate) fn spread(
    workers: &Workers,
    catalog: Arc<Catalog>,
    plan: Plan,
    rows: Rows,
    mut each: impl FnMut(RecordBatch) -> Result<ControlFlow<()>>,
) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("pchronicle-spread")
        .enable_all()
        .build()
        .map_err(|e| Error::new(ErrorCode::Io, format!("cannot start the runtime: {e}")))?;
    let failed = |e: DataFusionError| super::error_of(&e, ErrorCode::Io);
    // Held here, so that the catalog is never dropped (and its own
    // runtime with it) inside this runtime.
    let kept = Arc::clone(&catalog);
    let ran = runtime.block_on(async {
        let channels = Channels::new(workers)?;
        let urls = admit(workers, &channels).await?;
        let tasks = tasks_for(urls.len());
        // One partition a task: a task's partitions share one stream
        // with one byte budget, and a later partition waiting for its
        // turn could hold up an earlier one.
        let parts = plan.contiguous(1);
        let scan = Arc::new(RecordsScan::new(
            catalog,
            Arc::new(plan),
            scan_schema(rows, &[]),
            rows,
            parts,
        ));
        let boundary = NetworkCoalesceExec::try_new(scan, tasks, 1).map_err(failed)?;
        let head = Arc::new(InOrder::new(Arc::new(boundary)));
        // One partition throughout: nothing may be put between the
        // boundary and the scan (a round-robin there would send rows to
        // partitions never read).
        let config = SessionConfig::new()
            .with_target_partitions(1)
            .with_round_robin_repartition(false);
        let builder = distribute(
            SessionStateBuilder::new()
                .with_default_features()
                .with_config(config),
            urls,
            channels,
            tasks,
        )?
        .with_distributed_worker_connection_buffer_budget_bytes(CONNECTION_BUDGET)
        .map_err(failed)?;
        let ctx = SessionContext::new_with_state(builder.build());
        ctx.register_table("spread", Arc::new(Given(head)))
            .map_err(failed)?;
        let frame = ctx.sql("SELECT * FROM spread").await.map_err(failed)?;
        let planned = frame.create_physical_plan().await.map_err(failed)?;
        let reshuffled = planned
            .exists(|node| Ok(node.name() == "RepartitionExec"))
            .map_err(failed)?;
        if reshuffled {
            return Err(Error::new(
                ErrorCode::Io,
                "the read was planned with its rows reshuffled, which would lose their order",
            ));
        }
        let mut stream =
            datafusion::physical_plan::execute_stream(planned, ctx.task_ctx()).map_err(failed)?;
        while let Some(batch) = stream.next().await {
            if each(batch.map_err(failed)?)?.is_break() {
                break;
            }
        }
        Ok(())
    });
    // What still reads for the plan goes with the runtime.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    drop(kept);
    ran
}

/// A table whose scan is a plan made beforehand.
#[derive(Debug)]
struct Given(Arc<InOrder>);

#[async_trait]
impl TableProvider for Given {
    fn schema(&self) -> SchemaRef {
        self.0.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::clone(&self.0) as Arc<dyn ExecutionPlan>)
    }
}

/// One partition: its input's partitions one after the other, all read
/// at once a few batches ahead.
#[derive(Debug)]
pub(crate) struct InOrder {
    input: Arc<dyn ExecutionPlan>,
    properties: Arc<PlanProperties>,
}

impl InOrder {
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>) -> InOrder {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        InOrder {
            input,
            properties: Arc::new(properties),
        }
    }
}

impl DisplayAs for InOrder {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InOrder")
    }
}

impl ExecutionPlan for InOrder {
    fn name(&self) -> &str {
        "InOrder"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        match (children.pop(), children.is_empty()) {
            (Some(input), true) => Ok(Arc::new(InOrder::new(input))),
            _ => Err(DataFusionError::Internal("InOrder has one input".into())),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> datafusion::common::Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "InOrder has one partition, not {partition}"
            )));
        }
        let mut readers = tokio::task::JoinSet::new();
        let mut queues = VecDeque::new();
        for i in 0..self.input.output_partitioning().partition_count() {
            let mut stream = self.input.execute(i, Arc::clone(&context))?;
            // `Ok(None)` closes a partition: a queue that ends without it
            // lost its reader, which is an error, never a shorter output.
            let (tx, rx) = mpsc::channel::<Queued>(READ_AHEAD);
            readers.spawn(async move {
                while let Some(batch) = stream.next().await {
                    let failed = batch.is_err();
                    if tx.send(batch.map(Some)).await.is_err() || failed {
                        return;
                    }
                }
                let _ = tx.send(Ok(None)).await;
            });
            queues.push_back(rx);
        }
        // The readers go when the stream is dropped (the JoinSet with it).
        let batches =
            futures::stream::unfold((queues, readers), |(mut queues, readers)| async move {
                loop {
                    let next = queues.front_mut()?.recv().await;
                    let batch = match next {
                        Some(Ok(Some(batch))) => Ok(batch),
                        Some(Ok(None)) => {
                            queues.pop_front();
                            continue;
                        }
                        Some(Err(e)) => Err(e),
                        None => Err(DataFusionError::Execution(
                            "a partition's reader stopped before its end".into(),
                        )),
                    };
                    if batch.is_err() {
                        // Nothing after an error.
                        queues.clear();
                    }
                    return Some((batch, (queues, readers)));
                }
            });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            batches,
        )))
    }
}
