//! Query results as an aligned table, JSON Lines or CSV, written as the
//! batches arrive. A reader that goes away (`| head`) ends the query
//! quietly.

use std::io::{self, Write};
use std::ops::ControlFlow;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

use super::ResultFormat;
use crate::error::{Error, ErrorCode};

/// Rows a table shows under one header; a longer result is shown in
/// tables of this many rows, so it never has to be held whole.
const TABLE_ROWS: usize = 1000;

pub(super) struct Printer<'o> {
    format: ResultFormat,
    schema: SchemaRef,
    out: &'o mut dyn Write,
    /// Rows waiting to be shown as one table.
    held: Vec<RecordBatch>,
    held_rows: usize,
    wrote_header: bool,
    rows: usize,
    error: Option<Error>,
}

impl<'o> Printer<'o> {
    pub(super) fn new(format: ResultFormat, schema: SchemaRef, out: &'o mut dyn Write) -> Self {
        Printer {
            format,
            schema,
            out,
            held: Vec::new(),
            held_rows: 0,
            wrote_header: false,
            rows: 0,
            error: None,
        }
    }

    /// Writes one batch; `Break` when nothing more can be written.
    pub(super) fn batch(&mut self, batch: &RecordBatch) -> ControlFlow<()> {
        self.rows += batch.num_rows();
        let written = match self.format {
            ResultFormat::Table => {
                self.held_rows += batch.num_rows();
                self.held.push(batch.clone());
                if self.held_rows >= TABLE_ROWS {
                    self.table()
                } else {
                    Ok(())
                }
            }
            ResultFormat::Json => {
                let mut writer = arrow::json::LineDelimitedWriter::new(&mut *self.out);
                writer
                    .write(batch)
                    .and_then(|()| writer.finish())
                    .map_err(arrow_io)
            }
            ResultFormat::Csv => {
                let mut writer = arrow::csv::WriterBuilder::new()
                    .with_header(!self.wrote_header)
                    .build(&mut *self.out);
                self.wrote_header = true;
                writer.write(batch).map_err(arrow_io)
            }
        };
        self.settle(written)
    }

    /// Writes what is still held (and a header for an empty CSV result).
    pub(super) fn finish(&mut self) {
        let written = match self.format {
            ResultFormat::Table if !self.held.is_empty() || self.rows == 0 => self.table(),
            ResultFormat::Csv if !self.wrote_header => {
                let names: Vec<&str> = self
                    .schema
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect();
                writeln!(self.out, "{}", names.join(","))
            }
            _ => Ok(()),
        };
        let written = written.and_then(|()| self.out.flush());
        let _ = self.settle(written);
    }

    pub(super) fn error(&mut self) -> Option<Error> {
        self.error.take()
    }

    fn table(&mut self) -> io::Result<()> {
        let batches = std::mem::take(&mut self.held);
        self.held_rows = 0;
        let shown =
            arrow::util::pretty::pretty_format_batches_with_schema(self.schema.clone(), &batches)
                .map_err(arrow_io)?;
        writeln!(self.out, "{shown}")
    }

    fn settle(&mut self, written: io::Result<()>) -> ControlFlow<()> {
        match written {
            Ok(()) => ControlFlow::Continue(()),
            // The reader went away: not an error.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ControlFlow::Break(()),
            Err(e) => {
                self.error = Some(Error::new(
                    ErrorCode::Io,
                    format!("writing the result failed: {e}"),
                ));
                ControlFlow::Break(())
            }
        }
    }
}

fn arrow_io(e: arrow::error::ArrowError) -> io::Error {
    match e {
        arrow::error::ArrowError::IoError(_, e) => e,
        other => io::Error::other(other.to_string()),
    }
}
