//! Sizes, dates and counts as people read and type them.

/// A size with an optional binary unit, and decimals where they come to whole bytes: 4096,
/// 64K, 4M, 1.5G, 10GiB, 1T.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let usage = || format!("{text:?}: a size is a number with K, M, G, T or P (1.5G, 4096)");
    let trimmed = text.trim();
    let (number, unit) = match trimmed.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(at) => trimmed.split_at(at),
        None => (trimmed, ""),
    };
    let shift = match unit
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        "P" => 50,
        _ => return Err(usage()),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.contains('.') || fraction.len() > 9 {
        return Err(usage());
    }
    let digits: u128 = format!("{whole}{fraction}").parse().map_err(|_| usage())?;
    let scale = 10u128.pow(fraction.len() as u32);
    let scaled = digits << shift;
    if !scaled.is_multiple_of(scale) {
        return Err(format!("{text:?} is not a whole number of bytes"));
    }
    u64::try_from(scaled / scale).map_err(|_| format!("{text:?} is too large"))
}

/// A size for people: a whole number of its largest binary unit when it is one (`4 MiB`),
/// else one decimal with the exact bytes beside it (`1.3 GiB (1395864371 bytes)`); bytes
/// below 1 KiB.
pub fn size(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift {
            if bytes.is_multiple_of(1 << shift) {
                return format!("{} {unit}", bytes >> shift);
            }
            return format!("{} ({bytes} bytes)", approximate(bytes));
        }
    }
    count(bytes, "byte", "bytes")
}

/// A size to one decimal in its largest binary unit: `730.2 MiB`.
pub fn approximate(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `part` of `whole` as a percentage with one decimal (0 of nothing is 0.0 %).
pub fn percent(part: u64, whole: u64) -> String {
    format!("{:.1} %", 100.0 * part as f64 / whole.max(1) as f64)
}

/// A time in UTC to the second: `2026-11-26 01:23:45 UTC`.
pub fn date(unix_ns: i128) -> String {
    match time::OffsetDateTime::from_unix_timestamp_nanos(unix_ns) {
        Ok(t) => format!(
            "{}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => format!("{unix_ns} ns after 1970 (out of range)"),
    }
}

/// `n` and the noun that goes with it: `1 version`, `2 versions`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units_and_decimals() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("4m"), Ok(4 << 20));
        assert_eq!(parse_size("10G"), Ok(10 << 30));
        assert_eq!(parse_size("10GiB"), Ok(10 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("0.25M"), Ok(256 << 10));
        assert!(parse_size("1.1K")
            .expect_err("not whole bytes")
            .contains("whole number of bytes"));
        assert!(parse_size("ten").is_err());
        assert!(parse_size("4X").is_err());
        assert!(parse_size(".5G").is_err());
        assert!(parse_size("1.2.3G").is_err());
        assert!(parse_size("99999999999P").is_err());
    }

    #[test]
    fn sizes_dates_and_counts_read_as_people_write_them() {
        assert_eq!(size(4 << 20), "4 MiB");
        assert_eq!(size(3 << 29), "1.5 GiB (1610612736 bytes)");
        assert_eq!(size(1000), "1000 bytes");
        assert_eq!(size(1), "1 byte");
        assert_eq!(approximate(730 << 20), "730.0 MiB");
        assert_eq!(date(1_795_000_000_123_456_789), "2026-11-18 11:06:40 UTC");
        assert_eq!(count(1, "version", "versions"), "1 version");
        assert_eq!(count(0, "version", "versions"), "0 versions");
    }
}
