//! `chronicle.manifest` v1: the TOML sidecar at a dataset node's root.
//!
//! A manifest is parsed from the whole TOML document, which is kept: the
//! known fields are read out of it and written back into it, so unknown
//! top-level keys, unknown `[identity]` keys and unknown `[stats]` keys
//! survive a read-modify-write, and an unknown `format` is preserved as
//! text. Validation is strict and every rejection carries its own code; the
//! caller (classification) decides to fall back to the physical markers.

use toml::{Table, Value};
use toml_edit::DocumentMut;

use crate::error::{Error, ErrorCode, Result};
use crate::records::RecordStats;
use crate::records::timestamp::{self, Micros};
use crate::warehouse::{self, Dir, Replace};

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
#[derive(Debug, Clone)]
pub struct Manifest {
    pub kind: ManifestKind,
    /// Leaf format, e.g. `compact-jsonl/v1`; kept verbatim even if unknown.
    pub format: Option<String>,
    /// `[identity].fingerprint`.
    pub fingerprint: Option<String>,
    /// The `[stats]` table of a leaf (the four v1 keys).
    pub stats: Option<RecordStats>,
    /// The text as written, edited in place on a rewrite so that comments,
    /// key order and layout survive.
    document: DocumentMut,
    /// The file (device, inode) this manifest was read from: a rewrite
    /// replaces that file or nothing.
    origin: Option<(u64, u64)>,
}

impl PartialEq for Manifest {
    fn eq(&self, other: &Manifest) -> bool {
        self.kind == other.kind
            && self.format == other.format
            && self.fingerprint == other.fingerprint
            && self.stats == other.stats
            && self.document.to_string() == other.document.to_string()
    }
}

impl Manifest {
    /// A fresh leaf manifest.
    pub fn leaf(format: &str, fingerprint: &str, stats: RecordStats) -> Manifest {
        let mut document = DocumentMut::new();
        document["schema_version"] = toml_edit::value(SCHEMA_VERSION);
        document["kind"] = toml_edit::value("leaf");
        document["format"] = toml_edit::value(format);
        let mut manifest = Manifest {
            kind: ManifestKind::Leaf,
            format: Some(format.into()),
            fingerprint: None,
            stats: None,
            document,
            origin: None,
        };
        manifest.set_leaf_state(fingerprint, stats);
        manifest
    }

    /// A descriptive branch manifest (`schema_version` and `kind` only).
    pub fn branch() -> Manifest {
        let mut document = DocumentMut::new();
        document["schema_version"] = toml_edit::value(SCHEMA_VERSION);
        document["kind"] = toml_edit::value("branch");
        Manifest {
            kind: ManifestKind::Branch,
            format: None,
            fingerprint: None,
            stats: None,
            document,
            origin: None,
        }
    }

    /// Binds this leaf manifest to a physical revision: sets the fingerprint
    /// and the four v1 stats, keeping every other key of the document, its
    /// comments and its layout.
    pub fn set_leaf_state(&mut self, fingerprint: &str, stats: RecordStats) {
        let identity = table_entry(&mut self.document, "identity");
        set_kept(identity, "fingerprint", fingerprint.into());
        let table = table_entry(&mut self.document, "stats");
        set_kept(
            table,
            "record_count",
            saturating_i64(stats.record_count).into(),
        );
        set_kept(
            table,
            "failed_count",
            saturating_i64(stats.failed_count).into(),
        );
        for (key, value) in [
            ("min_timestamp", stats.min_timestamp),
            ("max_timestamp", stats.max_timestamp),
        ] {
            match value {
                Some(micros) => {
                    set_kept(table, key, timestamp::format_rfc3339(micros).into());
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
        let parse_error = |message: String| {
            Error::new(
                ErrorCode::ManifestParse,
                format!("not valid TOML: {message}"),
            )
        };
        let document: Table = toml::from_str(text).map_err(|e| parse_error(e.message().into()))?;
        let edit: DocumentMut = text
            .parse()
            .map_err(|e: toml_edit::TomlError| parse_error(e.message().into()))?;
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
            document: edit,
            origin: None,
        })
    }

    /// The TOML text of this manifest.
    pub fn to_toml(&self) -> String {
        let mut text = self.document.to_string();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text
    }

    /// Writes `chronicle.manifest` in the directory `dir`, named from
    /// outside by someone who asked for exactly this manifest there: it
    /// replaces whatever manifest is there (a symlink or a special file is
    /// still never written through).
    pub fn write_at(&self, dir: &std::path::Path) -> Result<()> {
        let opened = Dir::open_root(dir).map_err(|e| Error::io(dir, &e))?;
        self.replace_in(&opened, None)
    }

    /// Writes `chronicle.manifest` in `dir` atomically: the file this
    /// manifest was read from (keeping its owner and mode), or a new file
    /// where there is none. A file that appeared or was replaced since the
    /// read is left alone.
    pub fn write(&self, dir: &Dir) -> Result<()> {
        self.replace_in(dir, Some(self.origin))
    }

    fn replace_in(&self, dir: &Dir, expect: Option<Option<(u64, u64)>>) -> Result<()> {
        let how = Replace {
            expect,
            ..Replace::published()
        };
        dir.replace(MANIFEST_FILE, self.to_toml().as_bytes(), how)
            .map_err(|e| {
                Error::at(
                    ErrorCode::ManifestWrite,
                    dir.path().join(MANIFEST_FILE),
                    e.to_string(),
                )
            })
    }
}

/// Reads `chronicle.manifest` in the directory `dir`, named from outside
/// (a command line).
pub fn read_at(dir: &std::path::Path) -> Result<Option<Manifest>> {
    read(&Dir::open_root(dir).map_err(|e| Error::io(dir, &e))?)
}

/// Reads `chronicle.manifest` in `dir`. `Ok(None)` when there is none;
/// every other failure carries a code and the manifest's path.
pub fn read(dir: &Dir) -> Result<Option<Manifest>> {
    let path = dir.path().join(MANIFEST_FILE);
    let (bytes, stat) = match dir.read_capped(MANIFEST_FILE, warehouse::MANIFEST_CAP) {
        Ok(Some(read)) => read,
        Ok(None) => return Ok(None),
        Err(e) => {
            return Err(e.into_error(&path, "a manifest", |e| {
                Error::at(ErrorCode::ManifestUnreadable, &path, e.to_string())
            }));
        }
    };
    let text = String::from_utf8(bytes)
        .map_err(|_| Error::at(ErrorCode::ManifestParse, &path, "not valid UTF-8"))?;
    let mut manifest = Manifest::parse(&text).map_err(|mut e| {
        e.path = Some(path);
        e
    })?;
    manifest.origin = Some((stat.dev, stat.ino));
    Ok(Some(manifest))
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

fn table_entry<'a>(document: &'a mut DocumentMut, key: &str) -> &'a mut dyn toml_edit::TableLike {
    if document.get(key).and_then(|i| i.as_table_like()).is_none() {
        document.insert(key, toml_edit::Item::Table(toml_edit::Table::new()));
    }
    match document.get_mut(key).and_then(|i| i.as_table_like_mut()) {
        Some(table) => table,
        None => unreachable!("the key was made a table just above"),
    }
}

/// Sets `key` to `value`, keeping the comments and spacing around the value
/// it replaces.
fn set_kept(table: &mut dyn toml_edit::TableLike, key: &str, value: toml_edit::Value) {
    match table.get_mut(key).and_then(|item| item.as_value_mut()) {
        Some(old) => {
            let decor = old.decor().clone();
            *old = value;
            *old.decor_mut() = decor;
        }
        None => {
            table.insert(key, toml_edit::Item::Value(value));
        }
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
        assert!(read_at(dir.path()).unwrap().is_none());
        std::fs::write(dir.path().join(MANIFEST_FILE), b"\xff\xfe").unwrap();
        let err = read_at(dir.path()).unwrap_err();
        assert_eq!(err.code, ErrorCode::ManifestParse);
        let root = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(err.path.unwrap(), root.join(MANIFEST_FILE));
        Manifest::branch().write_at(dir.path()).unwrap();
        assert_eq!(
            read_at(dir.path()).unwrap().unwrap().kind,
            ManifestKind::Branch
        );
    }
}
