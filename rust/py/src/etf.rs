//! Python bindings of `hippograph_core::etf`: the Python → Erlang term mapping of
//! The fingerprint of docs/architecture.md: the ETF encoder and the version-1 trajectory fingerprint.
//!
//! The mapping accepts *exactly* these built-in types, never their subclasses:
//! `str` → binary (UTF-8), `bytes` → binary, `bool` → atom `true`/`false`, `None` →
//! atom `nil`, `int` → integer (any size), `float` → float (finite only),
//! `hippograph.Atom` → atom, `list` → list, `tuple` → tuple, `dict` → map.
//! Subclasses are refused because their meaning is ambiguous for a cross-language
//! digest: a `str` enum could stand for a binary or an atom, a `numpy.float64` (a
//! `float` subclass) or a `namedtuple` carries intent the mapping cannot see. Callers
//! convert explicitly (`str(x)`, `Atom(x.value)`, `float(x)`, `tuple(x)`).
//!
//! Conversion runs under the GIL and is bounded like the encoder: nesting deeper than
//! the core's depth limit, more than [`MAX_NODES`] values, or more than the core's size
//! limit (counted with the core's term-size table as values are converted) is refused
//! before memory or the stack can run out. Encoding and hashing of
//! large terms run with the GIL released. Every refusal is
//! `IngestionError(reason="invalid_metadata")` (or `invalid_goal` / `invalid_step` for
//! the fingerprint's text arguments), with the path of the offending value.

use crate::errors;
use hippograph_core::etf::{self, EtfError, Term};
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// Most values one conversion may produce (each costs a `Term` in memory, so shared
/// references such as `[x] * 1000` nested a few times cannot exhaust memory).
pub const MAX_NODES: usize = 1 << 22;
/// Terms whose encoding is estimated above this many bytes are encoded with the GIL
/// released; below it the release costs more than it saves.
const DETACH_THRESHOLD: usize = 64 * 1024;
/// Error paths longer than this are shown abbreviated.
const MAX_PATH_SEGMENTS: usize = 8;
/// Longest rendering of a dict key in an error path.
const KEY_REPR_CHARS: usize = 40;

/// Why a value could not be converted: a message and the path to it (innermost
/// segment first, reversed when rendered).
enum Fail {
    Invalid { message: String, path: Vec<String> },
    Python(PyErr),
}

impl Fail {
    fn invalid(message: impl Into<String>) -> Fail {
        Fail::Invalid { message: message.into(), path: Vec::new() }
    }

    fn at(mut self, segment: impl FnOnce() -> String) -> Fail {
        if let Fail::Invalid { path, .. } = &mut self {
            path.push(segment());
        }
        self
    }

    fn into_pyerr(self, py: Python<'_>, reason: &str, root: &str) -> PyErr {
        match self {
            Fail::Invalid { message, path } => {
                let segments: Vec<&str> = path.iter().rev().map(String::as_str).collect();
                let at = if segments.len() > MAX_PATH_SEGMENTS {
                    let tail = &segments[segments.len() - 2..];
                    format!("{}…{}", segments[..MAX_PATH_SEGMENTS - 2].concat(), tail.concat())
                } else {
                    segments.concat()
                };
                errors::ingestion(py, reason, format!("{message} at {root}{at}"))
            }
            Fail::Python(err) => err,
        }
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|_| "?".to_string())
}

/// A short `repr` of a dict key for error paths.
fn key_repr(key: &Bound<'_, PyAny>) -> String {
    let shown = key.repr().map(|r| r.to_string_lossy().into_owned()).unwrap_or_else(|_| "?".to_string());
    if shown.chars().count() > KEY_REPR_CHARS {
        let cut: String = shown.chars().take(KEY_REPR_CHARS).collect();
        format!("{cut}…")
    } else {
        shown
    }
}

/// Python → [`Term`] conversion with depth, node and size budgets.
struct Converter<'py> {
    py: Python<'py>,
    atom_class: Option<Bound<'py, PyAny>>,
    max_depth: usize,
    nodes_left: usize,
    /// Encoded size of what was converted so far, exact once each container is closed
    /// (inside an open list of small integers each counts a byte more until the list
    /// closes as a string); the core checks the final size again.
    bytes: usize,
    max_bytes: usize,
}

impl<'py> Converter<'py> {
    fn new(py: Python<'py>) -> Self {
        let limits = etf::Limits::default();
        Converter {
            py,
            atom_class: None,
            max_depth: limits.max_depth,
            nodes_left: MAX_NODES,
            bytes: 0,
            max_bytes: limits.max_bytes,
        }
    }

    /// Counts one more value of encoded size `bytes`.
    fn charge(&mut self, bytes: usize) -> Result<(), Fail> {
        if self.nodes_left == 0 {
            return Err(Fail::invalid(format!("term holds more than {MAX_NODES} values")));
        }
        self.nodes_left -= 1;
        self.size_to(self.bytes.saturating_add(bytes))
    }

    fn size_to(&mut self, bytes: usize) -> Result<(), Fail> {
        self.bytes = bytes;
        if self.bytes > self.max_bytes {
            return Err(Fail::invalid(EtfError::TooLarge { limit: self.max_bytes }.to_string()));
        }
        Ok(())
    }

    fn atom_class(&mut self) -> Result<&Bound<'py, PyAny>, Fail> {
        if self.atom_class.is_none() {
            let cls = PyModule::import(self.py, "hippograph.graph.atom").and_then(|m| m.getattr("Atom"));
            self.atom_class = Some(cls.map_err(Fail::Python)?);
        }
        self.atom_class.as_ref().ok_or_else(|| Fail::invalid("hippograph.graph.atom.Atom is unavailable"))
    }

    /// Converts `obj`, which sits at nesting depth `depth` (checked before any
    /// recursion, so the Rust stack is bounded by the depth limit).
    fn convert(&mut self, obj: &Bound<'py, PyAny>, depth: usize) -> Result<Term, Fail> {
        if depth > self.max_depth {
            return Err(Fail::invalid(EtfError::TooDeep { limit: self.max_depth }.to_string()));
        }
        if obj.is_none() {
            return self.named_atom("nil");
        }
        if let Ok(b) = obj.cast_exact::<PyBool>() {
            return self.named_atom(if b.is_true() { "true" } else { "false" });
        }
        if let Ok(i) = obj.cast_exact::<PyInt>() {
            return self.int(i);
        }
        if let Ok(f) = obj.cast_exact::<PyFloat>() {
            let value = f.value();
            if !value.is_finite() {
                return Err(Fail::invalid(EtfError::NonFiniteFloat.to_string()));
            }
            self.charge(etf::FLOAT_SIZE)?;
            return Ok(Term::Float(value));
        }
        if let Ok(s) = obj.cast_exact::<PyString>() {
            let text = s.to_str().map_err(|_| Fail::invalid("str is not encodable as UTF-8 (lone surrogate)"))?;
            self.charge(etf::binary_size(text.len()))?;
            return Ok(Term::Binary(text.as_bytes().to_vec()));
        }
        if let Ok(b) = obj.cast_exact::<PyBytes>() {
            let bytes = b.as_bytes();
            self.charge(etf::binary_size(bytes.len()))?;
            return Ok(Term::Binary(bytes.to_vec()));
        }
        if let Ok(list) = obj.cast_exact::<PyList>() {
            let before = self.bytes;
            self.charge(etf::NIL_SIZE)?;
            let start = self.bytes;
            let mut items = Vec::with_capacity(list.len().min(self.nodes_left));
            for (i, item) in list.iter().enumerate() {
                items.push(self.convert(&item, depth + 1).map_err(|f| f.at(|| format!("[{i}]")))?);
            }
            self.size_to(before.saturating_add(etf::list_size(&items, self.bytes.saturating_sub(start))))?;
            return Ok(Term::List(items));
        }
        if let Ok(tuple) = obj.cast_exact::<PyTuple>() {
            self.charge(etf::tuple_header_size(tuple.len()))?;
            let mut items = Vec::with_capacity(tuple.len().min(self.nodes_left));
            for (i, item) in tuple.iter().enumerate() {
                items.push(self.convert(&item, depth + 1).map_err(|f| f.at(|| format!("[{i}]")))?);
            }
            return Ok(Term::Tuple(items));
        }
        if let Ok(dict) = obj.cast_exact::<PyDict>() {
            self.charge(etf::MAP_HEADER_SIZE)?;
            let mut pairs = Vec::with_capacity(dict.len().min(self.nodes_left));
            for (key, value) in dict.iter() {
                let k = self.convert(&key, depth + 1).map_err(|f| f.at(|| format!("<key {}>", key_repr(&key))))?;
                let v = self.convert(&value, depth + 1).map_err(|f| f.at(|| format!("[{}]", key_repr(&key))))?;
                pairs.push((k, v));
            }
            return Ok(Term::Map(pairs));
        }
        if obj.get_type().is(self.atom_class()?) {
            return self.atom(obj);
        }
        Err(Fail::invalid(format!(
            "value of type '{}' is outside the term mapping (str, bytes, int, float, bool, None, Atom, list, tuple, dict; \
             subclasses are not accepted)",
            type_name(obj)
        )))
    }

    fn int(&mut self, i: &Bound<'py, PyInt>) -> Result<Term, Fail> {
        match i.extract::<i64>() {
            Ok(v) => {
                self.charge(etf::int_size(v))?;
                Ok(Term::Int(v))
            }
            Err(e) if e.is_instance_of::<PyOverflowError>(self.py) => {
                let negative = i.lt(0).map_err(Fail::Python)?;
                let abs = i.call_method0("__abs__").map_err(Fail::Python)?;
                let bits: usize = abs.call_method0("bit_length").and_then(|b| b.extract()).map_err(Fail::Python)?;
                let len = bits.div_ceil(8);
                self.charge(etf::big_size(len))?;
                let raw = abs.call_method1("to_bytes", (len, "little")).map_err(Fail::Python)?;
                let bytes = raw.cast::<PyBytes>().map_err(|e| Fail::Python(e.into()))?;
                Ok(Term::Big { negative, magnitude: bytes.as_bytes().to_vec() })
            }
            Err(e) => Err(Fail::Python(e)),
        }
    }

    fn atom(&mut self, obj: &Bound<'py, PyAny>) -> Result<Term, Fail> {
        let broken = || Fail::invalid("Atom has no valid str name");
        let name = obj.getattr("name").map_err(|_| broken())?;
        let name = name.cast_exact::<PyString>().map_err(|_| broken())?;
        let text = name.to_str().map_err(|_| broken())?;
        let chars = text.chars().count();
        if chars > etf::MAX_ATOM_CHARS {
            return Err(Fail::invalid(EtfError::AtomTooLong { chars }.to_string()));
        }
        self.named_atom(text)
    }

    fn named_atom(&mut self, name: &str) -> Result<Term, Fail> {
        self.charge(etf::atom_size(name))?;
        Ok(Term::atom(name))
    }
}

fn encode_error(py: Python<'_>, reason: &str, err: EtfError) -> PyErr {
    errors::ingestion(py, reason, err.to_string())
}

/// Runs `f` with the GIL released when the term is large, always panic-safe.
fn run<T: Send>(py: Python<'_>, what: &str, estimated: usize, f: impl FnOnce() -> T + Send) -> PyResult<T> {
    if estimated > DETACH_THRESHOLD {
        errors::detached(py, what, f)
    } else {
        errors::guard(py, what, f)
    }
}

/// `term_to_binary(term, [deterministic, {minor_version, 2}])` of a Python value
/// under hippograph's term mapping; raises `IngestionError("invalid_metadata")`.
#[pyfunction]
fn etf_encode<'py>(py: Python<'py>, term: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    let mut conv = Converter::new(py);
    let converted = errors::guard(py, "etf_encode", || conv.convert(term, 0))?;
    let value = converted.map_err(|f| f.into_pyerr(py, "invalid_metadata", "term"))?;
    let bytes = run(py, "etf_encode", conv.bytes, move || etf::encode(&value))?
        .map_err(|e| encode_error(py, "invalid_metadata", e))?;
    Ok(PyBytes::new(py, &bytes))
}

fn text_arg<'a>(value: &'a Bound<'_, PyAny>) -> Result<&'a str, &'static str> {
    let s = value.cast::<PyString>().map_err(|_| "must be a str")?;
    s.to_str().map_err(|_| "is not encodable as UTF-8 (lone surrogate)")
}

/// Fingerprint version 1: SHA-256 of the external format of
/// `{mnemosyne_trajectory, 1, Goal, [{Obs, Act}, ...], Metadata}` (32 bytes).
///
/// Checks only what the encoding needs (text arguments, a list of 2-tuples, a
/// mappable dict); blank goals and empty step lists are policy, checked by
/// `hippograph.graph.trajectory.validate_trajectory`.
#[pyfunction]
fn fingerprint_v1<'py>(
    py: Python<'py>,
    goal: &Bound<'py, PyAny>,
    steps: &Bound<'py, PyAny>,
    metadata: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let goal = text_arg(goal).map_err(|why| errors::ingestion(py, "invalid_goal", format!("goal {why}")))?;

    let meta_dict = metadata.cast_exact::<PyDict>().map_err(|_| {
        errors::ingestion(py, "invalid_metadata", format!("metadata must be a dict, got '{}'", type_name(metadata)))
    })?;
    let mut conv = Converter::new(py);
    // The metadata is the fifth element of the fingerprinted tuple: depth 1.
    let converted = errors::guard(py, "fingerprint_v1", || conv.convert(meta_dict.as_any(), 1))?;
    let meta = converted.map_err(|f| f.into_pyerr(py, "invalid_metadata", "metadata"))?;

    let steps = steps.cast::<PyList>().map_err(|_| {
        errors::ingestion(py, "invalid_steps", format!("steps must be a list, got '{}'", type_name(steps)))
    })?;
    let mut pairs: Vec<(String, String)> = Vec::with_capacity(steps.len());
    let mut text_bytes = 0usize;
    for (i, step) in steps.iter().enumerate() {
        let bad = |why: &str| errors::ingestion(py, "invalid_step", format!("steps[{i}] {why}"));
        let pair = step.cast::<PyTuple>().map_err(|_| bad("must be an (observation, action) tuple"))?;
        if pair.len() != 2 {
            return Err(bad("must be an (observation, action) tuple"));
        }
        let obs_item = pair.get_item(0)?;
        let act_item = pair.get_item(1)?;
        let obs = text_arg(&obs_item).map_err(|why| bad(&format!("observation {why}")))?;
        let act = text_arg(&act_item).map_err(|why| bad(&format!("action {why}")))?;
        text_bytes = text_bytes.saturating_add(obs.len() + act.len());
        pairs.push((obs.to_string(), act.to_string()));
    }

    let max_bytes = etf::Limits::default().max_bytes;
    if goal.len() > max_bytes {
        return Err(errors::ingestion(py, "invalid_goal", format!("goal is longer than {max_bytes} bytes")));
    }
    if text_bytes > max_bytes {
        return Err(errors::ingestion(py, "invalid_steps", format!("steps hold more than {max_bytes} bytes of text")));
    }
    let estimated = conv.bytes.saturating_add(text_bytes).saturating_add(goal.len());
    let digest = run(py, "fingerprint_v1", estimated, move || etf::fingerprint_v1(goal, &pairs, meta))?
        .map_err(|e| encode_error(py, "invalid_metadata", e))?;
    Ok(PyBytes::new(py, &digest))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(etf_encode, m)?)?;
    m.add_function(wrap_pyfunction!(fingerprint_v1, m)?)?;
    Ok(())
}
