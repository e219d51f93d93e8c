//! Human-readable tables for the terminal. The JSON forms are the stable
//! contract; these are for people and may change.

use std::fmt::Write;

use super::out::note;
use crate::catalog::{Entry, Listing, Snapshot, Stats, Timestamp, Warning};
use crate::error::ErrorCode;
use crate::records::timestamp::format_rfc3339;
use crate::store::compact::ImportReport;

/// Left-aligned columns, two spaces apart; numeric columns right-aligned.
fn render(header: &[&str], right: &[bool], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(header.iter().map(|h| h.to_string()).collect::<Vec<_>>())
        .chain(rows.iter().cloned())
    {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = widths[i].saturating_sub(cell.chars().count());
            if right[i] {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn opt<T: ToString>(value: Option<T>) -> String {
    value.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn time(value: Option<Timestamp>) -> String {
    value
        .map(|t| format_rfc3339(t.0))
        .unwrap_or_else(|| "-".into())
}

pub fn listing(listing: &Listing) -> String {
    let rows: Vec<Vec<String>> = listing
        .entries
        .iter()
        .map(|entry| match entry {
            Entry::Directory { name } => vec![
                format!("{name}/"),
                "directory".into(),
                "".into(),
                "".into(),
                "".into(),
                "".into(),
            ],
            Entry::Dataset { name, preview } => vec![
                name.clone(),
                "dataset".into(),
                preview.format.clone(),
                opt(preview.counts.record_count),
                opt(preview.counts.failed_count),
                format!(
                    "{} ({:?})",
                    opt(preview.fingerprint.as_deref()),
                    preview.stats_origin
                )
                .to_lowercase(),
            ],
            Entry::File { name, size, format } => vec![
                name.clone(),
                "file".into(),
                format.map(|f| f.as_str().to_string()).unwrap_or_default(),
                "".into(),
                "".into(),
                format!("{size} bytes"),
            ],
        })
        .collect();
    render(
        &["NAME", "KIND", "FORMAT", "RECORDS", "FAILED", "DETAIL"],
        &[false, false, false, true, true, false],
        &rows,
    )
}

pub fn sources(snapshot: &Snapshot) -> String {
    let rows: Vec<Vec<String>> = snapshot
        .sources
        .iter()
        .map(|s| {
            let attrs: Vec<String> = s
                .path_attrs
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            vec![
                s.file.clone(),
                format!("{:?}", s.kind).to_lowercase(),
                s.format.to_string(),
                opt(s.counts.record_count),
                opt(s.counts.failed_count),
                attrs.join(","),
            ]
        })
        .collect();
    render(
        &[
            "_FILE_",
            "KIND",
            "FORMAT",
            "RECORDS",
            "FAILED",
            "PATH_ATTRS",
        ],
        &[false, false, false, true, true, false],
        &rows,
    )
}

pub fn stats(stats: &Stats) -> String {
    let mut out = String::new();
    let kind = format!("{:?}", stats.kind).to_lowercase();
    let _ = writeln!(
        out,
        "kind        {kind}{}",
        stats
            .format
            .as_ref()
            .map(|f| format!(" ({f})"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        out,
        "sources     {} ({} datasets, {} files)",
        stats.sources, stats.datasets, stats.files
    );
    let _ = writeln!(out, "records     {}", stats.record_count);
    let _ = writeln!(out, "failed      {}", stats.failed_count);
    let _ = writeln!(out, "from        {}", time(stats.min_timestamp));
    let _ = writeln!(out, "to          {}", time(stats.max_timestamp));
    if stats.untrusted_sources + stats.unreadable_sources > 0 {
        let _ = writeln!(
            out,
            "untrusted   {} (unreadable {})",
            stats.untrusted_sources, stats.unreadable_sources
        );
    }
    if stats.counting_sources > 0 {
        let _ = writeln!(
            out,
            "counting    {} (left out of the totals until counted)",
            stats.counting_sources
        );
    }
    if !stats.formats.is_empty() {
        let rows: Vec<Vec<String>> = stats
            .formats
            .iter()
            .map(|(format, t)| {
                vec![
                    format.clone(),
                    t.sources.to_string(),
                    t.record_count.to_string(),
                    t.failed_count.to_string(),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&render(
            &["FORMAT", "SOURCES", "RECORDS", "FAILED"],
            &[false, true, true, true],
            &rows,
        ));
    }
    if !stats.indexes.is_empty() {
        let rows: Vec<Vec<String>> = stats
            .indexes
            .iter()
            .map(|i| {
                vec![
                    i.index.clone(),
                    i.key.join(","),
                    i.rows.to_string(),
                    i.state.as_str().to_string(),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&render(
            &["INDEX", "KEY", "ROWS", "STATE"],
            &[false, false, true, false],
            &rows,
        ));
    }
    out
}

pub fn error_codes(codes: &[ErrorCode]) -> String {
    let mut out = String::new();
    for code in codes {
        let _ = writeln!(
            out,
            "{code}\n  {}\n  fix: {}\n",
            code.summary(),
            code.fixup()
        );
    }
    out
}

/// Warnings and truncation go to stderr so stdout stays the answer (for
/// people: escaped on a terminal).
pub fn warn(warnings: &[Warning], truncated: bool) {
    for w in warnings {
        note!("warning[{}]: {}: {}", w.code, w.path, w.message);
    }
    if truncated {
        note!("note: the answer is truncated (a traversal bound was reached)");
    }
}

/// What `sync` did, in words: one line per changed file, then the outcome.
#[cfg(feature = "compact-jsonl")]
pub fn sync(report: &crate::store::compact::sync::SyncReport, dest: &std::path::Path) -> String {
    use std::fmt::Write;
    let mut text = String::new();
    let verb = if report.dry_run { "would take" } else { "took" };
    if report.rebuilt {
        let _ = writeln!(
            text,
            "the newest version of {} was not written by sync: every row {} replaced by the source",
            dest.display(),
            if report.dry_run { "would be" } else { "is" }
        );
    }
    for change in &report.changes {
        let what = match change.change {
            crate::store::compact::sync::Change::New => {
                format!("new: {verb} bytes 0..{}", change.to)
            }
            crate::store::compact::sync::Change::Grown => {
                format!("grown: {verb} bytes {}..{}", change.from, change.to)
            }
            crate::store::compact::sync::Change::Replaced => {
                format!("changed: rows replaced, {verb} bytes 0..{}", change.to)
            }
            crate::store::compact::sync::Change::Gone => "gone: rows deleted".to_string(),
        };
        let _ = writeln!(text, "{}: {what}", change.file);
    }
    for w in &report.warnings {
        let _ = writeln!(text, "{}: warning[{}]: {}", w.file, w.code, w.message);
    }
    let version = report
        .version
        .map_or_else(|| "no leaf yet".to_string(), |v| format!("version {v}"));
    let torn = if report.torn_files > 0 {
        format!(
            "; {} file(s) end in a record not complete yet, left for the next sync",
            report.torn_files
        )
    } else {
        String::new()
    };
    if !report.changed {
        let _ = writeln!(
            text,
            "nothing changed: {} stays at {version} ({} files unchanged){torn}",
            dest.display(),
            report.unchanged_files
        );
    } else if report.dry_run {
        let _ = writeln!(
            text,
            "dry run: {} would get a new version; nothing was written{torn}",
            dest.display()
        );
    } else {
        let _ = writeln!(
            text,
            "published {version} of {}: {} records taken ({} failed), {} files unchanged{torn}",
            dest.display(),
            report.imported_records,
            report.imported_failed,
            report.unchanged_files
        );
    }
    text
}

pub fn import(report: &ImportReport, dest: &std::path::Path) -> String {
    format!(
        "imported {} records ({} failed, {} offloaded) from {} files into {}\npublished {}: the leaf holds {} records ({} failed)\n",
        report.imported_records,
        report.imported_failed,
        report.offloaded_records,
        report.source_files,
        dest.display(),
        report.fingerprint,
        report.record_count,
        report.failed_count,
    )
}

/// A page of runs: one line each, in the page's order.
pub fn runs(page: &crate::extract::runs::page::PageAnswer<'_>) -> String {
    let rows: Vec<Vec<String>> = page
        .runs
        .iter()
        .map(|run| {
            vec![
                run.run.clone(),
                run.model
                    .as_deref()
                    .map_or_else(|| "-".into(), |m| one_line(m, 40)),
                outcome(&run.outcome),
                run.steps.to_string(),
                run.tool_calls.to_string(),
                run.tool_errors.to_string(),
                opt(run.tokens.map(|t| t.total)),
                run.records.to_string(),
                run.failed.to_string(),
                time(run.last),
                run.duration_seconds
                    .map_or_else(|| "-".into(), |s| format!("{s:.1}s")),
                one_line(run.task.as_deref().unwrap_or("-"), 60),
            ]
        })
        .collect();
    let header = [
        "RUN", "MODEL", "OUTCOME", "STEPS", "CALLS", "ERRORS", "TOKENS", "RECORDS", "FAILED",
        "LAST", "DURATION", "TASK",
    ];
    let right = [
        false, false, false, true, true, true, true, true, true, false, true, false,
    ];
    let mut out = render(&header, &right, &rows);
    if (page.runs.len() as u64) < page.total {
        let _ = writeln!(out, "{} of {} runs (--limit)", page.runs.len(), page.total);
    }
    out
}

/// A run's outcome in a cell: its score, else why its model stopped.
fn outcome(outcome: &crate::extract::runs::Outcome) -> String {
    match (&outcome.score, &outcome.stop) {
        (Some(score), _) if score.abs() >= 1e6 || (*score != 0.0 && score.abs() < 1e-3) => {
            format!("score {score:.3e}")
        }
        (Some(score), _) => format!("score {}", (score * 1000.0).round() / 1000.0),
        (None, Some(stop)) => one_line(stop, 24),
        (None, None) => "-".into(),
    }
}

/// `text` for a cell: control characters as spaces, cut at `chars`.
fn one_line(text: &str, chars: usize) -> String {
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(chars)
        .collect();
    if text.chars().count() > chars {
        out.push('…');
    }
    out
}
