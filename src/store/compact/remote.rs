//! Lance's way to the remote backend: `s3://` datasets are opened on the
//! store of their bucket (see [`crate::remote`]), so Lance sends its
//! requests through the same client, credentials, retries and counts.
//! Only the buckets of warehouses this process opened are served.

use std::sync::Arc;

use lance_io::object_store::{ObjectStore, ObjectStoreParams, ObjectStoreProvider};
use url::Url;

/// How many reads Lance sends at once to one remote dataset.
const IO_PARALLELISM: usize = crate::remote::FAN_OUT;
/// How often Lance itself retries a read that failed mid-body (the client
/// below it retries requests too).
const DOWNLOAD_RETRIES: usize = 1;

/// Hands Lance the store of an `s3://` URL's bucket.
#[derive(Debug)]
pub(super) struct BucketProvider;

#[async_trait::async_trait]
impl ObjectStoreProvider for BucketProvider {
    async fn new_store(
        &self,
        base: Url,
        _params: &ObjectStoreParams,
    ) -> lance::Result<ObjectStore> {
        let name = base.host_str().unwrap_or_default().to_string();
        // Only a bucket a warehouse was opened in: a dataset is handed to
        // Lance by the path it was found at, so any other bucket is
        // something Lance found in a dataset's own files.
        let bucket = crate::remote::opened_bucket(&name).ok_or_else(|| {
            lance::Error::invalid_input(format!(
                "s3://{name}: not the bucket of an opened warehouse"
            ))
        })?;
        Ok(ObjectStore::new(
            Arc::clone(&bucket.store),
            base,
            None,
            None,
            false,
            true,
            IO_PARALLELISM,
            DOWNLOAD_RETRIES,
            None,
        ))
    }
}
