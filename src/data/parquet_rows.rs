//! Parquet files as JSON-like rows.
//!
//! Owns the one place that touches the parquet crate: it reads every row of a
//! file with the `parquet::record` row API and turns it into a JSON object
//! (column name -> value), which [`themisto_rows`](super::themisto_rows) maps
//! like a JSONL line. Nested groups become objects, lists become arrays, maps
//! become objects (keys as text); binary columns become UTF-8 text when they
//! are, a placeholder ([`PICKLED_VALUE`]) when they are a Python pickle (never
//! unpickled), else lower-case hex; decimals become their decimal text.

use super::DataError;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::{Field, Row};
use serde_json::{Map, Number, Value};
use std::path::Path;

/// How a pickled binary value reads (it is never unpickled): this prefix, its size, `>`.
pub const PICKLED_VALUE: &str = "<pickled value, ";

thread_local! {
    static IN_PARQUET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f`, which calls the parquet crate, turning a panic in the crate (it
/// asserts on some malformed files) into a clean error naming the file; the
/// panic is not printed.
fn guarded<T>(path: &Path, f: impl FnOnce() -> Result<T, DataError>) -> Result<T, DataError> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_PARQUET.with(|q| q.get()) {
                previous(info);
            }
        }));
    });
    let was = IN_PARQUET.with(|q| q.replace(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    IN_PARQUET.with(|q| q.set(was));
    result.unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(DataError::Format {
            path: path.to_path_buf(),
            message: format!("not a readable Parquet file (the parquet reader failed: {what})"),
        })
    })
}

/// Every row of a Parquet file, in file order.
pub fn read_rows(path: &Path) -> Result<Vec<Map<String, Value>>, DataError> {
    guarded(path, || read_rows_unguarded(path))
}

fn read_rows_unguarded(path: &Path) -> Result<Vec<Map<String, Value>>, DataError> {
    let format_err = |message: String| DataError::Format { path: path.to_path_buf(), message };
    let file = std::fs::File::open(path).map_err(|source| DataError::Io { path: path.to_path_buf(), source })?;
    let reader =
        SerializedFileReader::new(file).map_err(|e| format_err(format!("not a readable Parquet file: {e}")))?;
    let rows = reader.get_row_iter(None).map_err(|e| format_err(format!("cannot read rows: {e}")))?;
    let mut out = Vec::new();
    for (i, row) in rows.enumerate() {
        let row = row.map_err(|e| format_err(format!("row {}: cannot decode: {e}", i + 1)))?;
        out.push(row_to_map(&row));
    }
    Ok(out)
}

/// The top-level column names of a Parquet file.
pub fn column_names(path: &Path) -> Result<Vec<String>, DataError> {
    guarded(path, || column_names_unguarded(path))
}

fn column_names_unguarded(path: &Path) -> Result<Vec<String>, DataError> {
    let file = std::fs::File::open(path).map_err(|source| DataError::Io { path: path.to_path_buf(), source })?;
    let reader = SerializedFileReader::new(file).map_err(|e| DataError::Format {
        path: path.to_path_buf(),
        message: format!("not a readable Parquet file: {e}"),
    })?;
    let schema = reader.metadata().file_metadata().schema_descr();
    Ok(schema.root_schema().get_fields().iter().map(|f| f.name().to_string()).collect())
}

/// A row as a JSON object, column order kept.
pub fn row_to_map(row: &Row) -> Map<String, Value> {
    row.get_column_iter().map(|(name, field)| (name.clone(), field_to_json(field))).collect()
}

fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// One Parquet value as JSON.
pub fn field_to_json(field: &Field) -> Value {
    match field {
        Field::Null => Value::Null,
        Field::Bool(b) => Value::Bool(*b),
        Field::Byte(v) => Value::from(*v),
        Field::Short(v) => Value::from(*v),
        Field::Int(v) => Value::from(*v),
        Field::Long(v) => Value::from(*v),
        Field::UByte(v) => Value::from(*v),
        Field::UShort(v) => Value::from(*v),
        Field::UInt(v) => Value::from(*v),
        Field::ULong(v) => Value::from(*v),
        Field::Float16(v) => float(f64::from(f32::from(*v))),
        Field::Float(v) => float(f64::from(*v)),
        Field::Double(v) => float(*v),
        Field::Str(s) => Value::from(s.as_str()),
        Field::Bytes(b) if super::archive::bytes_are_pickle(b.data()) => {
            Value::from(format!("{PICKLED_VALUE}{} bytes>", b.data().len()))
        }
        Field::Bytes(b) => match std::str::from_utf8(b.data()) {
            Ok(s) => Value::from(s),
            Err(_) => Value::from(crate::util::hex(b.data())),
        },
        Field::Date(v) | Field::TimeMillis(v) => Value::from(*v),
        Field::TimeMicros(v) | Field::TimestampMillis(v) | Field::TimestampMicros(v) => Value::from(*v),
        Field::Group(row) => Value::Object(row_to_map(row)),
        Field::ListInternal(list) => Value::Array(list.elements().iter().map(field_to_json).collect()),
        Field::MapInternal(map) => {
            let mut obj = Map::new();
            for (k, v) in map.entries() {
                let key = match k {
                    Field::Str(s) => s.clone(),
                    other => other.to_string(),
                };
                obj.insert(key, field_to_json(v));
            }
            Value::Object(obj)
        }
        // Decimals (and any kind a later parquet adds) as their text form.
        #[allow(unreachable_patterns)]
        other => Value::from(other.to_string()),
    }
}
