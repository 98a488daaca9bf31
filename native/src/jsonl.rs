//! `memroot import`'s common line in one native call: a flat JSON object of an event request
//! (`{"kind": "event", "stream": ..., ...}`) parsed and validated into an `EventInput`.
//!
//! Only the common shape is taken here: an object whose values are strings, non-negative
//! integers or `null`, with no duplicate key, every field valid as `entries.parse_event`
//! checks it and neither `metadata` nor `context`. Anything else (an operation, a nested
//! value, a float, a bad field, a lone surrogate, any doubt) gives `None` for that line and
//! the Python reference parses it, so every error keeps its message and its line number.

use std::borrow::Cow;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};

/// A JSON value of the flat shape.
#[derive(Debug, PartialEq, Eq)]
pub enum Val<'a> {
    Null,
    Str(Cow<'a, str>),
    Int(u64),
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    /// JSON's whitespace only (Python's `json` skips exactly these four).
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek() == Some(c)).then(|| self.pos += 1)
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.text.get(self.pos..self.pos + 4)?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        self.pos += 4;
        u32::from_str_radix(digits, 16).ok()
    }

    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let bytes = self.text.as_bytes();
        let start = self.pos;
        // The common string has no escape: borrowed as it is.
        while let Some(&b) = bytes.get(self.pos) {
            match b {
                b'"' => {
                    let s = &self.text[start..self.pos];
                    self.pos += 1;
                    return Some(Cow::Borrowed(s));
                }
                b'\\' => break,
                0..=0x1f => return None, // a control character: Python's strict json refuses it
                _ => self.pos += 1,
            }
        }
        let mut out = String::from(&self.text[start..self.pos]);
        loop {
            let b = *bytes.get(self.pos)?;
            match b {
                b'"' => {
                    self.pos += 1;
                    return Some(Cow::Owned(out));
                }
                0..=0x1f => return None,
                b'\\' => {
                    self.pos += 1;
                    let e = *bytes.get(self.pos)?;
                    self.pos += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xd800..0xdc00).contains(&hi) {
                                // Only a well-formed pair; a lone surrogate is Python's to judge.
                                self.eat(b'\\')?;
                                self.eat(b'u')?;
                                let lo = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&lo) {
                                    return None;
                                }
                                0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                            } else {
                                hi
                            };
                            char::from_u32(code)?
                        }
                        _ => return None,
                    };
                    out.push(c);
                }
                _ => {
                    // Copy the run up to the next quote, escape or control character.
                    let run = self.pos;
                    while bytes
                        .get(self.pos)
                        .is_some_and(|&c| c != b'"' && c != b'\\' && c >= 0x20)
                    {
                        self.pos += 1;
                    }
                    out.push_str(&self.text[run..self.pos]);
                }
            }
        }
    }

    fn value(&mut self) -> Option<Val<'a>> {
        match self.peek()? {
            b'"' => self.string().map(Val::Str),
            b'n' => {
                if self.text.get(self.pos..self.pos + 4)? != "null" {
                    return None;
                }
                self.pos += 4;
                Some(Val::Null)
            }
            b'0'..=b'9' => {
                let bytes = self.text.as_bytes();
                let start = self.pos;
                while bytes.get(self.pos).is_some_and(u8::is_ascii_digit) {
                    self.pos += 1;
                }
                let digits = &self.text[start..self.pos];
                // A leading zero is not JSON; a fraction or exponent makes a float.
                if (digits.len() > 1 && digits.starts_with('0'))
                    || matches!(self.peek(), Some(b'.' | b'e' | b'E'))
                {
                    return None;
                }
                digits.parse().ok().map(Val::Int)
            }
            _ => None,
        }
    }
}

/// Parse a flat JSON object (string, non-negative integer and null values; no duplicate key).
///
/// `None` for anything else, valid JSON or not.
#[must_use]
pub fn parse_flat(text: &str) -> Option<Vec<(Cow<'_, str>, Val<'_>)>> {
    let mut p = Parser { text, pos: 0 };
    let mut out: Vec<(Cow<'_, str>, Val<'_>)> = Vec::with_capacity(8);
    p.ws();
    p.eat(b'{')?;
    p.ws();
    if p.eat(b'}').is_none() {
        loop {
            p.ws();
            let key = p.string()?;
            p.ws();
            p.eat(b':')?;
            p.ws();
            let value = p.value()?;
            if out.iter().any(|(k, _)| *k == key) {
                return None;
            }
            out.push((key, value));
            p.ws();
            if p.eat(b',').is_some() {
                continue;
            }
            p.eat(b'}')?;
            break;
        }
    }
    p.ws();
    (p.pos == text.len()).then_some(out)
}

/// `entries._CONTROL_RE`: C0, DEL, C1 and the two Unicode line separators.
fn has_control(s: &str) -> bool {
    s.chars()
        .any(|c| matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}'))
}

/// `entries._text` for a required identifier: non-empty, at most 4096 characters, no control.
fn ident_ok(s: &str) -> bool {
    !s.is_empty() && s.chars().count() <= 4096 && !has_control(s)
}

/// `entries._UUID_RE`: lowercase hex in the 8-4-4-4-12 form.
fn uuid_ok(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, &c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                c == b'-'
            } else {
                c.is_ascii_digit() || (b'a'..=b'f').contains(&c)
            }
        })
}

/// The keys of an event request (`entries._EVENT_FIELDS`).
const FIELDS: [&str; 12] = [
    "kind",
    "stream",
    "actor_id",
    "actor_type",
    "role",
    "content",
    "namespace_id",
    "metadata",
    "parent_event_id",
    "id",
    "ts",
    "context",
];

/// The fields of a valid event request, in `EventInput`'s order (None: absent).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct EventFields<'a> {
    pub stream: Cow<'a, str>,
    pub actor_id: Cow<'a, str>,
    pub actor_type: Cow<'a, str>,
    pub role: Cow<'a, str>,
    pub content: Cow<'a, str>,
    pub namespace_id: Cow<'a, str>,
    pub parent_event_id: Option<Cow<'a, str>>,
    pub id: Option<Cow<'a, str>>,
    pub ts: Option<u64>,
}

/// Validate a parsed line as `parse_input` + `parse_event` do, for the common shape only.
///
/// `None` when the reference must judge the line (an operation, maps, or a field it may refuse).
#[must_use]
pub fn event_fields<'a>(
    pairs: Vec<(Cow<'a, str>, Val<'a>)>,
    actor_types: &[String],
    roles: &[String],
    max_content: usize,
) -> Option<EventFields<'a>> {
    let mut kind = false;
    let (mut stream, mut actor_id, mut actor_type, mut role, mut content, mut ns) =
        (None, None, None, None, None, None);
    let mut f = EventFields::default();
    for (key, value) in pairs {
        let s = match value {
            // `parse_input` drops a null field as if absent, once its name is known.
            Val::Null if FIELDS.contains(&&*key) => continue,
            Val::Null => return None,
            Val::Str(s) => s,
            Val::Int(n) => {
                if key != "ts" || n > i64::MAX as u64 {
                    return None;
                }
                f.ts = Some(n);
                continue;
            }
        };
        match &*key {
            "kind" if s == "event" => kind = true,
            "stream" if ident_ok(&s) => stream = Some(s),
            "actor_id" if ident_ok(&s) => actor_id = Some(s),
            "namespace_id" if ident_ok(&s) => ns = Some(s),
            "actor_type" if actor_types.iter().any(|a| *a == s) => actor_type = Some(s),
            "role" if roles.iter().any(|r| *r == s) => role = Some(s),
            "content" if s.len() <= max_content => content = Some(s),
            "parent_event_id" if uuid_ok(&s) => f.parent_event_id = Some(s),
            "id" if uuid_ok(&s) => f.id = Some(s),
            _ => return None, // unknown, misplaced or invalid: the reference says why
        }
    }
    if !kind {
        return None;
    }
    f.stream = stream?;
    f.actor_id = actor_id?;
    f.actor_type = actor_type?;
    f.role = role?;
    f.content = content?;
    f.namespace_id = ns?;
    Some(f)
}

/// Each line's `EventInput`, or None where the reference must parse it (`entries.parse_event_lines`).
///
/// `cls` is `EventInput`; `setattr` is `object.__setattr__`, which sets the frozen fields of a
/// new instance as its own `__post_init__` does. The fields set are exactly what
/// `EventInput(**fields)` would hold for the line: `metadata` and `context` None, `plain` True.
#[pyfunction]
pub fn event_inputs<'py>(
    py: Python<'py>,
    lines: &Bound<'py, PyList>,
    cls: &Bound<'py, PyAny>,
    setattr: &Bound<'py, PyAny>,
    actor_types: Vec<String>,
    roles: Vec<String>,
    max_content: usize,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    let none = py.None();
    let new = cls.getattr(intern!(py, "__new__"))?;
    for line in lines.iter() {
        let fields = line
            .downcast_exact::<PyString>()
            .ok()
            .and_then(|s| s.to_str().ok())
            .and_then(parse_flat)
            .and_then(|pairs| event_fields(pairs, &actor_types, &roles, max_content));
        let Some(f) = fields else {
            out.append(&none)?;
            continue;
        };
        let obj = new.call1((cls,))?;
        let set = |name: &Bound<'py, PyString>, value: Bound<'py, PyAny>| {
            setattr.call1((&obj, name, value)).map(|_| ())
        };
        let text = |s: &str| PyString::new(py, s).into_any();
        let opt =
            |s: &Option<Cow<'_, str>>| s.as_deref().map_or_else(|| none.bind(py).clone(), text);
        set(intern!(py, "stream"), text(&f.stream))?;
        set(intern!(py, "actor_id"), text(&f.actor_id))?;
        set(intern!(py, "actor_type"), text(&f.actor_type))?;
        set(intern!(py, "role"), text(&f.role))?;
        set(intern!(py, "content"), text(&f.content))?;
        set(intern!(py, "namespace_id"), text(&f.namespace_id))?;
        set(intern!(py, "metadata"), none.bind(py).clone())?;
        set(intern!(py, "parent_event_id"), opt(&f.parent_event_id))?;
        set(intern!(py, "id"), opt(&f.id))?;
        set(
            intern!(py, "ts"),
            f.ts.map_or_else(
                || Ok(none.bind(py).clone()),
                |t| t.into_pyobject(py).map(Bound::into_any),
            )?,
        )?;
        set(intern!(py, "context"), none.bind(py).clone())?;
        set(
            intern!(py, "plain"),
            pyo3::types::PyBool::new(py, true).to_owned().into_any(),
        )?;
        out.append(obj)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_objects_parse() {
        let v =
            parse_flat(" {\"a\": \"x\\u00e9\\ud83d\\ude00\", \"b\": 12, \"c\": null}\n").unwrap();
        assert_eq!(v[0].1, Val::Str(Cow::Owned("x\u{e9}\u{1f600}".into())));
        assert_eq!(v[1].1, Val::Int(12));
        assert_eq!(v[2].1, Val::Null);
        assert_eq!(parse_flat("{}"), Some(vec![]));
    }

    #[test]
    fn anything_else_is_left_to_the_reference() {
        for bad in [
            "{\"a\": 1, \"a\": 2}",
            "{\"a\": 01}",
            "{\"a\": 1.0}",
            "{\"a\": -1}",
            "{\"a\": 1e3}",
            "{\"a\": \"\\ud800\"}",
            "{\"a\": \"\\udc00\"}",
            "{\"a\": \"\t\"}",
            "{\"a\": true}",
            "{\"a\": {}}",
            "{\"a\": NaN}",
            "{\"a\": 1,}",
            "{\"a\": 1} x",
            "\u{c}{}",
            "[]",
            "{\"a\": \"\\x\"}",
        ] {
            assert_eq!(parse_flat(bad), None, "{bad}");
        }
    }

    #[test]
    fn uuids_and_identifiers() {
        assert!(uuid_ok("0190a1b2-c3d4-7fff-bfff-ffffffffffff"));
        assert!(!uuid_ok("0190A1B2-c3d4-7fff-bfff-ffffffffffff"));
        assert!(!uuid_ok("0190a1b2-c3d4-7fff-bfff-fffffffffff"));
        assert!(ident_ok("a"));
        assert!(!ident_ok(""));
        assert!(!ident_ok("a\u{85}"));
        assert!(!ident_ok(&"x".repeat(4097)));
        assert!(ident_ok(&"\u{e9}".repeat(4096)));
    }
}
