//! The fuzz target's entry (`select` in fuzz/): a query and an object to run it over, as a
//! client may send both (docs/fuzzing.md). Compiled for tests and the fuzzer only.

use crate::{CsvInput, CsvOutput, Header, Input, Output, Select};

/// Runs the query and object packed in `bytes`: the first byte picks the input's format and
/// CSV options and how the object is cut into pieces, the query runs to the first NUL, the
/// object is the rest. Returns the answer's length, or `None` when the query or the object
/// is refused.
pub fn select(bytes: &[u8]) -> Option<usize> {
    let (&control, rest) = bytes.split_first()?;
    let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
    let query = std::str::from_utf8(&rest[..end]).ok()?;
    let object = rest.get(end + 1..).unwrap_or_default();
    let input = if control & 1 == 0 {
        Input::Csv(CsvInput {
            header: [Header::None, Header::Ignore, Header::Use][usize::from(control >> 1 & 3) % 3],
            escape: (control & 8 != 0).then_some(b'\\'),
            comment: (control & 16 != 0).then_some(b'#'),
            record: if control & 32 != 0 {
                b"\r\n".to_vec()
            } else {
                b"\n".to_vec()
            },
            ..CsvInput::default()
        })
    } else {
        Input::Json
    };
    let output = if control & 64 == 0 {
        Output::Csv(CsvOutput::default())
    } else {
        Output::Json {
            record: "\n".into(),
        }
    };
    let now = ::time::macros::datetime!(2026-12-02 12:00 UTC);
    let mut select = Select::new(query, input, output, now).ok()?;
    let piece = if control & 128 == 0 {
        object.len().max(1)
    } else {
        3
    };
    let mut out = Vec::new();
    let mut answered = 0;
    for chunk in object.chunks(piece) {
        select.feed(chunk, &mut out).ok()?;
        while select.pending() {
            answered += std::mem::take(&mut out).len();
            select.drain(&mut out).ok()?;
        }
        if select.done() {
            break;
        }
    }
    while !select.finish(&mut out).ok()? {
        answered += std::mem::take(&mut out).len();
    }
    Some(answered + out.len())
}

/// Queries and objects a client sends: CSV with a header, quotes and aggregates; JSON with
/// paths; date functions; LIKE with classes and escapes.
pub fn seeds() -> Vec<Vec<u8>> {
    let seed = |control: u8, query: &str, object: &str| {
        let mut bytes = vec![control];
        bytes.extend_from_slice(query.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(object.as_bytes());
        bytes
    };
    vec![
        seed(4, "select count(*), max(name) from s3object", "name,age\na,1\n"),
        seed(
            4,
            "select s.name, cast(age as int) * 2 as twice from s3object s where twice > 1 limit 5",
            "name,age\n\"a,b\",1\nc,2\n",
        ),
        seed(
            136,
            "select sum(int(_1)), avg(int(_2)), min(_3), max(_3) from s3object where _3 like '%b[a-c]' escape '!'",
            "1,2,xbc\n3,4,\\\"x\\\"\n# note\n",
        ),
        seed(
            65,
            "select s.a, s.b from s3object[*].root s where s.a between 1 and 9",
            "{\"root\": [{\"a\": 1, \"b\": [\"x\"]}, {\"a\": 20}]}",
        ),
        seed(
            0,
            "select extract(year from to_timestamp(_1)), date_diff(day, to_timestamp(_1), utcnow()), to_string(to_timestamp(_1), 'yyyy-MM-dd x') from stdin",
            "19230512T051230Z\n",
        ),
        seed(
            0,
            "select case when _1 in ('a', 'b') then upper(_1) else coalesce(nullif(_1, 'c'), 'none') end, substring(_1 from 1 for 2), trim(both 'x' from _2) from s3object",
            "a,xyx\nc,x\n",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_runs_and_cut_seeds_do_not_panic() {
        for seed in seeds() {
            assert!(
                select(&seed).is_some(),
                "{}",
                String::from_utf8_lossy(&seed)
            );
            for cut in 0..seed.len() {
                let _ = select(&seed[..cut]);
            }
        }
    }
}

/// Inputs the fuzzer found that once failed (docs/fuzzing.md).
#[cfg(test)]
mod found {
    use super::*;

    #[test]
    fn found_1() {
        select(b"\x00select extract(year from to_timestamp(_1)), ate_diff(dby, to_timestamp(_1), utestamp(_1), 'yM--Myyyd d x') From stdin\x0019230\xff\x0a\x0a\x0a\x0a\x002460Zan\x0a");
    }
}
