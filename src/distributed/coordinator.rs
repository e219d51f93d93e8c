//! The coordinator's side: which workers, whether each may be used, and
//! a DataFusion session that plans over them.
//!
//! Before anything is planned every worker is asked who it is (one call,
//! within [`ADMIT_TIME`]): one that does not answer is
//! `PCHRONICLE_WORKER_UNAVAILABLE` (or left out with `--workers-optional`),
//! one that refuses the token `PCHRONICLE_WORKER_TOKEN`, one of another
//! build `PCHRONICLE_WORKER_VERSION`. Connections carry the token on every
//! request, give up connecting after [`CONNECT_TIME`], and ping the worker
//! while a query runs, so a worker that dies mid-query fails it within
//! seconds (`PCHRONICLE_WORKER_LOST`) instead of hanging it.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::common::DataFusionError;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::grpc::{BoxCloneSyncChannel, create_worker_client};
use datafusion_distributed::{
    ChannelResolver, DesiredTaskCountEvent, DesiredTaskCountEventResponse, DesiredTaskCountHandler,
    DistributedExt, DistributedLeafExec, GetWorkerInfoRequest, ScaleUpLeafNodeEvent,
    ScaleUpLeafNodeEventResponse, ScaleUpLeafNodeHandler, SessionStateBuilderExt, WorkerChannel,
    WorkerResolver,
};
use parking_lot::Mutex;
use url::Url;

use super::codec::{ScanCodec, build};
use crate::error::{Error, ErrorCode, Result};
use crate::query::scan::{RecordsScan, Rows};

/// How long a worker has to answer who it is before a query.
const ADMIT_TIME: Duration = Duration::from_secs(5);
/// How long connecting to a worker may take.
const CONNECT_TIME: Duration = Duration::from_secs(5);
/// Pings on a connection in use, and how long an answer may take: a
/// worker gone without a word is noticed within their sum.
const PING_EVERY: Duration = Duration::from_secs(2);
const PING_ANSWER: Duration = Duration::from_secs(4);

/// The workers reads are spread over (`--workers`).
#[derive(Debug, Clone)]
pub struct Workers {
    pub urls: Vec<Url>,
    /// Sent as `Authorization: Bearer TOKEN` on every request.
    pub token: Option<String>,
    /// A worker that does not answer is left out instead of failing the
    /// command (`--workers-optional`).
    pub optional: bool,
}

static CONFIGURED: OnceLock<Arc<Workers>> = OnceLock::new();

/// Makes `workers` the ones every read of this process spreads over.
pub fn configure(workers: Workers) {
    let _ = CONFIGURED.set(Arc::new(workers));
}

/// The workers configured for this process, if any.
pub fn configured() -> Option<Arc<Workers>> {
    CONFIGURED.get().cloned()
}

impl Workers {
    /// Workers from `--workers` (comma-separated `HOST:PORT` or
    /// `http://HOST:PORT`).
    pub fn parse(list: &str, token: Option<String>, optional: bool) -> Result<Workers> {
        let mut urls = Vec::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let text = if item.contains("://") {
                item.to_string()
            } else {
                format!("http://{item}")
            };
            let url = Url::parse(&text)
                .ok()
                .filter(|u| u.scheme() == "http" && u.host().is_some() && u.port().is_some())
                .ok_or_else(|| {
                    Error::new(
                        ErrorCode::WorkersInvalid,
                        format!("{item:?} is not a worker address (HOST:PORT or http://HOST:PORT)"),
                    )
                })?;
            if !urls.contains(&url) {
                urls.push(url);
            }
        }
        if urls.is_empty() {
            return Err(Error::new(
                ErrorCode::WorkersInvalid,
                "--workers names no worker",
            ));
        }
        Ok(Workers {
            urls,
            token: token.filter(|t| !t.is_empty()),
            optional,
        })
    }
}

/// Connections to workers: one per worker, made once, carrying the
/// token.
#[derive(Clone)]
pub(crate) struct Channels {
    token: Option<http::HeaderValue>,
    made: Arc<Mutex<HashMap<Url, BoxCloneSyncChannel>>>,
}

impl Channels {
    pub(crate) fn new(workers: &Workers) -> Result<Channels> {
        let token = match &workers.token {
            None => None,
            Some(token) => Some(
                http::HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                    Error::new(
                        ErrorCode::WorkersInvalid,
                        "the worker token holds characters a header cannot",
                    )
                })?,
            ),
        };
        Ok(Channels {
            token,
            made: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    fn channel(&self, url: &Url) -> std::result::Result<BoxCloneSyncChannel, DataFusionError> {
        let mut made = self.made.lock();
        if let Some(channel) = made.get(url) {
            return Ok(channel.clone());
        }
        let endpoint = tonic::transport::Endpoint::from_shared(url.to_string())
            .map_err(|e| DataFusionError::External(Box::new(e)))?
            .connect_timeout(CONNECT_TIME)
            .tcp_keepalive(Some(Duration::from_secs(10)))
            .http2_keep_alive_interval(PING_EVERY)
            .keep_alive_timeout(PING_ANSWER)
            .keep_alive_while_idle(true);
        // Connected at first use, and again after a connection is lost.
        let channel = endpoint.connect_lazy();
        let token = self.token.clone();
        let with_token = tower::ServiceBuilder::new()
            .map_request(move |mut request: http::Request<tonic::body::Body>| {
                if let Some(token) = &token {
                    request
                        .headers_mut()
                        .insert(http::header::AUTHORIZATION, token.clone());
                }
                request
            })
            .service(channel);
        let channel = BoxCloneSyncChannel::new(with_token);
        made.insert(url.clone(), channel.clone());
        Ok(channel)
    }
}

#[async_trait]
impl ChannelResolver for Channels {
    async fn get_worker_client_for_url(
        &self,
        url: &Url,
    ) -> std::result::Result<Box<dyn WorkerChannel>, DataFusionError> {
        self.channel(url).map(create_worker_client)
    }
}

/// The workers of `workers` that may be used now: each asked who it is.
pub(crate) async fn admit(workers: &Workers, channels: &Channels) -> Result<Vec<Url>> {
    let asked = workers.urls.iter().map(|url| async move {
        let answer = async {
            let mut client = create_worker_client(channels.channel(url)?);
            client.get_worker_info(GetWorkerInfoRequest {}).await
        };
        let answer = tokio::time::timeout(ADMIT_TIME, answer).await;
        (url, answer)
    });
    let mut admitted = Vec::new();
    let mut unavailable = Vec::new();
    for (url, answer) in futures::future::join_all(asked).await {
        match answer {
            Ok(Ok(info)) if info.version == build() => admitted.push(url.clone()),
            Ok(Ok(info)) => {
                return Err(Error::new(
                    ErrorCode::WorkerVersion,
                    format!(
                        "the worker at {url} is pchronicle {}, this is {}",
                        if info.version.is_empty() {
                            "(of no version)"
                        } else {
                            &info.version
                        },
                        build()
                    ),
                ));
            }
            Ok(Err(e)) if ErrorCode::parse_in(&e.to_string()) == Some(ErrorCode::WorkerToken) => {
                return Err(Error::new(
                    ErrorCode::WorkerToken,
                    format!("the worker at {url} refused the token"),
                ));
            }
            Ok(Err(e)) => unavailable.push(format!("{url} ({})", one_line(&e.to_string()))),
            Err(_) => unavailable.push(format!(
                "{url} (no answer within {} s)",
                ADMIT_TIME.as_secs()
            )),
        }
    }
    if !unavailable.is_empty() && (!workers.optional || admitted.is_empty()) {
        return Err(Error::new(
            ErrorCode::WorkerUnavailable,
            format!("cannot reach worker {}", unavailable.join(", ")),
        ));
    }
    for gone in &unavailable {
        log::warn!("leaving out worker {gone}: it does not answer (--workers-optional)");
    }
    Ok(admitted)
}

fn one_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    line.chars().take(300).collect()
}

/// The tasks each stage is cut into over `workers` workers: one per
/// worker, and two on a lone worker (a stage of one task is run by the
/// coordinator itself).
pub(crate) fn tasks_for(workers: usize) -> usize {
    workers.max(2)
}

/// `builder` planning over `urls`: records scans cut into `tasks` tasks
/// by bytes (in runs of neighbours for `cat`), the rest as
/// datafusion-distributed plans it.
pub(crate) fn distribute(
    builder: SessionStateBuilder,
    urls: Vec<Url>,
    channels: Channels,
    tasks: usize,
) -> Result<SessionStateBuilder> {
    builder
        .with_distributed_worker_resolver(Fixed(urls))
        .with_distributed_channel_resolver(channels)
        .with_distributed_planner()
        .with_distributed_user_codec(ScanCodec::coordinator())
        .with_distributed_desired_task_count_handler(ScanTasks { tasks })
        .with_distributed_scale_up_leaf_node_handler(ScanTasks { tasks })
        .with_distributed_max_tasks_per_stage(tasks)
        .map_err(|e| Error::new(ErrorCode::QueryFailed, e.to_string()))
}

/// `builder` planning over the workers of `workers` that answer.
pub(crate) async fn over(
    builder: SessionStateBuilder,
    workers: &Workers,
) -> Result<SessionStateBuilder> {
    let channels = Channels::new(workers)?;
    let urls = admit(workers, &channels).await?;
    let tasks = tasks_for(urls.len());
    distribute(builder, urls, channels, tasks)
}

/// The admitted workers.
struct Fixed(Vec<Url>);

impl WorkerResolver for Fixed {
    fn get_urls(&self) -> std::result::Result<Vec<Url>, DataFusionError> {
        Ok(self.0.clone())
    }
}

/// How records scans are cut into tasks.
#[derive(Debug, Clone, Copy)]
struct ScanTasks {
    tasks: usize,
}

#[async_trait]
impl DesiredTaskCountHandler for ScanTasks {
    async fn handle(
        &self,
        ev: DesiredTaskCountEvent<'_>,
    ) -> Option<datafusion::common::Result<DesiredTaskCountEventResponse>> {
        let scan = ev.plan.downcast_ref::<RecordsScan>()?;
        let sources = scan.plan().sources().len();
        Some(Ok(DesiredTaskCountEventResponse::desired(
            sources.clamp(1, self.tasks),
        )))
    }
}

impl ScaleUpLeafNodeHandler for ScanTasks {
    fn handle(
        &self,
        ev: ScaleUpLeafNodeEvent,
    ) -> Option<datafusion::common::Result<ScaleUpLeafNodeEventResponse>> {
        let scan = ev.plan.downcast_ref::<RecordsScan>()?;
        if ev.task_count <= 1 {
            return None;
        }
        let mut groups = match scan.rows() {
            Rows::Columns | Rows::Counts => scan.plan().balanced(ev.task_count),
            Rows::Lines => scan.plan().contiguous(ev.task_count),
        };
        groups.resize(ev.task_count, Vec::new());
        let partitions = scan.parts().len();
        let variants = groups
            .iter()
            .map(|group| Arc::new(scan.narrowed(group, partitions)) as Arc<dyn ExecutionPlan>);
        Some(
            DistributedLeafExec::try_new(Arc::clone(ev.plan), variants)
                .map(|leaf| ScaleUpLeafNodeEventResponse::new(Arc::new(leaf))),
        )
    }
}
