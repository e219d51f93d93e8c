//! `chronicle.manifest` v1: the TOML sidecar at a dataset node's root.
//!
//! A manifest is parsed from the whole TOML document, which is kept: the
//! known fields are read out of it and written back into it, so unknown
//! top-level keys, unknown `[identity]` keys and unknown `[stats]` keys
//! survive a read-modify-write, and an unknown `format` is preserved as
//! text. Validation is strict and every rejection carries its own code; the
//! caller (classification) decides to fall back to the physical markers.

use std::path::Path;

use toml::{Table, Value};

use crate::atomic::write_atomic;
use crate::error::{Error, ErrorCode, Result};
use crate::records::RecordStats;
use crate::records::timestamp::{self, Micros};

/// The sidecar's exact file name.
pub const MANIFEST_FILE: &str = "chronicle.manifest";

/// The only schema version this build reads and writes.
pub const SCHEMA_VERSION: i64 = 1;

/// Whether the node is a physical dataset or only nests others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestKind {
    Leaf,
    Branch,
}

/// A parsed, validated manifest plus the document it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub kind: ManifestKind,
    /// Leaf format, e.g. `compact-jsonl/v1`; kept verbatim even if unknown.
    pub format: Option<String>,
    /// `[identity].fingerprint`.
    pub fingerprint: Option<String>,
    /// The `[stats]` table of a leaf (the four v1 keys).
    pub stats: Option<RecordStats>,
    document: Table,
}

impl Manifest {
    /// A fresh leaf manifest.
    pub fn leaf(format: &str, fingerprint: &str, stats: RecordStats) -> Manifest {
        let mut document = Table::new();
        document.insert("schema_version".into(), Value::Integer(SCHEMA_VERSION));
        document.insert("kind".into(), Value::String("leaf".into()));
        document.insert("format".into(), Value::String(format.into()));
        let mut manifest = Manifest {
            kind: ManifestKind::Leaf,
            format: Some(format.into()),
            fingerprint: None,
            stats: None,
            document,
        };
        manifest.set_leaf_state(fingerprint, stats);
        manifest
    }

    /// A descriptive branch manifest (`schema_version` and `kind` only).
    pub fn branch() -> Manifest {
        let mut document = Table::new();
        document.insert("schema_version".into(), Value::Integer(SCHEMA_VERSION));
        document.insert("kind".into(), Value::String("branch".into()));
        Manifest {
            kind: ManifestKind::Branch,
            format: None,
            fingerprint: None,
            stats: None,
            document,
        }
    }

    /// Binds this leaf manifest to a physical revision: sets the fingerprint
    /// and the four v1 stats, keeping every other key of the document.
    pub fn set_leaf_state(&mut self, fingerprint: &str, stats: RecordStats) {
        let identity = table_entry(&mut self.document, "identity");
        identity.insert("fingerprint".into(), Value::String(fingerprint.into()));
        let table = table_entry(&mut self.document, "stats");
        table.insert(
            "record_count".into(),
            Value::Integer(saturating_i64(stats.record_count)),
        );
        table.insert(
            "failed_count".into(),
            Value::Integer(saturating_i64(stats.failed_count)),
        );
        for (key, value) in [
            ("min_timestamp", stats.min_timestamp),
            ("max_timestamp", stats.max_timestamp),
        ] {
            match value {
                Some(micros) => {
                    table.insert(key.into(), Value::String(timestamp::format_rfc3339(micros)));
                }
                None => {
                    table.remove(key);
                }
            }
        }
        self.fingerprint = Some(fingerprint.into());
        self.stats = Some(stats);
    }

    /// Parses and validates manifest text. Errors carry no path; [`read`]
    /// adds it.
    pub fn parse(text: &str) -> Result<Manifest> {
        let document: Table = toml::from_str(text).map_err(|e| {
            Error::new(
                ErrorCode::ManifestParse,
                format!("not valid TOML: {}", e.message()),
            )
        })?;
        let version = match document.get("schema_version") {
            None => {
                return Err(Error::new(
                    ErrorCode::ManifestVersion,
                    "schema_version is missing",
                ));
            }
            Some(Value::Integer(v)) => *v,
            Some(other) => return Err(wrong_type("schema_version", "an integer", other)),
        };
        if version != SCHEMA_VERSION {
            return Err(Error::new(
                ErrorCode::ManifestVersion,
                format!(
                    "schema_version {version} is not supported (this pchronicle reads {SCHEMA_VERSION})"
                ),
            ));
        }
        let kind = match document.get("kind") {
            Some(Value::String(k)) if k == "leaf" => ManifestKind::Leaf,
            Some(Value::String(k)) if k == "branch" => ManifestKind::Branch,
            Some(Value::String(k)) => {
                return Err(Error::new(
                    ErrorCode::ManifestKind,
                    format!("unknown kind {k:?}"),
                ));
            }
            Some(other) => return Err(wrong_type("kind", "a string", other)),
            None => return Err(Error::new(ErrorCode::ManifestKind, "kind is missing")),
        };
        let format = match document.get("format") {
            Some(Value::String(f)) if !f.trim().is_empty() => Some(f.clone()),
            Some(Value::String(_)) | None => None,
            Some(other) => return Err(wrong_type("format", "a string", other)),
        };
        if kind == ManifestKind::Leaf && format.is_none() {
            return Err(Error::new(
                ErrorCode::ManifestFormatMissing,
                "a leaf manifest needs a format",
            ));
        }
        let fingerprint = match sub_table(&document, "identity")?.and_then(|t| t.get("fingerprint"))
        {
            None => None,
            Some(Value::String(f)) => Some(f.clone()),
            Some(other) => return Err(wrong_type("identity.fingerprint", "a string", other)),
        };
        let stats = sub_table(&document, "stats")?
            .map(parse_stats)
            .transpose()?;
        Ok(Manifest {
            kind,
            format,
            fingerprint,
            stats,
            document,
        })
    }

    /// The TOML text of this manifest.
    pub fn to_toml(&self) -> String {
        // Serializing a table of plain TOML values cannot fail: every key is
        // a string and no value is a non-TOML type.
        let mut text = toml::to_string(&self.document).expect("a toml::Table always serializes");
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text
    }

    /// Writes `dir/chronicle.manifest` atomically.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(MANIFEST_FILE);
        write_atomic(&path, self.to_toml().as_bytes())
            .map_err(|e| Error::at(ErrorCode::ManifestWrite, &path, e.to_string()))
    }
}

/// Reads `dir/chronicle.manifest`. `Ok(None)` when there is none; every
/// other failure carries a code and the manifest's path.
pub fn read(dir: &Path) -> Result<Option<Manifest>> {
    let path = dir.join(MANIFEST_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::at(
                ErrorCode::ManifestUnreadable,
                &path,
                e.to_string(),
            ));
        }
    };
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::at(ErrorCode::ManifestParse, &path, "not valid UTF-8"))?;
    Manifest::parse(&text).map(Some).map_err(|mut e| {
        e.path = Some(path);
        e
    })
}

fn parse_stats(table: &Table) -> Result<RecordStats> {
    let count = |key: &str| -> Result<Option<u64>> {
        match table.get(key) {
            None => Ok(None),
            Some(Value::Integer(n)) if *n >= 0 => Ok(Some(*n as u64)),
            Some(other) => Err(wrong_type(
                &format!("stats.{key}"),
                "a non-negative integer",
                other,
            )),
        }
    };
    let time = |key: &str| -> Result<Option<Micros>> {
        let text = match table.get(key) {
            None => return Ok(None),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Datetime(d)) => d.to_string(),
            Some(other) => {
                return Err(wrong_type(
                    &format!("stats.{key}"),
                    "an RFC 3339 timestamp",
                    other,
                ));
            }
        };
        timestamp::parse_rfc3339(&text).map(Some).ok_or_else(|| {
            Error::new(
                ErrorCode::ManifestParse,
                format!("stats.{key} {text:?} is not an RFC 3339 timestamp"),
            )
        })
    };
    let record_count = count("record_count")?
        .ok_or_else(|| Error::new(ErrorCode::ManifestParse, "stats.record_count is missing"))?;
    Ok(RecordStats {
        record_count,
        failed_count: count("failed_count")?.unwrap_or(0),
        min_timestamp: time("min_timestamp")?,
        max_timestamp: time("max_timestamp")?,
    })
}

fn sub_table<'a>(document: &'a Table, key: &str) -> Result<Option<&'a Table>> {
    match document.get(key) {
        None => Ok(None),
        Some(Value::Table(t)) => Ok(Some(t)),
        Some(other) => Err(wrong_type(key, "a table", other)),
    }
}

fn table_entry<'a>(document: &'a mut Table, key: &str) -> &'a mut Table {
    let slot = document
        .entry(key.to_string())
        .or_insert_with(|| Value::Table(Table::new()));
    if !slot.is_table() {
        *slot = Value::Table(Table::new());
    }
    match slot {
        Value::Table(t) => t,
        _ => unreachable!("the slot was made a table just above"),
    }
}

fn wrong_type(key: &str, expected: &str, found: &Value) -> Error {
    Error::new(
        ErrorCode::ManifestParse,
        format!("{key} must be {expected}, found {}", found.type_str()),
    )
}

fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEAF: &str = r#"
schema_version = 1
kind = "leaf"
format = "compact-jsonl/v1"
owner = "team-a"

[identity]
fingerprint = "lance:version:1"
source = "import"

[stats]
record_count = 12345
failed_count = 2
min_timestamp = "2026-01-01T00:00:00Z"
max_timestamp = "2026-09-07T01:00:00Z"
token_total = 99
"#;

    #[test]
    fn parses_every_v1_field() {
        let m = Manifest::parse(LEAF).unwrap();
        assert_eq!(m.kind, ManifestKind::Leaf);
        assert_eq!(m.format.as_deref(), Some("compact-jsonl/v1"));
        assert_eq!(m.fingerprint.as_deref(), Some("lance:version:1"));
        let stats = m.stats.unwrap();
        assert_eq!((stats.record_count, stats.failed_count), (12345, 2));
        assert_eq!(
            timestamp::format_rfc3339(stats.min_timestamp.unwrap()),
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            timestamp::format_rfc3339(stats.max_timestamp.unwrap()),
            "2026-09-07T01:00:00Z"
        );
    }

    #[test]
    fn unknown_keys_and_formats_survive_read_modify_write() {
        let mut m = Manifest::parse(&LEAF.replace("compact-jsonl/v1", "parquet-thing/v9")).unwrap();
        m.set_leaf_state(
            "lance:version:2",
            RecordStats {
                record_count: 7,
                failed_count: 0,
                min_timestamp: None,
                max_timestamp: None,
            },
        );
        let text = m.to_toml();
        let again = Manifest::parse(&text).unwrap();
        assert_eq!(again.format.as_deref(), Some("parquet-thing/v9"));
        assert_eq!(again.fingerprint.as_deref(), Some("lance:version:2"));
        assert_eq!(again.stats.unwrap().record_count, 7);
        assert_eq!(again.stats.unwrap().min_timestamp, None);
        let doc: Table = toml::from_str(&text).unwrap();
        assert_eq!(doc["owner"].as_str(), Some("team-a"));
        assert_eq!(doc["identity"]["source"].as_str(), Some("import"));
        assert_eq!(doc["stats"]["token_total"].as_integer(), Some(99));
    }

    #[test]
    fn written_field_order_is_the_documented_one() {
        let text = Manifest::leaf(
            "storyline/v1",
            "storyline:generation:g1",
            RecordStats::default(),
        )
        .to_toml();
        let keys: Vec<_> = text.lines().filter_map(|l| l.split(" =").next()).collect();
        assert_eq!(&keys[..3], ["schema_version", "kind", "format"]);
        assert!(text.find("[identity]").unwrap() < text.find("[stats]").unwrap());
    }

    #[test]
    fn branch_round_trips() {
        let m = Manifest::parse(&Manifest::branch().to_toml()).unwrap();
        assert_eq!(m.kind, ManifestKind::Branch);
        assert_eq!(m.format, None);
    }

    #[test]
    fn toml_datetime_literals_are_accepted() {
        let m = Manifest::parse(
            "schema_version = 1\nkind = \"leaf\"\nformat = \"storyline/v1\"\n[stats]\nrecord_count = 1\nmin_timestamp = 2026-01-01T00:00:00Z\n",
        )
        .unwrap();
        assert!(m.stats.unwrap().min_timestamp.is_some());
    }

    #[test]
    fn each_malformation_has_its_code() {
        let cases: &[(&str, ErrorCode)] = &[
            ("schema_version = ", ErrorCode::ManifestParse),
            (
                "kind = \"leaf\"\nformat = \"x\"",
                ErrorCode::ManifestVersion,
            ),
            (
                "schema_version = 2\nkind = \"branch\"",
                ErrorCode::ManifestVersion,
            ),
            (
                "schema_version = \"1\"\nkind = \"branch\"",
                ErrorCode::ManifestParse,
            ),
            (
                "schema_version = 1\nkind = \"trunk\"",
                ErrorCode::ManifestKind,
            ),
            ("schema_version = 1", ErrorCode::ManifestKind),
            ("schema_version = 1\nkind = 3", ErrorCode::ManifestParse),
            (
                "schema_version = 1\nkind = \"leaf\"",
                ErrorCode::ManifestFormatMissing,
            ),
            (
                "schema_version = 1\nkind = \"leaf\"\nformat = \"  \"",
                ErrorCode::ManifestFormatMissing,
            ),
            (
                "schema_version = 1\nkind = \"leaf\"\nformat = 1",
                ErrorCode::ManifestParse,
            ),
            (
                "schema_version = 1\nkind = \"leaf\"\nformat = \"f\"\nidentity = 3",
                ErrorCode::ManifestParse,
            ),
            (
                "schema_version = 1\nkind = \"leaf\"\nformat = \"f\"\n[stats]\nrecord_count = -1",
                ErrorCode::ManifestParse,
            ),
            (
                "schema_version = 1\nkind = \"leaf\"\nformat = \"f\"\n[stats]\nfailed_count = 1",
                ErrorCode::ManifestParse,
            ),
            (
                "schema_version = 1\nkind = \"leaf\"\nformat = \"f\"\n[stats]\nrecord_count = 1\nmax_timestamp = \"yesterday\"",
                ErrorCode::ManifestParse,
            ),
        ];
        for (text, code) in cases {
            let err = Manifest::parse(text).unwrap_err();
            assert_eq!(err.code, *code, "{text:?}: {}", err.message);
        }
    }

    #[test]
    fn read_reports_path_and_absence() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_none());
        std::fs::write(dir.path().join(MANIFEST_FILE), b"\xff\xfe").unwrap();
        let err = read(dir.path()).unwrap_err();
        assert_eq!(err.code, ErrorCode::ManifestParse);
        assert_eq!(err.path.unwrap(), dir.path().join(MANIFEST_FILE));
        Manifest::branch().write(dir.path()).unwrap();
        assert_eq!(
            read(dir.path()).unwrap().unwrap().kind,
            ManifestKind::Branch
        );
    }
}
