//! Timestamps: read from ISO 8601 text (extended `2026-12-02T10:20:30Z` or basic
//! `20261202T102030Z`, down to a year `2026T`), written by `TO_STRING`'s patterns, and the
//! date functions `EXTRACT`, `DATE_ADD` and `DATE_DIFF`.

use time::{Date, Duration, Month, OffsetDateTime, PrimitiveDateTime, Time, UtcOffset};

use crate::{Error, Value};

/// Timestamps are of years 0 to 9999, as ISO 8601 writes them without a sign.
const YEAR_MAX: i32 = 9999;

/// Reads an ISO 8601 timestamp; without an offset it is UTC.
pub(crate) fn parse(text: &str) -> Result<OffsetDateTime, Error> {
    let bad = || Error::Eval(format!("'{text}' is not an ISO 8601 timestamp"));
    let t = text.trim();
    // Every form is ASCII, which lets the reading below cut the text by bytes.
    if !t.is_ascii() {
        return Err(bad());
    }
    let (date, rest) = match t.find('T') {
        Some(i) => (&t[..i], &t[i + 1..]),
        None => (t, ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let number = |s: &str| -> Result<u32, Error> {
        if s.is_empty() || !digits(s) {
            return Err(bad());
        }
        s.parse().map_err(|_| bad())
    };
    let (year, month, day) = match (date.len(), date.contains('-')) {
        (4, false) => (number(date)?, 1, 1),
        (8, false) => (
            number(&date[..4])?,
            number(&date[4..6])?,
            number(&date[6..])?,
        ),
        (_, true) => {
            let mut parts = date.split('-');
            let year = number(parts.next().ok_or_else(bad)?)?;
            let month = parts.next().map(number).transpose()?.unwrap_or(1);
            let day = parts.next().map(number).transpose()?.unwrap_or(1);
            if parts.next().is_some() {
                return Err(bad());
            }
            (year, month, day)
        }
        _ => return Err(bad()),
    };
    if year > YEAR_MAX as u32 {
        return Err(bad());
    }
    let month = Month::try_from(u8::try_from(month).map_err(|_| bad())?).map_err(|_| bad())?;
    let date = Date::from_calendar_date(year as i32, month, u8::try_from(day).map_err(|_| bad())?)
        .map_err(|_| bad())?;
    // The time, then the offset: Z, +hh, +hh:mm or +hhmm.
    let split = rest.find(['Z', 'z', '+', '-']).unwrap_or(rest.len());
    let (clock, zone) = rest.split_at(split);
    let (clock, fraction) = match clock.split_once('.') {
        Some((c, f)) => (c, f),
        None => (clock, ""),
    };
    let clock: String = clock.chars().filter(|c| *c != ':').collect();
    let field = |i: usize| -> Result<u8, Error> {
        match clock.get(i..i + 2) {
            Some(s) => Ok(number(s)? as u8),
            None => Ok(0),
        }
    };
    if !(clock.is_empty() || [2, 4, 6].contains(&clock.len())) {
        return Err(bad());
    }
    let nanos = if fraction.is_empty() {
        0
    } else {
        let digits9: String = fraction
            .chars()
            .chain("000000000".chars())
            .take(9)
            .collect();
        number(&digits9)?
    };
    let time = Time::from_hms_nano(field(0)?, field(2)?, field(4)?, nanos).map_err(|_| bad())?;
    let offset = match zone {
        "" | "Z" | "z" => UtcOffset::UTC,
        _ => {
            let sign: i8 = if zone.starts_with('-') { -1 } else { 1 };
            let hm: String = zone[1..].chars().filter(|c| *c != ':').collect();
            if !(hm.len() == 2 || hm.len() == 4) {
                return Err(bad());
            }
            let hours = number(&hm[..2])? as i8;
            let minutes = if hm.len() == 4 {
                number(&hm[2..])? as i8
            } else {
                0
            };
            UtcOffset::from_hms(sign * hours, sign * minutes, 0).map_err(|_| bad())?
        }
    };
    Ok(PrimitiveDateTime::new(date, time).assume_offset(offset))
}

/// The longest run of one letter in a `TO_STRING` pattern (nanoseconds have nine digits).
const RUN_MAX: usize = 9;

/// `TO_STRING(timestamp, pattern)`: S3 Select's pattern letters (`yyyy`, `MM`, `MMM`,
/// `dd`, `HH`, `hh`, `mm`, `ss`, `S`..., `a`, `n`, `X`/`x` offsets); quoted text as is.
pub(crate) fn format(t: &OffsetDateTime, pattern: &str) -> Result<String, Error> {
    let mut out = String::new();
    let chars: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let run = chars[i..].iter().take_while(|x| **x == c).count();
        if c.is_ascii_alphabetic() && run > RUN_MAX {
            return Err(Error::Eval(format!(
                "a pattern letter repeats at most {RUN_MAX} times, not {run}"
            )));
        }
        i += run;
        let pad = |n: i64, width: usize| format!("{n:0width$}");
        let offset = t.offset();
        let (oh, om) = (offset.whole_hours(), offset.minutes_past_hour().abs());
        let sign = if offset.is_negative() { '-' } else { '+' };
        match c {
            'y' => match run {
                2 => out += &pad(i64::from(t.year() % 100), 2),
                _ => out += &pad(i64::from(t.year()), run),
            },
            'M' => match run {
                1 | 2 => out += &pad(i64::from(u8::from(t.month())), run),
                3 => out += &t.month().to_string()[..3],
                4 => out += &t.month().to_string(),
                _ => out.push(t.month().to_string().chars().next().unwrap_or('?')),
            },
            'd' => out += &pad(i64::from(t.day()), run),
            'H' => out += &pad(i64::from(t.hour()), run),
            'h' => out += &pad(i64::from((t.hour() + 11) % 12 + 1), run),
            'm' => out += &pad(i64::from(t.minute()), run),
            's' => out += &pad(i64::from(t.second()), run),
            'S' => {
                let digits = format!("{:09}", t.nanosecond());
                out += &digits[..run.min(9)];
            }
            'n' => out += &t.nanosecond().to_string(),
            'a' => out += if t.hour() < 12 { "AM" } else { "PM" },
            'X' | 'x' if c == 'X' && offset.is_utc() => out.push('Z'),
            'X' | 'x' => match run {
                1 => out += &format!("{sign}{:02}", oh.abs()),
                2 => out += &format!("{sign}{:02}{om:02}", oh.abs()),
                _ => out += &format!("{sign}{:02}:{om:02}", oh.abs()),
            },
            // '' is a quote; 'text' is the text as it is.
            '\'' => {
                out.extend(std::iter::repeat_n('\'', run / 2));
                if run % 2 == 1 {
                    let end = chars[i..].iter().position(|x| *x == '\'');
                    let Some(end) = end else {
                        return Err(Error::Eval(format!(
                            "a quote is never closed in the pattern '{pattern}'"
                        )));
                    };
                    out.extend(&chars[i..i + end]);
                    i += end + 1;
                }
            }
            c if c.is_ascii_alphabetic() => {
                return Err(Error::Eval(format!(
                    "'{c}' is not a pattern letter of TO_STRING"
                )))
            }
            c => out.extend(std::iter::repeat_n(c, run)),
        }
    }
    Ok(out)
}

/// `EXTRACT(part FROM t)`, `DATE_ADD(part, n, t)`, `DATE_DIFF(part, a, b)`; the part
/// comes first, as text, and the plan has checked how many arguments follow it.
pub(crate) fn call(name: &str, args: &[Value]) -> Result<Value, Error> {
    let part = args.first().map(Value::text).unwrap_or_default();
    let stamp = |v: &Value| -> Result<Option<OffsetDateTime>, Error> {
        match v {
            Value::Null => Ok(None),
            Value::Timestamp(t) => Ok(Some(*t)),
            Value::Str(s) => parse(s).map(Some),
            other => Err(Error::Eval(format!(
                "{name}() takes a timestamp, not {}",
                other.shown()
            ))),
        }
    };
    match name {
        "extract" => {
            let Some(t) = stamp(&args[1])? else {
                return Ok(Value::Null);
            };
            Ok(Value::Int(match part.as_str() {
                "year" => i64::from(t.year()),
                "month" => i64::from(u8::from(t.month())),
                "day" => i64::from(t.day()),
                "hour" => i64::from(t.hour()),
                "minute" => i64::from(t.minute()),
                "second" => i64::from(t.second()),
                "timezone_hour" => i64::from(t.offset().whole_hours()),
                "timezone_minute" => i64::from(t.offset().minutes_past_hour()),
                _ => return Err(unknown(&part)),
            }))
        }
        "date_add" => {
            let Some(t) = stamp(&args[2])? else {
                return Ok(Value::Null);
            };
            let n = match args[1].number() {
                Some(Value::Int(n)) => n,
                _ => {
                    return Err(Error::Eval(format!(
                        "date_add() adds a whole number, not {}",
                        args[1].shown()
                    )))
                }
            };
            let overflow = || Error::Eval("date_add() goes past the year 9999 or before 0".into());
            let seconds = |per: i64| n.checked_mul(per).map(Duration::seconds);
            let added = match part.as_str() {
                "year" => n.checked_mul(12).and_then(|months| add_months(t, months)),
                "month" => add_months(t, n),
                "day" => seconds(86_400).and_then(|d| t.checked_add(d)),
                "hour" => seconds(3_600).and_then(|d| t.checked_add(d)),
                "minute" => seconds(60).and_then(|d| t.checked_add(d)),
                "second" => seconds(1).and_then(|d| t.checked_add(d)),
                _ => return Err(unknown(&part)),
            };
            let added = added
                .filter(|t| (0..=YEAR_MAX).contains(&t.year()))
                .ok_or_else(overflow)?;
            Ok(Value::Timestamp(added))
        }
        "date_diff" => {
            let (Some(a), Some(b)) = (stamp(&args[1])?, stamp(&args[2])?) else {
                return Ok(Value::Null);
            };
            let span = b - a;
            Ok(Value::Int(match part.as_str() {
                "year" => months_between(a, b) / 12,
                "month" => months_between(a, b),
                "day" => span.whole_days(),
                "hour" => span.whole_hours(),
                "minute" => span.whole_minutes(),
                "second" => span.whole_seconds(),
                _ => return Err(unknown(&part)),
            }))
        }
        _ => Err(Error::Parse(format!("no function {name}()"))),
    }
}

fn unknown(part: &str) -> Error {
    Error::Eval(format!("'{part}' is not a date part"))
}

/// `t` moved by `n` months, its day kept or cut to the month's last.
fn add_months(t: OffsetDateTime, n: i64) -> Option<OffsetDateTime> {
    let index = (i64::from(t.year()) * 12 + i64::from(u8::from(t.month())) - 1).checked_add(n)?;
    let year = i32::try_from(index.div_euclid(12)).ok()?;
    let month = Month::try_from(u8::try_from(index.rem_euclid(12) + 1).ok()?).ok()?;
    let day = t.day().min(time::util::days_in_month(month, year));
    let date = Date::from_calendar_date(year, month, day).ok()?;
    Some(t.replace_date(date))
}

/// Whole months from `a` to `b` (negative when `b` is earlier).
fn months_between(a: OffsetDateTime, b: OffsetDateTime) -> i64 {
    let months = |t: OffsetDateTime| i64::from(t.year()) * 12 + i64::from(u8::from(t.month()));
    let mut n = months(b) - months(a);
    let rest = |t: OffsetDateTime| (t.day(), t.time());
    if n > 0 && rest(b) < rest(a) {
        n -= 1;
    } else if n < 0 && rest(b) > rest(a) {
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> OffsetDateTime {
        parse(text).expect("a timestamp")
    }

    #[test]
    fn basic_and_extended_forms_read_alike() {
        assert_eq!(at("19230512T051230Z"), at("1923-05-12T05:12:30Z"));
        assert_eq!(at("2026T"), at("2026-01-01T00:00:00Z"));
        assert_eq!(at("2026-12-02T10:00:00+02:00"), at("2026-12-02T08:00:00Z"));
        assert_eq!(at("2026-12-02T10:00:00.5Z").nanosecond(), 500_000_000);
        for bad in [
            "",
            "abc",
            "2026-13-01T",
            "20261301T000000Z",
            "2026-12-02T25:00Z",
        ] {
            assert!(parse(bad).is_err(), "{bad} is refused");
        }
    }

    #[test]
    fn date_parts_add_and_differ_in_whole_units() {
        let t = Value::Timestamp(at("2024-01-31T05:00:00Z"));
        let call3 = |name: &str, part: &str, a: Value, b: Value| {
            call(name, &[Value::Str(part.into()), a, b]).expect("a result")
        };
        assert_eq!(
            call3("date_add", "month", Value::Int(1), t.clone()),
            Value::Timestamp(at("2024-02-29T05:00:00Z"))
        );
        let later = call3("date_add", "day", Value::Int(366), t.clone());
        assert_eq!(call3("date_diff", "year", t.clone(), later), Value::Int(1));
        let day = call3("date_add", "day", Value::Int(1), t.clone());
        assert_eq!(call3("date_diff", "hour", t.clone(), day), Value::Int(24));
        assert_eq!(
            call("extract", &[Value::Str("month".into()), t.clone()]).expect("a part"),
            Value::Int(1)
        );
        assert_eq!(
            format(&at("2024-01-31T05:06:07+02:00"), "yyyy-MM-dd HH:mm:ss x").expect("formats"),
            "2024-01-31 05:06:07 +02"
        );
        assert_eq!(
            format(&at("2024-01-31T05:06:07Z"), "X").expect("formats"),
            "Z"
        );
    }
}
