//! `pchronicle worker`: runs the parts of plans a coordinator sends,
//! reading the warehouse roots it serves itself.
//!
//! It is datafusion-distributed's worker service (gRPC over HTTP/2), with
//! three things of ours around it: every request must carry the token
//! (checked on the request's head, before any of its body is decoded),
//! a scan is rebuilt only over the roots it serves (`roots.rs`), and at
//! most `max_tasks` partitions read at once, within `max_memory` bytes
//! for what its operators hold.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use datafusion::common::DataFusionError;
use datafusion::execution::SessionState;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion_distributed::{
    DistributedExt, Worker, WorkerPlanRewriteEvent, WorkerPlanRewriteEventResponse,
    WorkerQueryContext,
};

use super::codec::{ScanCodec, build};
use super::coordinator::{Channels, Workers};
use super::roots::Roots;
use crate::catalog::CatalogOptions;
use crate::error::{Error, ErrorCode, Result};
use crate::query::scan::ReadSlots;

/// The largest message a worker decodes (a plan part names its sources:
/// some hundreds of bytes each).
const MAX_MESSAGE: usize = 256 << 20;

/// What `pchronicle worker` was asked for.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    pub listen: SocketAddr,
    /// The warehouse roots it serves.
    pub warehouses: Vec<PathBuf>,
    /// The token every request must bring; `None`: none (loopback only).
    pub token: Option<String>,
    /// Bytes its sorts, groupings and joins may hold (past it a query
    /// fails, nothing spills); `None`: unbounded.
    pub max_memory: Option<usize>,
    /// Partitions reading at once; more wait.
    pub max_tasks: usize,
    /// After SIGTERM, how long the parts in flight may still run.
    pub drain: Duration,
    pub catalog: CatalogOptions,
}

/// Serves until SIGINT or SIGTERM, then lets what runs end (within
/// `drain`). `ready` is told the address once it listens.
pub fn run(options: WorkerOptions, ready: Box<dyn FnOnce(SocketAddr) + Send>) -> Result<()> {
    if options.token.is_none() && !options.listen.ip().is_loopback() {
        return Err(Error::new(
            ErrorCode::ServeListen,
            format!(
                "{} is not a loopback address: a worker without a token would read the warehouse for anyone who reaches it",
                options.listen
            ),
        ));
    }
    let roots = Arc::new(Roots::new(&options.warehouses, options.catalog.clone())?);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("pchronicle-worker")
        .enable_all()
        .build()
        .map_err(|e| Error::new(ErrorCode::Io, format!("cannot start the runtime: {e}")))?;
    let served = runtime.block_on(serve(&options, roots, ready));
    runtime.shutdown_timeout(Duration::from_secs(2));
    served
}

async fn serve(
    options: &WorkerOptions,
    roots: Arc<Roots>,
    ready: Box<dyn FnOnce(SocketAddr) + Send>,
) -> Result<()> {
    let (listener, local) = crate::server::bind(options.listen)?;
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| Error::new(ErrorCode::ServeListen, e.to_string()))?;
    let mut runtime_env = RuntimeEnvBuilder::new();
    if let Some(bytes) = options.max_memory {
        runtime_env = runtime_env
            .with_memory_limit(bytes, 1.0)
            .with_disk_manager_builder(
                datafusion::execution::disk_manager::DiskManagerBuilder::default()
                    .with_mode(datafusion::execution::disk_manager::DiskManagerMode::Disabled),
            );
    }
    let runtime_env = runtime_env
        .build_arc()
        .map_err(|e| Error::new(ErrorCode::Io, e.to_string()))?;
    let slots = Arc::new(tokio::sync::Semaphore::new(options.max_tasks.max(1)));
    // Stages that read other workers' rows (after a shuffle) reach them
    // as the coordinator does: with the token, pinging.
    let peers = Channels::new(&Workers {
        urls: Vec::new(),
        token: options.token.clone(),
        optional: false,
    })?;
    // What one function may make of one batch: a quarter of the memory
    // bound, as a query's on the coordinator.
    let most = options.max_memory.map(|bytes| (bytes / 4).max(1 << 20));
    let session = move |ctx: WorkerQueryContext| {
        let roots = Arc::clone(&roots);
        let slots = Arc::clone(&slots);
        let peers = peers.clone();
        async move { session(ctx, roots, slots, peers, most) }
    };
    // The build it says it is: its own, unless told to claim another
    // (which is how the refusal of mixed builds is tested).
    let claimed = std::env::var("PCHRONICLE_WORKER_BUILD").unwrap_or_else(|_| build());
    let worker = Worker::from_session_builder(session)
        .with_runtime_env(runtime_env)
        .with_version(claimed);
    let token = options
        .token
        .as_ref()
        .map(|t| format!("Bearer {t}").into_bytes());
    let service = tonic::service::interceptor::InterceptedService::new(
        worker
            .into_worker_server()
            .max_decoding_message_size(MAX_MESSAGE),
        move |request: tonic::Request<()>| check_token(token.as_deref(), request),
    );
    let (stopped_tx, stopped) = tokio::sync::oneshot::channel::<()>();
    // Caught from now on: a SIGTERM right after READY stops it cleanly.
    let stop = crate::server::stop();
    let signal = async move {
        stop.await;
        log::info!("stopping: no new parts are taken, those running may end");
        let _ = stopped_tx.send(());
    };
    log::info!("worker of pchronicle {} listening on {local}", build());
    ready(local);
    let server = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(5)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .add_service(service)
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener),
            signal,
        );
    let mut server = std::pin::pin!(server);
    let drain = options.drain;
    let ended = tokio::select! {
        ended = &mut server => ended,
        () = async {
            let _ = stopped.await;
            tokio::time::sleep(drain).await;
        } => {
            log::warn!("parts still running {} s after SIGTERM were stopped", drain.as_secs());
            Ok(())
        }
    };
    ended.map_err(|e| Error::new(ErrorCode::ServeListen, format!("serving failed: {e}")))
}

/// The session a part of a plan runs in: our scans and functions, the
/// bound on partitions reading at once, and only the plan nodes a read
/// is made of.
fn session(
    ctx: WorkerQueryContext,
    roots: Arc<Roots>,
    slots: Arc<tokio::sync::Semaphore>,
    peers: Channels,
    most: Option<usize>,
) -> std::result::Result<SessionState, DataFusionError> {
    let mut builder = ctx.builder;
    if let Some(config) = builder.config().as_mut() {
        config.set_extension(Arc::new(ReadSlots(slots)));
    }
    let mut state = builder
        .with_distributed_user_codec(ScanCodec::worker(roots))
        .with_distributed_channel_resolver(peers)
        .with_distributed_worker_plan_rewrite_handler(only_reads)
        .build();
    datafusion_functions_json::register_all(&mut state)?;
    if let Some(most) = most {
        crate::query::bounds::bound_state(&mut state, most)?;
    }
    Ok(state)
}

/// The plan nodes a worker runs: our scans, the network boundaries and
/// the operators of DataFusion that compute (no scan of files, no sink,
/// nothing that reads or writes anything but rows): a part of a plan
/// holding any other is refused before it runs.
const RUNS: &[&str] = &[
    "RecordsScan",
    "NetworkShuffleExec",
    "NetworkCoalesceExec",
    "NetworkBroadcastExec",
    "BroadcastExec",
    "ChildrenIsolatorUnionExec",
    "ProjectionExec",
    "FilterExec",
    "AggregateExec",
    "SortExec",
    "PartialSortExec",
    "SortPreservingMergeExec",
    "HashJoinExec",
    "NestedLoopJoinExec",
    "CrossJoinExec",
    "SortMergeJoinExec",
    "SymmetricHashJoinExec",
    "RepartitionExec",
    "CoalescePartitionsExec",
    "CoalesceBatchesExec",
    "GlobalLimitExec",
    "LocalLimitExec",
    "UnionExec",
    "InterleaveExec",
    "EmptyExec",
    "PlaceholderRowExec",
    "WindowAggExec",
    "BoundedWindowAggExec",
    "CooperativeExec",
    "UnnestExec",
    // `generate_series` and `range`: rows made from numbers.
    "LazyMemoryExec",
];

/// Refuses a plan holding a node not in [`RUNS`]; a `DataSourceExec` is
/// let through only over rows the plan itself holds (the `sources`
/// table).
fn only_reads(
    ev: WorkerPlanRewriteEvent<'_>,
) -> datafusion::common::Result<WorkerPlanRewriteEventResponse> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::datasource::source::DataSourceExec;
    ev.plan.apply(|node| {
        let in_memory = node
            .downcast_ref::<DataSourceExec>()
            .is_some_and(|d| d.data_source().is::<MemorySourceConfig>());
        // A name may say more after it: `SortExec(TopK)`.
        let name = node.name();
        let kind = name.split_once('(').map_or(name, |(kind, _)| kind);
        if in_memory || RUNS.contains(&kind) {
            Ok(TreeNodeRecursion::Continue)
        } else {
            Err(super::codec::carried(Error::new(
                ErrorCode::WorkerRefused,
                format!(
                    "a part of a plan holding {}, which a worker does not run",
                    node.name()
                ),
            )))
        }
    })?;
    Ok(WorkerPlanRewriteEventResponse::new(ev.plan))
}

/// Lets a request through when it carries the token (compared in time
/// that does not depend on where it differs).
fn check_token(
    token: Option<&[u8]>,
    request: tonic::Request<()>,
) -> std::result::Result<tonic::Request<()>, tonic::Status> {
    let Some(token) = token else {
        return Ok(request);
    };
    let given = request
        .metadata()
        .get("authorization")
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    let same = given.len() == token.len()
        && given
            .iter()
            .zip(token)
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0;
    if same {
        Ok(request)
    } else {
        Err(tonic::Status::unauthenticated(format!(
            "error[{}]: a request without this worker's token",
            ErrorCode::WorkerToken
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::execution::config::SessionConfig;
    use datafusion::physical_plan::ExecutionPlan;
    use datafusion::physical_plan::empty::EmptyExec;
    use datafusion::physical_plan::union::UnionExec;
    use datafusion::physical_plan::work_table::WorkTableExec;
    use datafusion_distributed::WorkerPlanRewriteEvent;

    use super::{check_token, only_reads};

    fn runs(plan: Arc<dyn ExecutionPlan>) -> bool {
        let config = SessionConfig::new();
        only_reads(WorkerPlanRewriteEvent {
            plan,
            session_config: &config,
        })
        .is_ok()
    }

    #[test]
    fn a_part_holding_anything_but_a_read_is_refused() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let empty = || Arc::new(EmptyExec::new(Arc::clone(&schema))) as Arc<dyn ExecutionPlan>;
        assert!(runs(empty()));
        assert!(runs(UnionExec::try_new(vec![empty(), empty()]).unwrap()));
        let other = Arc::new(WorkTableExec::new("t".into(), Arc::clone(&schema), None).unwrap())
            as Arc<dyn ExecutionPlan>;
        assert!(!runs(Arc::clone(&other)));
        // Anywhere in the part.
        assert!(!runs(UnionExec::try_new(vec![empty(), other]).unwrap()));
    }

    #[test]
    fn only_a_request_with_the_token_is_let_through() {
        let token = b"Bearer right".as_slice();
        let with = |value: Option<&str>| {
            let mut request = tonic::Request::new(());
            if let Some(value) = value {
                request
                    .metadata_mut()
                    .insert("authorization", value.parse().unwrap());
            }
            check_token(Some(token), request).is_ok()
        };
        assert!(with(Some("Bearer right")));
        assert!(!with(Some("Bearer wrong")));
        assert!(!with(Some("Bearer righ")));
        assert!(!with(None));
        assert!(check_token(None, tonic::Request::new(())).is_ok());
    }
}
