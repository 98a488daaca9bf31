//! An operation's payload checked against its schema, and the ids an operation derives.
//!
//! Every memory operation a replay (`rebuild`, verify steps 8-9, catch-up) or an append folds
//! has its payload validated against its type's schema (`projections.ops.validate_payload`)
//! before a handler reads it, and every edge an operation creates gets a derived id
//! (`engine.derived_id`). Both are pure functions of the entry, run once per operation in
//! Python; these are the same functions in one native call each.
//!
//! They decide nothing the reference would not: a `PayloadPlan` accepts only a payload every
//! field of which it checks exactly as the reference does, and returns the normalised dict the
//! reference returns. Anything else (a missing, unknown or bad field, a field of a kind it
//! does not check natively, an integer beyond 64 bits, text with lone surrogates) is `Reject`
//! and the caller runs the reference, which raises (or accepts) what it always did.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::hash::sha256;
use crate::reject;
use crate::uuid::parse;

/// `ops.MAX_IDS`: the most ids a list field holds.
const MAX_IDS: usize = 10_000;
/// `ops._json_ok`'s depth limit: a value nested deeper is refused.
const JSON_DEPTH: usize = 32;
/// The tag of `engine.derived_id`'s hash, with its 0x00 separator.
const ID_PREFIX: &[u8] = b"memroot/derived-id/v1\x00";

/// The kinds of `ops.Field` checked natively; `Other` rejects any value but null.
enum Kind {
    Text(usize),
    Name(usize),
    Uuid,
    Uuids(usize),
    Enum(Vec<String>),
    Unit,
    UnitOrNull,
    NonNeg,
    Ts,
    Json,
    Other,
}

struct Field {
    name: Py<PyString>,
    text: String,
    kind: Kind,
    required: bool,
}

/// One operation type's schema (`ops.SCHEMAS[op]`), prepared once.
#[pyclass(module = "memroot._native", frozen)]
pub struct PayloadPlan {
    fields: Vec<Field>,
}

fn arg_usize(arg: &Bound<'_, PyAny>, kind: &str) -> PyResult<usize> {
    arg.extract::<usize>()
        .or_else(|_| reject(&format!("a {kind} field's argument is not a size")))
}

/// Whether `ops._CONTROL` finds a character in `text`.
fn has_control(text: &str) -> bool {
    text.chars()
        .any(|c| matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}'))
}

/// `ops._json_ok`: exact JSON types, finite floats, text keys, nested at most 32 deep.
fn json_ok(value: &Bound<'_, PyAny>, depth: usize) -> bool {
    if depth > JSON_DEPTH {
        return false;
    }
    if value.is_none()
        || value.is_exact_instance_of::<PyString>()
        || value.is_exact_instance_of::<PyBool>()
        || value.is_exact_instance_of::<PyInt>()
    {
        return true;
    }
    if let Ok(f) = value.downcast_exact::<PyFloat>() {
        return f.value().is_finite();
    }
    if let Ok(list) = value.downcast_exact::<PyList>() {
        return list.iter().all(|v| json_ok(&v, depth + 1));
    }
    if let Ok(dict) = value.downcast_exact::<PyDict>() {
        return dict
            .iter()
            .all(|(k, v)| k.is_exact_instance_of::<PyString>() && json_ok(&v, depth + 1));
    }
    false
}

/// A non-empty text of at most `max` characters (code points, as `len`), or `Reject`.
fn text<'py>(value: &Bound<'py, PyAny>, max: usize) -> PyResult<Bound<'py, PyString>> {
    let Ok(s) = value.downcast_exact::<PyString>() else {
        return reject("a text field that is not text");
    };
    let n = s.len()?;
    if n == 0 || n > max {
        return reject("a text field empty or too long");
    }
    Ok(s.clone())
}

/// An exact int that fits 64 bits, or `Reject`.
fn int64(value: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if !value.is_exact_instance_of::<PyInt>() {
        return Ok(None);
    }
    match value.extract::<i64>() {
        Ok(n) => Ok(Some(n)),
        Err(_) => reject("an integer beyond 64 bits"),
    }
}

impl Field {
    /// The reference's check of one present, non-null value: its normalised value.
    fn check<'py>(&self, py: Python<'py>, value: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        match &self.kind {
            Kind::Text(max) => Ok(text(&value, *max)?.into_any()),
            Kind::Name(max) => {
                let s = text(&value, *max)?;
                let Ok(t) = s.to_str() else {
                    return reject("a name that is not UTF-8");
                };
                if has_control(t) {
                    return reject("a name with a control character");
                }
                Ok(s.into_any())
            }
            Kind::Uuid => {
                let Ok(s) = value.downcast_exact::<PyString>() else {
                    return reject("an id that is not text");
                };
                match s.to_str().ok().and_then(parse) {
                    Some(_) => Ok(value),
                    None => reject("an id that is not a canonical UUID"),
                }
            }
            Kind::Uuids(min) => {
                let Ok(list) = value.downcast_exact::<PyList>() else {
                    return reject("an id list that is not a list");
                };
                if list.len() < *min || list.len() > MAX_IDS {
                    return reject("an id list of the wrong length");
                }
                let mut seen = std::collections::HashSet::with_capacity(list.len());
                for v in list.iter() {
                    let Ok(s) = v.downcast_exact::<PyString>() else {
                        return reject("an id that is not text");
                    };
                    let Some(raw) = s.to_str().ok().and_then(parse) else {
                        return reject("an id that is not a canonical UUID");
                    };
                    if !seen.insert(raw) {
                        return reject("an id listed twice");
                    }
                }
                Ok(PyTuple::new(py, list.iter())?.into_any())
            }
            Kind::Enum(allowed) => {
                let Ok(s) = value.downcast_exact::<PyString>() else {
                    return reject("an enumerated field that is not text");
                };
                let t = s.to_str().or_else(|_| reject("text that is not UTF-8"))?;
                if allowed.iter().any(|a| a == t) {
                    Ok(value)
                } else {
                    reject("a value not of the enumeration")
                }
            }
            Kind::Unit | Kind::UnitOrNull => {
                if let Ok(f) = value.downcast_exact::<PyFloat>() {
                    let x = f.value();
                    return if (0.0..=1.0).contains(&x) {
                        Ok(value)
                    } else {
                        reject("a score outside [0, 1]")
                    };
                }
                match int64(&value)? {
                    Some(n @ 0..=1) => Ok(PyFloat::new(py, n as f64).into_any()),
                    _ => reject("a score that is not a number in [0, 1]"),
                }
            }
            Kind::NonNeg => {
                if let Ok(f) = value.downcast_exact::<PyFloat>() {
                    let x = f.value();
                    return if x.is_finite() && x >= 0.0 {
                        Ok(value)
                    } else {
                        reject("a negative or non-finite number")
                    };
                }
                match int64(&value)? {
                    // float(n), as Python converts it (correctly rounded).
                    Some(n) if n >= 0 => Ok(PyFloat::new(py, value.extract::<f64>()?).into_any()),
                    _ => reject("a number that is not >= 0"),
                }
            }
            Kind::Ts => match int64(&value)? {
                Some(n) if n >= 0 => Ok(value),
                _ => reject("a time that is not microseconds"),
            },
            Kind::Json => {
                if json_ok(&value, 0) {
                    Ok(value)
                } else {
                    reject("a value outside JSON")
                }
            }
            Kind::Other => reject("a field of a kind checked by the reference only"),
        }
    }
}

#[pymethods]
impl PayloadPlan {
    /// Prepare a schema: `(name, kind, required, arg)` for each field, in schema order.
    #[new]
    fn new(
        py: Python<'_>,
        fields: Vec<(String, String, bool, Bound<'_, PyAny>)>,
    ) -> PyResult<Self> {
        let mut out = Vec::with_capacity(fields.len());
        for (name, kind, required, arg) in fields {
            let kind = match kind.as_str() {
                "text" => Kind::Text(arg_usize(&arg, "text")?),
                "name" => Kind::Name(arg_usize(&arg, "name")?),
                "uuid" => Kind::Uuid,
                "uuids" => Kind::Uuids(arg_usize(&arg, "uuids")?),
                "enum" => Kind::Enum(arg.extract::<Vec<String>>()?),
                "unit" => Kind::Unit,
                "unit?" => Kind::UnitOrNull,
                "nonneg" => Kind::NonNeg,
                "ts" => Kind::Ts,
                "json" => Kind::Json,
                _ => Kind::Other,
            };
            out.push(Field {
                name: PyString::new(py, &name).unbind(),
                text: name,
                kind,
                required,
            });
        }
        Ok(Self { fields: out })
    }

    /// `ops.validate_payload` of `payload` (an exact dict): the normalised payload, fields in
    /// schema order, absent optional ones as None; `Reject` where the reference raises, and
    /// for a field of a kind only the reference checks.
    fn validate<'py>(
        &self,
        py: Python<'py>,
        payload: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let Ok(payload) = payload.downcast_exact::<PyDict>() else {
            return reject("a payload that is not a dict");
        };
        for key in payload.keys() {
            let Ok(k) = key.downcast_exact::<PyString>() else {
                return reject("a payload key that is not text");
            };
            let k = k.to_str().or_else(|_| reject("a key that is not UTF-8"))?;
            if !self.fields.iter().any(|f| f.text == k) {
                return reject("a field the schema does not have");
            }
        }
        let out = PyDict::new(py);
        for f in &self.fields {
            let name = f.name.bind(py);
            let value = payload.get_item(name)?;
            let normalised = match value {
                None if f.required => return reject("a required field is absent"),
                None => py.None().into_bound(py),
                Some(v) if v.is_none() => {
                    if f.required && !matches!(f.kind, Kind::UnitOrNull) {
                        return reject("a required field is null");
                    }
                    v
                }
                Some(v) => f.check(py, v)?,
            };
            out.set_item(name, normalised)?;
        }
        Ok(out)
    }
}

/// `engine.derived_id(op_id, n)`: the UUIDv8 of the `n`-th thing operation `op_id` creates.
///
/// The first 16 bytes of `SHA-256("memroot/derived-id/v1" || 0x00 || "<op_id>/<n>")` with the
/// version (8) and variant bits set, as canonical text. `Reject` for an id with lone
/// surrogates (the reference's encoding raises).
#[pyfunction]
pub fn derived_id(op_id: &Bound<'_, PyString>, n: i64) -> PyResult<String> {
    let id = op_id
        .to_str()
        .or_else(|_| reject("an id that is not UTF-8"))?;
    let mut data = Vec::with_capacity(ID_PREFIX.len() + id.len() + 21);
    data.extend_from_slice(ID_PREFIX);
    data.extend_from_slice(id.as_bytes());
    data.extend_from_slice(format!("/{n}").as_bytes());
    let mut h = sha256(&data);
    h[6] = (h[6] & 0x0f) | 0x80;
    h[8] = (h[8] & 0x3f) | 0x80;
    let hex: String = h[..16].iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}
