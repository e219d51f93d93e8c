//! Which files are record files, and in which of the record formats: the
//! decision is made from the file name alone, so listing a directory never
//! opens a file to classify it.

/// The on-disk shape of a record file, from its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordFormat {
    /// One record per line.
    Jsonl,
    /// One record per line (another name for the same thing).
    Ndjson,
    /// Packed: each record preceded by U+001E.
    Jsonseq,
    /// One JSON value; a top-level array is one record per element.
    Json,
}

impl RecordFormat {
    /// The record format of a file name, or `None` when the file is not a
    /// record source. Sidecar files (`chronicle.manifest`, `*.idx`,
    /// `*.indexes.json`) are never record sources.
    pub fn from_name(name: &str) -> Option<RecordFormat> {
        let (stem, ext) = name.rsplit_once('.')?;
        if stem.is_empty() {
            return None;
        }
        match ext {
            "jsonl" => Some(RecordFormat::Jsonl),
            "ndjson" => Some(RecordFormat::Ndjson),
            "jsonseq" => Some(RecordFormat::Jsonseq),
            "json" if !stem.ends_with(".indexes") => Some(RecordFormat::Json),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RecordFormat::Jsonl => "jsonl",
            RecordFormat::Ndjson => "ndjson",
            RecordFormat::Jsonseq => "jsonseq",
            RecordFormat::Json => "json",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_format_from_name() {
        assert_eq!(
            RecordFormat::from_name("a.jsonl"),
            Some(RecordFormat::Jsonl)
        );
        assert_eq!(
            RecordFormat::from_name("a.b.ndjson"),
            Some(RecordFormat::Ndjson)
        );
        assert_eq!(
            RecordFormat::from_name("s.0a1b2c3d.jsonseq"),
            Some(RecordFormat::Jsonseq)
        );
        assert_eq!(
            RecordFormat::from_name("doc.json"),
            Some(RecordFormat::Json)
        );
        assert_eq!(RecordFormat::from_name("a.jsonl.indexes.json"), None);
        assert_eq!(RecordFormat::from_name("a.jsonl.3f2a.idx"), None);
        assert_eq!(RecordFormat::from_name("chronicle.manifest"), None);
        assert_eq!(RecordFormat::from_name(".jsonl"), None);
        assert_eq!(RecordFormat::from_name("README"), None);
    }
}
