//! Where a bucket's endpoint, region and credentials come from: the
//! standard AWS environment variables, then the profile named by
//! `AWS_PROFILE` (or `default`) in the shared credentials and config files.
//!
//! - Environment: `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT_URL_S3`),
//!   `AWS_REGION` / `AWS_DEFAULT_REGION`, `AWS_ACCESS_KEY_ID`,
//!   `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_SKIP_SIGNATURE`
//!   (public buckets), and the other `AWS_*` keys `object_store` reads.
//! - Files: `AWS_SHARED_CREDENTIALS_FILE` (default `~/.aws/credentials`,
//!   section `[NAME]`) for `aws_access_key_id`, `aws_secret_access_key`,
//!   `aws_session_token`; `AWS_CONFIG_FILE` (default `~/.aws/config`,
//!   section `[default]` or `[profile NAME]`) for `region` and
//!   `endpoint_url`, and keys too.
//!
//! A value in the environment wins over the same value in a file. Without
//! any credentials the client asks the instance metadata service, as the
//! AWS tools do.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::{BackoffConfig, RetryConfig};

use super::http::{Connector, Requests};
use crate::error::RemoteFailure;

/// How often a failed request (no answer, a 5xx or 429) is sent again.
pub const MAX_RETRIES: usize = 3;
/// How long a request and its retries may take in all.
pub const RETRY_TIMEOUT: Duration = Duration::from_secs(10);

/// The `object_store` settings for every bucket of this process.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `object_store` configuration keys and values, files first and the
    /// environment over them.
    values: Vec<(AmazonS3ConfigKey, String)>,
}

impl Settings {
    /// Reads the environment and the profile files.
    pub fn from_environment() -> io::Result<Settings> {
        let env: HashMap<String, String> = std::env::vars().collect();
        Settings::from_sources(&env, home().as_deref())
    }

    fn from_sources(env: &HashMap<String, String>, home: Option<&Path>) -> io::Result<Settings> {
        let mut values = Vec::new();
        let named = env.get("AWS_PROFILE").filter(|p| !p.is_empty());
        let profile = named.map(String::as_str).unwrap_or("default");
        let file = |var: &str, default: &str| -> Option<PathBuf> {
            env.get(var)
                .map(PathBuf::from)
                .or_else(|| home.map(|h| h.join(".aws").join(default)))
        };
        let mut found = false;
        if let Some(path) = file("AWS_SHARED_CREDENTIALS_FILE", "credentials") {
            if let Some(section) = read_section(&path, profile)? {
                found = true;
                values.extend(keys_of(&section));
            }
        }
        if let Some(path) = file("AWS_CONFIG_FILE", "config") {
            let header = if profile == "default" {
                "default".to_string()
            } else {
                format!("profile {profile}")
            };
            if let Some(section) = read_section(&path, &header)? {
                found = true;
                values.extend(keys_of(&section));
            }
        }
        if named.is_some() && !found {
            return Err(RemoteFailure::Unavailable(format!(
                "AWS_PROFILE names {profile:?}, which neither the credentials nor the config file holds"
            ))
            .into_io());
        }
        let mut from_env: Vec<(&String, &String)> = env
            .iter()
            .filter(|(k, _)| k.starts_with("AWS_") && k.as_str() != "AWS_PROFILE")
            .collect();
        from_env.sort();
        for (key, value) in from_env {
            if let Ok(config) = key.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
                values.push((config, value.clone()));
            }
        }
        Ok(Settings { values })
    }

    /// Settings for a server at `endpoint` with static credentials.
    pub fn for_endpoint(endpoint: &str, key_id: &str, secret: &str, region: &str) -> Settings {
        Settings {
            values: vec![
                (AmazonS3ConfigKey::Endpoint, endpoint.to_string()),
                (AmazonS3ConfigKey::AccessKeyId, key_id.to_string()),
                (AmazonS3ConfigKey::SecretAccessKey, secret.to_string()),
                (AmazonS3ConfigKey::Region, region.to_string()),
            ],
        }
    }

    /// The endpoint requests go to (AWS's own when none is set).
    pub fn endpoint_or_default(&self) -> String {
        // object_store prefers the S3-specific endpoint when both are set.
        let last = |wanted: AmazonS3ConfigKey| {
            self.values
                .iter()
                .rev()
                .find(|(k, _)| *k == wanted)
                .map(|(_, v)| v.clone())
        };
        last(AmazonS3ConfigKey::S3Endpoint)
            .or_else(|| last(AmazonS3ConfigKey::Endpoint))
            .unwrap_or_else(|| "aws".to_string())
    }

    /// The client of `bucket`, sending through one counted HTTP client,
    /// retrying a few times with a short backoff.
    pub fn build(&self, bucket: &str, requests: Arc<Requests>) -> io::Result<AmazonS3> {
        let mut builder = AmazonS3Builder::new();
        for (key, value) in &self.values {
            builder = builder.with_config(*key, value);
        }
        // An http:// endpoint is the user's explicit choice (a local server).
        if self.endpoint_or_default().starts_with("http://") {
            builder = builder.with_allow_http(true);
        }
        builder
            .with_bucket_name(bucket)
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(100),
                    max_backoff: Duration::from_secs(1),
                    base: 2.0,
                },
                max_retries: MAX_RETRIES,
                retry_timeout: RETRY_TIMEOUT,
            })
            .with_http_connector(Connector { requests })
            .with_crypto_provider(Arc::new(super::crypto::Sha2Crypto))
            .build()
            .map_err(|e| RemoteFailure::Unavailable(format!("s3://{bucket}: {e}")).into_io())
    }
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// The `key = value` lines of the section `[name]` of an INI file, `None`
/// when the file or the section is missing.
fn read_section(path: &Path, name: &str) -> io::Result<Option<HashMap<String, String>>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    };
    let mut section: Option<HashMap<String, String>> = None;
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = header.trim() == name;
            if inside {
                section.get_or_insert_with(HashMap::new);
            }
            continue;
        }
        if let (true, Some((key, value))) = (inside, line.split_once('=')) {
            if let Some(section) = section.as_mut() {
                section.insert(key.trim().to_ascii_lowercase(), value.trim().to_string());
            }
        }
    }
    Ok(section)
}

/// The `object_store` keys a profile section sets.
fn keys_of(section: &HashMap<String, String>) -> Vec<(AmazonS3ConfigKey, String)> {
    let known = [
        ("aws_access_key_id", AmazonS3ConfigKey::AccessKeyId),
        ("aws_secret_access_key", AmazonS3ConfigKey::SecretAccessKey),
        ("aws_session_token", AmazonS3ConfigKey::Token),
        ("region", AmazonS3ConfigKey::Region),
        ("endpoint_url", AmazonS3ConfigKey::Endpoint),
    ];
    known
        .into_iter()
        .filter_map(|(name, key)| section.get(name).map(|v| (key, v.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(settings: &Settings, key: AmazonS3ConfigKey) -> Option<&str> {
        settings
            .values
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn profiles_fill_in_and_the_environment_wins() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".aws")).unwrap();
        std::fs::write(
            home.path().join(".aws/credentials"),
            "[default]\naws_access_key_id = A\naws_secret_access_key = S\n\n[team]\naws_access_key_id=T\naws_secret_access_key=TS\n",
        )
        .unwrap();
        std::fs::write(
            home.path().join(".aws/config"),
            "[default]\nregion = eu-west-1\n[profile team]\nregion = us-east-2\nendpoint_url = http://127.0.0.1:9000\n",
        )
        .unwrap();
        let env = HashMap::new();
        let s = Settings::from_sources(&env, Some(home.path())).unwrap();
        assert_eq!(value(&s, AmazonS3ConfigKey::AccessKeyId), Some("A"));
        assert_eq!(value(&s, AmazonS3ConfigKey::Region), Some("eu-west-1"));
        assert_eq!(s.endpoint_or_default(), "aws");

        let env = HashMap::from([
            ("AWS_PROFILE".to_string(), "team".to_string()),
            ("AWS_REGION".to_string(), "ap-south-1".to_string()),
        ]);
        let s = Settings::from_sources(&env, Some(home.path())).unwrap();
        assert_eq!(value(&s, AmazonS3ConfigKey::AccessKeyId), Some("T"));
        assert_eq!(value(&s, AmazonS3ConfigKey::Region), Some("ap-south-1"));
        assert_eq!(s.endpoint_or_default(), "http://127.0.0.1:9000");

        let env = HashMap::from([("AWS_PROFILE".to_string(), "nobody".to_string())]);
        let e = Settings::from_sources(&env, Some(home.path())).unwrap_err();
        assert!(e.to_string().contains("nobody"), "{e}");
    }
}
