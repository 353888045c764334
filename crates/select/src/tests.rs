//! Whole queries over whole inputs, fed in pieces of every size so that no record's reading
//! depends on where a chunk ends.

use super::*;

fn now() -> ::time::OffsetDateTime {
    ::time::macros::datetime!(2026-12-02 12:00 UTC)
}

/// The answer of `query` over `input`, fed `chunk` bytes at a time.
fn run_in(
    query: &str,
    kind: Input,
    output: Output,
    input: &str,
    chunk: usize,
) -> Result<String, Error> {
    let mut select = Select::new(query, kind, output, now())?;
    let mut out = Vec::new();
    for piece in input.as_bytes().chunks(chunk.max(1)) {
        select.feed(piece, &mut out)?;
        while select.pending() {
            select.drain(&mut out)?;
        }
        if select.done() {
            break;
        }
    }
    while !select.finish(&mut out)? {}
    assert_eq!(select.counts().returned, out.len() as u64);
    Ok(String::from_utf8(out).expect("UTF-8"))
}

/// The answer, checked to be the same whatever the chunk size.
fn run(query: &str, kind: Input, output: Output, input: &str) -> Result<String, Error> {
    let whole = run_in(query, kind.clone(), output.clone(), input, input.len());
    for chunk in [1, 2, 3, 7, 64] {
        assert_eq!(
            run_in(query, kind.clone(), output.clone(), input, chunk),
            whole,
            "{query} fed {chunk} bytes at a time"
        );
    }
    whole
}

fn csv(query: &str, input: &str) -> Result<String, Error> {
    csv_as(CsvInput::default(), query, input)
}

/// The CSV answer over CSV read as `options` say.
fn csv_as(options: CsvInput, query: &str, input: &str) -> Result<String, Error> {
    run(
        query,
        Input::Csv(options),
        Output::Csv(CsvOutput::default()),
        input,
    )
}

fn csv_with_header(query: &str, input: &str) -> Result<String, Error> {
    let header = CsvInput {
        header: Header::Use,
        ..CsvInput::default()
    };
    csv_as(header, query, input)
}

fn json(query: &str, input: &str) -> Result<String, Error> {
    run(
        query,
        Input::Json,
        Output::Json {
            record: "\n".into(),
        },
        input,
    )
}

const NUMBERS: &str = "1,2,3,\n4,5,6,\n7,8,9,\n10,11,,\n";

#[test]
fn projections_filters_and_limits_answer_record_by_record() {
    assert_eq!(
        csv("select _1, _3 from s3object;", NUMBERS).as_deref(),
        Ok("1,3\n4,6\n7,9\n10,\n")
    );
    assert_eq!(
        csv(
            "select _2 from s3object where int(_1) > 3 and _3 is not null",
            NUMBERS
        )
        .as_deref(),
        Ok("5\n8\n")
    );
    assert_eq!(
        csv("select * from s3object limit 1", NUMBERS).as_deref(),
        Ok("1,2,3,\n")
    );
    assert_eq!(
        csv(
            "select int(_1) * 2 + 1, _1 || '-' || _2 from s3object s where s._2 = '5'",
            NUMBERS
        )
        .as_deref(),
        Ok("9,4-5\n")
    );
    assert_eq!(
        csv(
            "select ((12.0+7.0)*3.0)/(5.0-2.0) from s3object limit 1",
            NUMBERS
        )
        .as_deref(),
        Ok("19\n")
    );
}

#[test]
fn aggregates_answer_one_record_and_skip_nulls() {
    assert_eq!(
        csv(
            "select count(*), sum(int(_1)), min(int(_3)), max(_2), avg(int(_1)) from s3object",
            NUMBERS
        )
        .as_deref(),
        Ok("4,22,3,11,5.5\n")
    );
    assert_eq!(
        csv("select count(_3) from s3object", NUMBERS).as_deref(),
        Ok("3\n")
    );
    assert_eq!(
        csv(
            "select count(0), sum(int(_1)) from s3object where _1 = 'none'",
            NUMBERS
        )
        .as_deref(),
        Ok("0,\n")
    );
    assert_eq!(
        csv("select sum(int(_1)) + 1 as s, s * 2 from s3object", NUMBERS).as_deref(),
        Ok("23,46\n")
    );
}

#[test]
fn quotes_escapes_and_delimiters_are_read_as_ceph_reads_them() {
    let line = r#",first,,third="c31,c32,c33",fifth=a\"b\" \, c,"x""y""#;
    let ceph = CsvInput {
        escape: Some(b'\\'),
        ..CsvInput::default()
    };
    let out = Output::Csv(CsvOutput::default());
    assert_eq!(
        run(
            "select _4, _5, _6, _1 is null from s3object",
            Input::Csv(ceph),
            out,
            line
        )
        .as_deref(),
        Ok("\"third=c31,c32,c33\",\"fifth=a\"\"b\"\" , c\",\"x\"\"y\",true\n")
    );
    let pipes = CsvInput {
        field: b'|',
        record: b"\t".to_vec(),
        ..CsvInput::default()
    };
    assert_eq!(
        csv_as(pipes, "select _2 from s3object", "a|b\tc|d\t").as_deref(),
        Ok("b\nd\n")
    );
    let crlf = CsvInput {
        record: b"\r\n".to_vec(),
        comment: Some(b'#'),
        ..CsvInput::default()
    };
    assert_eq!(
        csv_as(crlf, "select _1 from s3object", "#note\r\na\r\n\r\nb").as_deref(),
        Ok("a\nb\n")
    );
    assert!(matches!(
        csv("select _1 from s3object", "\"open"),
        Err(Error::Input(_))
    ));
    assert!(matches!(
        csv("select count(*), _1 from s3object", NUMBERS),
        Err(Error::Parse(_))
    ));
}

#[test]
fn header_names_columns_and_may_not_clash_with_an_alias_in_use() {
    let table = "c1,c2,c3\n1,2,3\n4,5,6\n";
    assert_eq!(
        csv_with_header("select c3, C1 from s3object", table).as_deref(),
        Ok("3,1\n6,4\n")
    );
    assert_eq!(
        csv_with_header(
            "select int(c1) + int(c2) as total from s3object where total > 5",
            table
        )
        .as_deref(),
        Ok("9\n")
    );
    let missing = csv_with_header("select c1, int(c11) from s3object", table);
    assert!(
        matches!(&missing, Err(Error::Schema(m)) if m.contains("alias {c11} or column not exist in schema"))
    );
    let clash = csv_with_header("select int(c1)+int(c2) as c3, c3 from s3object", table);
    assert!(
        matches!(&clash, Err(Error::Schema(m)) if m.contains("multiple definition of column {c3}"))
    );
    assert_eq!(
        csv_with_header("select c1 as c1 from s3object", table).as_deref(),
        Ok("1\n4\n")
    );
    assert_eq!(
        csv_with_header("select \"c2\", \"no such\" from s3object limit 1", table).as_deref(),
        Ok("2,no such\n")
    );
}

#[test]
fn aliases_written_out_stay_within_the_depth_bound() {
    // Each alias is 20 calls deep, which the parser takes; written out, g is 140 deep.
    let nest = |inner: &str| "lower(".repeat(20) + inner + &")".repeat(20);
    let mut columns = vec![format!("{} as a", nest("_1"))];
    for (name, inner) in ["b", "c", "d", "e", "f", "g"]
        .iter()
        .zip(["a", "b", "c", "d", "e", "f"])
    {
        columns.push(format!("{} as {name}", nest(inner)));
    }
    let query = format!("select {} from s3object", columns.join(", "));
    assert!(
        matches!(csv(&query, NUMBERS), Err(Error::Parse(m)) if m.contains("aliases are written out"))
    );
    let shallow = format!(
        "select {} as a, {} as b from s3object limit 1",
        nest("_1"),
        nest("a")
    );
    assert_eq!(csv(&shallow, NUMBERS).as_deref(), Ok("1,1\n"));
}

#[test]
fn circular_aliases_are_refused() {
    let cyclic = csv(
        "select int(_1) as a1, int(_2) as a2, a1+a4 as a3, a5+a1 as a4, int(_3)+a3 as a5 from s3object",
        NUMBERS,
    );
    assert!(matches!(&cyclic, Err(Error::Schema(m)) if m.contains("cyclic reference to alias")));
}

#[test]
fn functions_and_three_valued_logic() {
    let one = "AB12cd$$,   aeiou    ,19230512T051230Z,5\n";
    let q = |projection: &str| csv(&format!("select {projection} from stdin"), one);
    assert_eq!(q("lower(_1), upper('ab')").as_deref(), Ok("ab12cd$$,AB\n"));
    assert_eq!(
        q("trim(_2), trim(leading from _2), char_length(trim(trailing from _2))").as_deref(),
        Ok("aeiou,aeiou    ,8\n")
    );
    assert_eq!(
        q("substring(_1, 3, 2), substring(_1 from 5)").as_deref(),
        Ok("12,cd$$\n")
    );
    assert_eq!(
        q("extract(year from to_timestamp(_3)), date_diff(day, to_timestamp(_3), date_add(month, 1, to_timestamp(_3)))").as_deref(),
        Ok("1923,31\n")
    );
    assert_eq!(
        q("cast(to_string(to_timestamp(_3), 'x') as int)").as_deref(),
        Ok("0\n")
    );
    assert_eq!(
        q("nullif(_4, '5') is null, coalesce(null, _4), nullif(_4, 6)").as_deref(),
        Ok("true,5,5\n")
    );
    assert_eq!(
        q("case when int(_4) > 3 then 'big' else 'small' end, case int(_4) when 5 then 'five' end").as_deref(),
        Ok("big,five\n")
    );
    assert_eq!(
        q("(null and false), (null or true), (null and true) is null, int(_4) in (1, 5), _4 between 4 and 6").as_deref(),
        Ok("false,true,true,true,true\n")
    );
    assert_eq!(q("_1 like '%cd$$'").as_deref(), Ok("true\n"));
    assert_eq!(
        q("cast(int(_4) as bool) = true = true").as_deref(),
        Ok("true\n")
    );
    assert!(matches!(q("int(_1)"), Err(Error::Eval(_))));
    assert!(matches!(q("no_such(_1)"), Err(Error::Parse(_))));
}

#[test]
fn json_documents_are_records_and_from_paths_go_through_arrays() {
    let doc = "{\"root\" : [\n{\"c1\": 1,\"c2\": 2},\n{\"c1\": 3,\"c2\": 4},\n{\"c1\": 5,\"c2\": null}\n]}";
    assert_eq!(
        json("select count(*) from s3object[*]", doc).as_deref(),
        Ok("{\"_1\":1}\n")
    );
    assert_eq!(
        json(
            "select count(0), sum(_1.c1), max(_1.c2) from s3object[*].root",
            doc
        )
        .as_deref(),
        Ok("{\"_1\":3,\"_2\":9,\"_3\":4}\n")
    );
    assert_eq!(
        json(
            "select s.c1 as one, s.c2 from s3object[*].root[*] s where s.c2 is not null",
            doc
        )
        .as_deref(),
        Ok("{\"one\":1,\"c2\":2}\n{\"one\":3,\"c2\":4}\n")
    );
    let lines = "{\"a\": \"x}\\\"\"}\n{\"a\": [1, {\"b\": 2}]}\n7\n";
    assert_eq!(
        run(
            "select * from s3object",
            Input::Json,
            Output::Csv(CsvOutput::default()),
            lines
        )
        .as_deref(),
        Ok("\"x}\"\"\"\n\"[1,{\"\"b\"\":2}]\"\n7\n")
    );
    assert!(matches!(
        json("select * from s3object", "{\"a\": 1} }"),
        Err(Error::Input(_))
    ));
    assert!(matches!(
        json("select * from s3object", "{\"a\": "),
        Err(Error::Input(_))
    ));
}

#[test]
fn a_record_past_the_bound_is_refused_not_held() {
    let mut select = Select::new(
        "select count(*) from s3object",
        Input::Csv(CsvInput::default()),
        Output::Csv(CsvOutput::default()),
        now(),
    )
    .expect("a query");
    let chunk = vec![b'x'; 1024 * 1024];
    let mut out = Vec::new();
    let mut refused = None;
    for _ in 0..=RECORD_BYTES_MAX / chunk.len() {
        if let Err(e) = select.feed(&chunk, &mut out) {
            refused = Some(e);
            break;
        }
    }
    assert_eq!(refused, Some(Error::RecordTooLarge));
}

#[test]
fn output_quoting_follows_the_request() {
    let always = CsvOutput {
        always: true,
        field: ";".into(),
        ..CsvOutput::default()
    };
    assert_eq!(
        run(
            "select _1, _2 from s3object",
            Input::Csv(CsvInput::default()),
            Output::Csv(always),
            "a,\n"
        )
        .as_deref(),
        Ok("\"a\";\n")
    );
    let bad = CsvOutput {
        record: String::new(),
        ..CsvOutput::default()
    };
    assert!(Select::new(
        "select * from s3object",
        Input::Json,
        Output::Csv(bad),
        now()
    )
    .is_err());
}

#[test]
fn an_answer_far_larger_than_its_input_comes_in_bounded_pieces() {
    // Each one-byte record answers 200 KiB: a call gives about FLUSH_BYTES, never all.
    let wide = "x".repeat(200 * 1024);
    let query = format!("select '{wide}' from s3object");
    let mut select = Select::new(
        &query,
        Input::Csv(CsvInput::default()),
        Output::Csv(CsvOutput::default()),
        now(),
    )
    .expect("a query");
    let mut out = Vec::new();
    select.feed(&b"a\n".repeat(1000), &mut out).expect("fed");
    let (mut calls, mut total) = (1, 0);
    while select.pending() {
        assert!(
            out.len() < FLUSH_BYTES + wide.len() + 1,
            "a call stops once it has enough"
        );
        total += std::mem::take(&mut out).len();
        select.drain(&mut out).expect("drained");
        calls += 1;
    }
    assert!(select.finish(&mut out).expect("finished"));
    total += out.len();
    assert_eq!(total, 1000 * (wide.len() + 1));
    assert!(calls >= 500, "{calls} calls");
}

#[test]
fn values_and_records_past_the_bound_are_refused() {
    let doubled = "select _1 || _1 as a, a || a as b, b || b as c, c || c as d from s3object";
    let field = "y".repeat(300 * 1024);
    assert_eq!(csv(doubled, &field), Err(Error::RecordTooLarge));
    let columns = ["_1"; 8].join(", ");
    assert_eq!(
        csv(&format!("select {columns} from s3object"), &field),
        Err(Error::RecordTooLarge)
    );
    let commas = ",".repeat(RECORD_BYTES_MAX / FIELD_BYTES + 1);
    assert_eq!(
        csv("select count(*) from s3object", &commas),
        Err(Error::RecordTooLarge)
    );
}

#[test]
fn what_no_record_could_mend_is_refused_before_any_is_read() {
    let refused = |query: &str| {
        assert!(
            matches!(
                Select::new(
                    query,
                    Input::Csv(CsvInput::default()),
                    Output::Csv(CsvOutput::default()),
                    now()
                ),
                Err(Error::Parse(_))
            ),
            "{query}"
        )
    };
    refused("select no_such(_1) from s3object");
    refused("select lower(_1, _2) from s3object");
    refused("select extract(week from utcnow()) from s3object");
    refused("select date_add(timezone_hour, 1, utcnow()) from s3object");
    refused("select count(*) as c from s3object where c > 1");
    refused("select sum(int(_1)) + int(_2) from s3object");
    assert_eq!(
        csv("select count(*), 1 from s3object", NUMBERS).as_deref(),
        Ok("4,1\n")
    );
}

#[test]
fn arithmetic_and_dates_past_their_range_are_errors_not_panics() {
    let min = "-9223372036854775808\n";
    let divided = csv("select int(_1) / -1 from s3object", min).expect("divides");
    assert!(divided.starts_with("92233720368547"), "{divided}");
    assert!(csv("select int(_1) % -1 from s3object", min).is_ok());
    for query in [
        "select date_add(day, 200000000000000, utcnow()) from s3object",
        "select date_add(month, 9223372036854775807, utcnow()) from s3object",
        "select date_add(year, -3000, utcnow()) from s3object",
    ] {
        assert!(matches!(csv(query, "a\n"), Err(Error::Eval(_))), "{query}");
    }
}

#[test]
fn json_records_keep_the_projections_order_and_names() {
    let out = json(
        "select s.b, s.a, s.a from s3object s",
        "{\"a\": 1, \"b\": 2}",
    );
    assert_eq!(out.as_deref(), Ok("{\"b\":2,\"a\":1,\"a\":1}\n"));
}

#[test]
fn a_query_is_weighed_by_the_names_it_copies_and_bounded_in_work() {
    // A long name copied by every use of its alias would grow without bound.
    let name = "n".repeat(128 * 1024);
    let copies = vec!["a"; 2000].join(", ");
    let copied = Select::new(
        &format!("select \"{name}\" as a, {copies} from s3object"),
        Input::Csv(CsvInput::default()),
        Output::Csv(CsvOutput::default()),
        now(),
    );
    assert!(matches!(copied, Err(Error::Parse(m)) if m.contains("written out")));
    // Every LIKE is bounded; many of them over one record are bounded together.
    // Each of these takes about 6 * 10^7 steps, under a LIKE's own bound.
    let likes = vec![format!("_1 like '%{}b'", "a".repeat(400)); 40].join(" or ");
    let long = "a".repeat(150_000);
    let costly = run_in(
        &format!("select count(*) from s3object where {likes}"),
        Input::Csv(CsvInput::default()),
        Output::Csv(CsvOutput::default()),
        &long,
        long.len(),
    );
    assert!(matches!(costly, Err(Error::Eval(m)) if m.contains("steps over one record")));
}

#[test]
fn a_call_returns_after_bounded_work_with_the_rest_pending() {
    let mut select = Select::new(
        &format!(
            "select _1 from s3object where _1 like '%{}b'",
            "a".repeat(200)
        ),
        Input::Csv(CsvInput::default()),
        Output::Csv(CsvOutput::default()),
        now(),
    )
    .expect("a query");
    let record = "a".repeat(2000) + "\n";
    let mut out = Vec::new();
    select
        .feed(record.repeat(400).as_bytes(), &mut out)
        .expect("fed");
    assert!(
        select.pending(),
        "400 costly records are not all answered in one call"
    );
    let mut calls = 1;
    while select.pending() {
        select.drain(&mut out).expect("drained");
        calls += 1;
    }
    assert!(select.finish(&mut out).expect("finished"));
    assert!(calls > 2, "{calls}");
    assert!(out.is_empty());
}

#[test]
fn coalesce_stops_at_its_first_value_and_patterns_are_bounded() {
    assert_eq!(
        csv("select coalesce(_1, int(_2)) from s3object", "x,y\n").as_deref(),
        Ok("x\n")
    );
    assert!(matches!(
        csv("select coalesce(_3, int(_2)) from s3object", "x,y\n"),
        Err(Error::Eval(_))
    ));
    let pattern = format!(
        "select to_string(utcnow(), '{}') from s3object",
        "y".repeat(70_000)
    );
    assert!(matches!(csv(&pattern, "x\n"), Err(Error::Eval(m)) if m.contains("at most 9")));
    assert_eq!(
        csv(
            "select to_string(utcnow(), 'yyyyMMdd') from s3object",
            "x\n"
        )
        .as_deref(),
        Ok("20261202\n")
    );
}

#[test]
fn json_members_may_not_clash_with_an_alias_in_use_and_records_join_by_their_delimiter() {
    let clash = json(
        "select s.price * 2 as price from s3object s where price > 1",
        "{\"price\": 3}",
    );
    assert!(
        matches!(&clash, Err(Error::Schema(m)) if m.contains("{price}")),
        "{clash:?}"
    );
    assert_eq!(
        json(
            "select s.price * 2 as double from s3object s where double > 1",
            "{\"price\": 3}"
        )
        .as_deref(),
        Ok("{\"double\":6}\n")
    );
    let semicolons = CsvInput {
        field: b';',
        ..CsvInput::default()
    };
    assert_eq!(
        csv_as(semicolons, "select s, _2 from s3object s", "a;b\n").as_deref(),
        Ok("a;b,b\n")
    );
}

#[test]
fn a_limit_met_leaves_the_rest_of_the_input_unread() {
    let lines = "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n";
    assert_eq!(
        json("select s.a from s3object s limit 1", lines).as_deref(),
        Ok("{\"a\":1}\n")
    );
    assert_eq!(
        csv("select _1 from s3object limit 1", "1\n\"2\n3\n").as_deref(),
        Ok("1\n")
    );
}

#[test]
fn paths_names_and_trims_cost_what_they_hold() {
    let deep = format!("select s{} from s3object s", ".a".repeat(200));
    assert!(matches!(json(&deep, "{}"), Err(Error::Parse(m)) if m.contains("128 steps")));
    let path = format!("_1{}", "[0]".repeat(100));
    let copied = Select::new(
        &format!(
            "select {path} as a, {} from s3object",
            vec!["a"; 3000].join(", ")
        ),
        Input::Json,
        Output::Csv(CsvOutput::default()),
        now(),
    );
    assert!(matches!(copied, Err(Error::Parse(m)) if m.contains("written out")));
    // Many header names, found at once whatever their case.
    let header: Vec<String> = (0..5000).map(|i| format!("c{i}")).collect();
    let table = format!(
        "{}\n{}\n",
        header.join(","),
        (0..5000)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    assert_eq!(
        csv_with_header("select C4999, c0, \"c17\" from s3object", &table).as_deref(),
        Ok("4999,0,17\n")
    );
    let long = "a".repeat(100_000) + "b";
    let trimmed = run_in(
        &format!(
            "select char_length(trim(both '{}a' from _1)) from s3object",
            "c".repeat(100_000)
        ),
        Input::Csv(CsvInput::default()),
        Output::Csv(CsvOutput::default()),
        &long,
        long.len(),
    );
    assert_eq!(trimmed.as_deref(), Ok("1\n"));
}
