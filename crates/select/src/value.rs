//! The values a query computes with, and what arithmetic and comparison do to them.
//!
//! CSV gives every field as text; a field meets a number by being read as one, as Ceph's
//! gateway does (`_1 > 5` compares numbers when `_1` holds one), and text that is not a
//! number in arithmetic is an error, not a silent zero.

use std::cmp::Ordering;
use std::fmt::Write;

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::Error;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Timestamp(OffsetDateTime),
    /// A JSON object or array, kept whole.
    Json(serde_json::Value),
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The value as a number, if it is one or is text that reads as one.
    pub fn number(&self) -> Option<Value> {
        match self {
            Value::Int(_) | Value::Float(_) => Some(self.clone()),
            Value::Str(s) => read_number(s),
            _ => None,
        }
    }

    pub(crate) fn float(&self) -> Option<f64> {
        match self.number()? {
            Value::Int(n) => Some(n as f64),
            Value::Float(f) => Some(f),
            _ => None,
        }
    }

    /// The value as SQL's truth: `NULL` is unknown.
    pub fn truth(&self) -> Result<Option<bool>, Error> {
        match self {
            Value::Null => Ok(None),
            Value::Bool(b) => Ok(Some(*b)),
            Value::Str(s) if s.eq_ignore_ascii_case("true") => Ok(Some(true)),
            Value::Str(s) if s.eq_ignore_ascii_case("false") => Ok(Some(false)),
            other => Err(Error::Eval(format!(
                "{} is not true or false",
                other.shown()
            ))),
        }
    }

    /// The value as text, as a CSV field shows it.
    pub fn text(&self) -> String {
        match self {
            Value::Null => String::new(),
            Value::Bool(b) => b.to_string(),
            Value::Int(n) => n.to_string(),
            Value::Float(f) => float_text(*f),
            Value::Str(s) => s.clone(),
            Value::Timestamp(t) => timestamp_text(t),
            Value::Json(j) => j.to_string(),
        }
    }

    /// The value for an error message, cut to its first hundred bytes or so.
    pub(crate) fn shown(&self) -> String {
        match self {
            Value::Null => "NULL".into(),
            Value::Str(s) if s.len() > SHOWN_BYTES => format!("'{}...'", cut(s, SHOWN_BYTES)),
            Value::Str(s) => format!("'{s}'"),
            other => cut(&other.text(), SHOWN_BYTES).to_owned(),
        }
    }

    /// About how many bytes the value takes written out.
    pub(crate) fn size(&self) -> usize {
        match self {
            Value::Str(s) => s.len(),
            Value::Json(j) => j.to_string().len(),
            _ => 32,
        }
    }

    pub fn json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(n) => serde_json::Value::from(*n),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::Timestamp(t) => serde_json::Value::String(timestamp_text(t)),
            Value::Json(j) => j.clone(),
        }
    }

    pub fn from_json(json: &serde_json::Value) -> Value {
        match json {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Value::Str(s.clone()),
            other => Value::Json(other.clone()),
        }
    }
}

/// How much of a value an error message shows.
const SHOWN_BYTES: usize = 100;

/// `text` cut to at most `max` bytes, at a character's boundary.
pub(crate) fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Text that reads as a number: an integer when it has no point or exponent.
pub(crate) fn read_number(text: &str) -> Option<Value> {
    let t = text.trim();
    if t.is_empty() {
        return None;
    }
    if let Ok(n) = t.parse::<i64>() {
        return Some(Value::Int(n));
    }
    let numeric = t
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E'));
    if !numeric {
        return None;
    }
    t.parse::<f64>().ok().map(Value::Float)
}

/// A float as text: whole values keep no fraction (`5`, not `5.0`), others as Rust's
/// shortest exact form.
fn float_text(f: f64) -> String {
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        let mut out = String::new();
        let _ = write!(out, "{f}");
        out
    }
}

/// A timestamp in RFC 3339; the date functions keep every timestamp within its years
/// (0 to 9999), so this never falls back.
pub(crate) fn timestamp_text(t: &OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| format!("{t}"))
}

/// Compares two values; `None` when either is NULL or they cannot be compared.
pub fn compare(a: &Value, b: &Value) -> Result<Option<Ordering>, Error> {
    use Value::*;
    Ok(match (a, b) {
        (Null, _) | (_, Null) => None,
        (Int(x), Int(y)) => Some(x.cmp(y)),
        (Int(_) | Float(_), Int(_) | Float(_)) => numbers(a, b),
        (Str(x), Str(y)) => Some(x.cmp(y)),
        (Str(_), Int(_) | Float(_)) | (Int(_) | Float(_), Str(_)) => {
            match (a.number(), b.number()) {
                (Some(x), Some(y)) => compare(&x, &y)?,
                _ => Some(a.text().cmp(&b.text())),
            }
        }
        (Bool(x), Bool(y)) => Some(x.cmp(y)),
        (Timestamp(x), Timestamp(y)) => Some(x.cmp(y)),
        (Timestamp(x), Str(s)) => crate::time::parse(s).ok().map(|y| x.cmp(&y)),
        (Str(s), Timestamp(y)) => crate::time::parse(s).ok().map(|x| x.cmp(y)),
        (Bool(_), Str(s)) | (Str(s), Bool(_)) => {
            let other = Str(s.clone()).truth()?;
            let (x, y) = match a {
                Bool(x) => (Some(*x), other),
                _ => (other, b.truth()?),
            };
            x.zip(y).map(|(x, y)| x.cmp(&y))
        }
        (Json(x), Json(y)) => (x == y).then_some(Ordering::Equal),
        _ => {
            return Err(Error::Eval(format!(
                "cannot compare {} with {}",
                a.shown(),
                b.shown()
            )))
        }
    })
}

fn numbers(a: &Value, b: &Value) -> Option<Ordering> {
    a.float()?.partial_cmp(&b.float()?)
}

#[derive(Clone, Copy)]
pub(crate) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

/// `a op b`, integers kept as integers where they can be (division of integers that does
/// not come out whole gives a float, as Ceph's gateway does).
pub(crate) fn arithmetic(op: Arith, a: &Value, b: &Value) -> Result<Value, Error> {
    if a.is_null() || b.is_null() {
        return Ok(Value::Null);
    }
    let (Some(x), Some(y)) = (a.number(), b.number()) else {
        let bad = if a.number().is_none() { a } else { b };
        return Err(Error::Eval(format!("{} is not a number", bad.shown())));
    };
    if let (Value::Int(x), Value::Int(y)) = (&x, &y) {
        let (x, y) = (*x, *y);
        let done = match op {
            Arith::Add => x.checked_add(y),
            Arith::Sub => x.checked_sub(y),
            Arith::Mul => x.checked_mul(y),
            Arith::Div if y == 0 => return Err(Error::Eval("division by zero".into())),
            // i64::MIN / -1 does not fit: the float path below answers it.
            Arith::Div => x
                .checked_rem(y)
                .filter(|r| *r == 0)
                .and_then(|_| x.checked_div(y)),
            Arith::Mod if y == 0 => return Err(Error::Eval("modulo by zero".into())),
            Arith::Mod => x.checked_rem(y),
        };
        if let Some(n) = done {
            return Ok(Value::Int(n));
        }
    }
    let (x, y) = (x.float().unwrap_or(f64::NAN), y.float().unwrap_or(f64::NAN));
    Ok(Value::Float(match op {
        Arith::Add => x + y,
        Arith::Sub => x - y,
        Arith::Mul => x * y,
        Arith::Div if y == 0.0 => return Err(Error::Eval("division by zero".into())),
        Arith::Div => x / y,
        Arith::Mod if y == 0.0 => return Err(Error::Eval("modulo by zero".into())),
        Arith::Mod => x % y,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_fields_meet_numbers_as_numbers() {
        let five = Value::Str("5".into());
        assert_eq!(
            compare(&five, &Value::Int(10)).expect("compares"),
            Some(Ordering::Less)
        );
        assert_eq!(
            arithmetic(Arith::Add, &five, &Value::Float(0.5)).expect("adds"),
            Value::Float(5.5)
        );
        assert_eq!(
            arithmetic(Arith::Div, &Value::Int(7), &Value::Int(2)).expect("divides"),
            Value::Float(3.5)
        );
        assert_eq!(
            arithmetic(Arith::Div, &Value::Int(8), &Value::Int(2)).expect("divides"),
            Value::Int(4)
        );
        assert!(arithmetic(Arith::Add, &Value::Str("x".into()), &Value::Int(1)).is_err());
        let min = Value::Int(i64::MIN);
        assert_eq!(
            arithmetic(Arith::Div, &min, &Value::Int(-1)).expect("divides"),
            Value::Float(-(i64::MIN as f64))
        );
        assert_eq!(
            arithmetic(Arith::Mod, &min, &Value::Int(-1)).expect("divides"),
            Value::Float(-0.0)
        );
        assert!(arithmetic(Arith::Div, &Value::Int(1), &Value::Int(0)).is_err());
        assert_eq!(
            arithmetic(Arith::Mul, &Value::Null, &Value::Int(1)).expect("null"),
            Value::Null
        );
    }

    #[test]
    fn whole_floats_print_without_a_fraction() {
        assert_eq!(Value::Float(5.0).text(), "5");
        assert_eq!(Value::Float(2.5).text(), "2.5");
        assert_eq!(Value::Int(-3).text(), "-3");
    }
}
