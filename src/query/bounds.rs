//! What bounds a query's memory beyond DataFusion's own pool, which sees
//! sorts, groupings and joins but not what a function makes or what the
//! result adds up to:
//! - [`bound_functions`] wraps every scalar function of a session so that
//!   its result for one batch of rows may hold at most a set number of
//!   bytes. Functions whose result can outgrow their arguments by a factor
//!   the query names (`repeat(s, n)`, `lpad(s, n)`, `array_repeat`,
//!   `range`, `replace`, `regexp_replace`) are refused before they
//!   allocate, from the sizes their arguments give; every other function's
//!   result is measured after it is made, so a chain of them never builds
//!   on more than the bound.
//! - [`Bounded`] ends the written result at the last whole line within a
//!   number of bytes.

use std::hash::{Hash, Hasher};
use std::io::{self, Write};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{DataFusionError, ExprSchema, Result, ScalarValue};
use datafusion::logical_expr::interval_arithmetic::Interval;
use datafusion::logical_expr::preimage::PreimageResult;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::sort_properties::{ExprProperties, SortProperties};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ExpressionPlacement, ReturnFieldArgs, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature,
};
use datafusion::prelude::SessionContext;

/// Wraps every scalar function registered in `ctx` so that its result for
/// one batch holds at most `most` bytes (`get_field`, which only picks a
/// part of its argument and is recognised by its type, is left as it is).
pub(super) fn bound_functions(ctx: &SessionContext, most: usize) {
    let functions: Vec<Arc<ScalarUDF>> = ctx.state().scalar_functions().values().cloned().collect();
    for wrapped in functions.iter().filter_map(|f| bounded(f, most)) {
        ctx.register_udf(wrapped);
    }
}

/// [`bound_functions`] of a session a worker runs a part of a plan in
/// (its functions are found by name when the part is decoded).
pub(crate) fn bound_state(
    state: &mut datafusion::execution::SessionState,
    most: usize,
) -> datafusion::common::Result<()> {
    use datafusion::execution::FunctionRegistry;
    let functions: Vec<Arc<ScalarUDF>> = state.scalar_functions().values().cloned().collect();
    for wrapped in functions.iter().filter_map(|f| bounded(f, most)) {
        state.register_udf(Arc::new(wrapped))?;
    }
    Ok(())
}

/// `function` held to `most` bytes a batch (none for `get_field`, or
/// one already held).
fn bounded(function: &Arc<ScalarUDF>, most: usize) -> Option<ScalarUDF> {
    if function.name() == "get_field" || function.inner().is::<BoundedFunction>() {
        return None;
    }
    Some(ScalarUDF::new_from_impl(BoundedFunction {
        inner: Arc::clone(function.inner()),
        most,
    }))
}

/// A scalar function whose results are held to `most` bytes a batch.
#[derive(Debug)]
struct BoundedFunction {
    inner: Arc<dyn ScalarUDFImpl>,
    most: usize,
}

impl PartialEq for BoundedFunction {
    fn eq(&self, other: &Self) -> bool {
        self.most == other.most
            && self
                .inner
                .dyn_eq(other.inner.as_ref() as &dyn std::any::Any)
    }
}

impl Eq for BoundedFunction {}

impl Hash for BoundedFunction {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.dyn_hash(state);
        self.most.hash(state);
    }
}

impl BoundedFunction {
    fn too_large(&self, bytes: u128) -> DataFusionError {
        DataFusionError::ResourcesExhausted(format!(
            "{}() would make {} MiB for one batch of rows; a function's result may hold at most {} MiB here",
            self.inner.name(),
            bytes >> 20,
            self.most >> 20
        ))
    }
}

impl ScalarUDFImpl for BoundedFunction {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn display_name(&self, args: &[Expr]) -> Result<String> {
        #[allow(deprecated)]
        self.inner.display_name(args)
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.inner.schema_name(args)
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn with_updated_config(&self, config: &ConfigOptions) -> Option<ScalarUDF> {
        let updated = self.inner.with_updated_config(config)?;
        Some(ScalarUDF::new_from_impl(BoundedFunction {
            inner: Arc::clone(updated.inner()),
            most: self.most,
        }))
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn is_nullable(&self, args: &[Expr], schema: &dyn ExprSchema) -> bool {
        #[allow(deprecated)]
        self.inner.is_nullable(args, schema)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        if let Some(bytes) = amplified(self.inner.name(), &args.args, args.number_rows)? {
            if bytes > self.most as u128 {
                return Err(self.too_large(bytes));
            }
        }
        let made = self.inner.invoke_with_args(args)?;
        let bytes = match &made {
            ColumnarValue::Array(array) => array.get_array_memory_size(),
            ColumnarValue::Scalar(scalar) => scalar.size(),
        };
        if bytes > self.most {
            return Err(self.too_large(bytes as u128));
        }
        Ok(made)
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        self.inner.simplify(args, info)
    }

    fn preimage(
        &self,
        args: &[Expr],
        lit_expr: &Expr,
        info: &SimplifyContext,
    ) -> Result<PreimageResult> {
        self.inner.preimage(args, lit_expr, info)
    }

    fn short_circuits(&self) -> bool {
        self.inner.short_circuits()
    }

    fn conditional_arguments<'a>(
        &self,
        args: &'a [Expr],
    ) -> Option<(Vec<&'a Expr>, Vec<&'a Expr>)> {
        self.inner.conditional_arguments(args)
    }

    fn evaluate_bounds(&self, input: &[&Interval]) -> Result<Interval> {
        self.inner.evaluate_bounds(input)
    }

    fn propagate_constraints(
        &self,
        interval: &Interval,
        inputs: &[&Interval],
    ) -> Result<Option<Vec<Interval>>> {
        self.inner.propagate_constraints(interval, inputs)
    }

    fn struct_field_mapping(
        &self,
        literal_args: &[Option<ScalarValue>],
    ) -> Option<datafusion::logical_expr::StructFieldMapping> {
        self.inner.struct_field_mapping(literal_args)
    }

    fn output_ordering(&self, inputs: &[ExprProperties]) -> Result<SortProperties> {
        self.inner.output_ordering(inputs)
    }

    fn preserves_lex_ordering(&self, inputs: &[ExprProperties]) -> Result<bool> {
        self.inner.preserves_lex_ordering(inputs)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn placement(&self, args: &[ExpressionPlacement]) -> ExpressionPlacement {
        self.inner.placement(args)
    }
}

/// The most bytes `function` can make of `args` over `rows` rows, for the
/// functions whose result can outgrow their arguments by a factor one of
/// them names; `None` for every other function.
fn amplified(function: &str, args: &[ColumnarValue], rows: usize) -> Result<Option<u128>> {
    let per_row: Vec<u128> = match function {
        // A string `n` times.
        "repeat" => zip2(args, rows, |len, n| len * n)?,
        // `n` characters, of up to four bytes each.
        "lpad" | "rpad" => {
            let counts = numbers(args.get(1), rows)?;
            counts.into_iter().map(|n| n * 4).collect()
        }
        // `n` copies of an element (of at least a word each).
        "array_repeat" => zip2(args, rows, |len, n| len.max(16) * n)?,
        // Every match replaced: at most one a byte of the string.
        "replace" => {
            let text = lengths(args.first(), rows)?;
            let from = lengths(args.get(1), rows)?;
            let to = lengths(args.get(2), rows)?;
            (0..rows)
                .map(|i| text[i] + (text[i] / from[i].max(1) + 1) * to[i])
                .collect()
        }
        // A pattern may match at every position, and a replacement may
        // repeat what it matched.
        "regexp_replace" => {
            let text = lengths(args.first(), rows)?;
            let with = lengths(args.get(2), rows)?;
            (0..rows)
                .map(|i| (text[i] + 1) * (1 + 2 * with[i]))
                .collect()
        }
        // Integers from a start to a stop by a step, eight bytes each.
        "range" | "generate_series" => match integer_series(args, rows)? {
            Some(sizes) => sizes,
            None => return Ok(None),
        },
        _ => return Ok(None),
    };
    Ok(Some(per_row.into_iter().sum()))
}

/// `f(length of the first argument, count of the second)` per row.
fn zip2(args: &[ColumnarValue], rows: usize, f: impl Fn(u128, u128) -> u128) -> Result<Vec<u128>> {
    let lens = lengths(args.first(), rows)?;
    let counts = numbers(args.get(1), rows)?;
    Ok(lens.into_iter().zip(counts).map(|(l, n)| f(l, n)).collect())
}

/// An argument as an array of `rows` values.
fn rows_of(arg: Option<&ColumnarValue>, rows: usize) -> Result<Option<ArrayRef>> {
    match arg {
        None => Ok(None),
        Some(ColumnarValue::Array(array)) => Ok(Some(Arc::clone(array))),
        Some(ColumnarValue::Scalar(scalar)) => scalar.to_array_of_size(rows.max(1)).map(Some),
    }
}

/// The byte length (or element count) of each row of an argument; 0 for
/// null or a missing argument.
fn lengths(arg: Option<&ColumnarValue>, rows: usize) -> Result<Vec<u128>> {
    let Some(array) = rows_of(arg, rows)? else {
        return Ok(vec![0; rows]);
    };
    let sizes: Vec<u128> = match array.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let length = arrow::compute::kernels::length::length(array.as_ref())?;
            let length = arrow::compute::cast(&length, &DataType::Int64)?;
            positive(length.as_primitive::<Int64Type>())
        }
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            let length = arrow::compute::kernels::length::length(array.as_ref())?;
            let length = arrow::compute::cast(&length, &DataType::Int64)?;
            positive(length.as_primitive::<Int64Type>())
        }
        // Anything else: what one row of it holds, on average.
        _ => {
            let each = array.get_array_memory_size() / array.len().max(1);
            vec![each as u128; array.len()]
        }
    };
    Ok(pad(sizes, rows))
}

/// An integer argument per row (negative and null as 0).
fn numbers(arg: Option<&ColumnarValue>, rows: usize) -> Result<Vec<u128>> {
    let Some(array) = rows_of(arg, rows)? else {
        return Ok(vec![0; rows]);
    };
    let numbers = arrow::compute::cast(&array, &DataType::Int64)?;
    Ok(pad(positive(numbers.as_primitive::<Int64Type>()), rows))
}

fn positive(values: &arrow::array::Int64Array) -> Vec<u128> {
    values
        .iter()
        .map(|v| v.map_or(0, |v| v.max(0) as u128))
        .collect()
}

fn pad(mut values: Vec<u128>, rows: usize) -> Vec<u128> {
    values.resize(rows.max(values.len()), 0);
    values
}

/// The bytes of `range(start, stop[, step])` per row when its arguments
/// are integers; `None` for other kinds (dates), measured after.
fn integer_series(args: &[ColumnarValue], rows: usize) -> Result<Option<Vec<u128>>> {
    if !args.iter().all(|a| a.data_type().is_integer()) || args.is_empty() {
        return Ok(None);
    }
    let signed = |arg: Option<&ColumnarValue>, default: i64| -> Result<Vec<i64>> {
        let Some(array) = rows_of(arg, rows)? else {
            return Ok(vec![default; rows]);
        };
        let array = arrow::compute::cast(&array, &DataType::Int64)?;
        let mut values: Vec<i64> = array
            .as_primitive::<Int64Type>()
            .iter()
            .map(|v| v.unwrap_or(default))
            .collect();
        values.resize(rows.max(values.len()), default);
        Ok(values)
    };
    // One argument is the stop, from 0.
    let (start, stop, step) = if args.len() == 1 {
        (vec![0; rows], signed(args.first(), 0)?, vec![1; rows])
    } else {
        (
            signed(args.first(), 0)?,
            signed(args.get(1), 0)?,
            signed(args.get(2), 1)?,
        )
    };
    Ok(Some(
        (0..rows)
            .map(|i| {
                let span = (i128::from(stop[i]) - i128::from(start[i])).unsigned_abs();
                let step = i128::from(step[i]).unsigned_abs().max(1);
                (span / step + 1) * 8
            })
            .collect(),
    ))
}

/// A writer that takes at most `most` bytes, ending at the last line break
/// within them; past it every write fails as a reader gone away would
/// (`BrokenPipe`), and [`Bounded::capped`] says so.
pub(super) struct Bounded<'o> {
    inner: &'o mut dyn Write,
    left: usize,
    capped: bool,
}

impl<'o> Bounded<'o> {
    pub(super) fn new(inner: &'o mut dyn Write, most: usize) -> Bounded<'o> {
        Bounded {
            inner,
            left: most,
            capped: false,
        }
    }

    pub(super) fn capped(&self) -> bool {
        self.capped
    }
}

impl Write for Bounded<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.capped {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        if buf.len() <= self.left {
            let n = self.inner.write(buf)?;
            self.left -= n;
            return Ok(n);
        }
        // The whole lines that fit, then nothing more.
        self.capped = true;
        let fits = &buf[..self.left];
        if let Some(end) = memchr::memrchr(b'\n', fits) {
            self.inner.write_all(&fits[..=end])?;
        }
        self.left = 0;
        Err(io::ErrorKind::BrokenPipe.into())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_result_ends_at_a_whole_line() {
        let mut out = Vec::new();
        let mut bounded = Bounded::new(&mut out, 10);
        bounded.write_all(b"abc\n").unwrap();
        let error = bounded.write_all(b"defg\nhijk\n").unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
        assert!(bounded.capped());
        assert_eq!(out, b"abc\ndefg\n");
    }

    #[test]
    fn amplifying_functions_are_sized_from_their_arguments() {
        let text = ColumnarValue::Scalar(ScalarValue::Utf8(Some("ab".into())));
        let count = ColumnarValue::Scalar(ScalarValue::Int64(Some(1_000)));
        let bytes = amplified("repeat", &[text.clone(), count], 10).unwrap();
        assert_eq!(bytes, Some(2 * 1_000 * 10));
        let stop = ColumnarValue::Scalar(ScalarValue::Int64(Some(1_000_000)));
        let bytes = amplified("range", &[stop], 1).unwrap();
        assert_eq!(bytes, Some(1_000_001 * 8));
        assert_eq!(amplified("upper", &[text], 10).unwrap(), None);
    }
}
