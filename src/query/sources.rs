//! The `sources` table: the rows of `.sources` (`open(path)` counted, as
//! `pchronicle ls --sources` shows it), built only when a query reads it.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, RecordBatch, StringArray, TimestampMicrosecondArray, UInt64Array,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::DataFusionError;
use datafusion::datasource::{MemTable, TableType};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;

use crate::catalog::{Catalog, Source};
use crate::extract::Selection;

pub(super) struct SourcesTable {
    catalog: Arc<Catalog>,
    rel: PathBuf,
    selection: Selection,
    schema: SchemaRef,
    /// The query's budget: reading the sources stops with it.
    work: Option<Arc<crate::work::Work>>,
}

impl fmt::Debug for SourcesTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourcesTable")
            .field("rel", &self.rel)
            .finish()
    }
}

impl SourcesTable {
    pub(super) fn new(
        catalog: Arc<Catalog>,
        rel: PathBuf,
        selection: Selection,
        work: Option<Arc<crate::work::Work>>,
    ) -> Self {
        let time = || DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let schema = Schema::new(vec![
            Field::new("_file_", DataType::Utf8, false),
            Field::new("kind", DataType::Utf8, false),
            Field::new("format", DataType::Utf8, false),
            Field::new("record_count", DataType::UInt64, true),
            Field::new("failed_count", DataType::UInt64, true),
            Field::new("min_timestamp", time(), true),
            Field::new("max_timestamp", time(), true),
            Field::new("fingerprint", DataType::Utf8, true),
            Field::new("trusted", DataType::Boolean, false),
            Field::new("stats_origin", DataType::Utf8, false),
            Field::new("size", DataType::UInt64, true),
            Field::new("path_attrs", DataType::Utf8, false),
        ]);
        SourcesTable {
            catalog,
            rel,
            selection,
            schema: Arc::new(schema),
            work,
        }
    }

    fn batch(&self, sources: &[Source]) -> datafusion::common::Result<RecordBatch> {
        let text = |f: &dyn Fn(&Source) -> String| -> ArrayRef {
            Arc::new(StringArray::from_iter_values(sources.iter().map(f)))
        };
        let time = |f: &dyn Fn(&Source) -> Option<i64>| -> ArrayRef {
            Arc::new(
                TimestampMicrosecondArray::from_iter(sources.iter().map(f)).with_timezone("UTC"),
            )
        };
        let columns: Vec<ArrayRef> = vec![
            text(&|s| s.file.clone()),
            text(&|s| serde_name(&s.kind)),
            text(&|s| s.format.to_string()),
            Arc::new(UInt64Array::from_iter(
                sources.iter().map(|s| s.counts.record_count),
            )),
            Arc::new(UInt64Array::from_iter(
                sources.iter().map(|s| s.counts.failed_count),
            )),
            time(&|s| s.counts.min_timestamp.map(|t| t.0)),
            time(&|s| s.counts.max_timestamp.map(|t| t.0)),
            Arc::new(StringArray::from_iter(
                sources
                    .iter()
                    .map(|s| s.fingerprint.as_ref().map(|f| f.to_string())),
            )),
            Arc::new(BooleanArray::from_iter(
                sources.iter().map(|s| Some(s.trusted)),
            )),
            text(&|s| serde_name(&s.stats_origin)),
            Arc::new(UInt64Array::from_iter(sources.iter().map(|s| s.size))),
            text(&|s| serde_json::to_string(&s.path_attrs).unwrap_or_default()),
        ];
        RecordBatch::try_new(Arc::clone(&self.schema), columns)
            .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))
    }
}

/// An enum value as `.sources` spells it (its serde name).
fn serde_name<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

#[async_trait]
impl TableProvider for SourcesTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        // The rows of `ls --sources` with the same filters, by the same call
        // (`--contains` keeps only the sources holding the text).
        // Off the runtime's threads: it may read records (and block on Lance).
        let (catalog, rel, selection) = (
            Arc::clone(&self.catalog),
            self.rel.clone(),
            self.selection.clone(),
        );
        // Within the query's budget: stopped with it.
        let work = self.work.clone();
        let snapshot = tokio::task::spawn_blocking(move || {
            crate::work::within_opt(work.as_ref(), || {
                crate::extract::sources(&catalog, &rel, &selection)
            })
        })
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let batch = self.batch(&snapshot.sources)?;
        let table = MemTable::try_new(Arc::clone(&self.schema), vec![vec![batch]])?;
        table.scan(state, projection, filters, limit).await
    }
}
