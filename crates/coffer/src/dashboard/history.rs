//! What the dashboard learns from the daemons' metrics: the OSDs' figures as last scraped,
//! and the cluster's throughput, operations and latency over the last hour, one point per
//! scrape, drawn as SVG charts. Parsing and drawing are pure; the dashboard's shell scrapes.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;

/// How often the dashboard scrapes the OSDs.
pub const SCRAPE_EVERY: std::time::Duration = std::time::Duration::from_secs(10);
/// Points kept: an hour of scrapes.
pub const POINTS_MAX: usize = 360;

/// One sample of a metrics text: its name, labels and value.
#[derive(Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The samples of a Prometheus text (comments and lines it cannot read are left out).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (head, value) = line.rsplit_once(' ')?;
    let value = value.parse::<f64>().ok()?;
    let (name, labels) = match head.split_once('{') {
        None => (head, Vec::new()),
        Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}')?)?),
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// `a="x",b="y"`: values are quoted, with `\"`, `\\` and `\n` escaped.
fn parse_labels(mut text: &str) -> Option<Vec<(String, String)>> {
    let mut labels = Vec::new();
    while !text.is_empty() {
        let (name, rest) = text.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (at, '"') => break at,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((name.trim_start_matches(',').to_string(), value));
        text = rest[end + 1..].trim_start_matches(',');
    }
    Some(labels)
}

/// One OSD's figures from its last scrape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OsdFigures {
    pub read_bytes: f64,
    pub write_bytes: f64,
    pub read_ops: f64,
    pub write_ops: f64,
    pub read_seconds: f64,
    pub write_seconds: f64,
    pub recovery_pending: f64,
    pub recovered_objects: f64,
}

impl OsdFigures {
    /// An OSD's figures from its metrics text.
    pub fn from_samples(samples: &[Sample]) -> OsdFigures {
        let mut figures = OsdFigures::default();
        for sample in samples {
            let read = sample.label("kind") == Some("read");
            let slot = match sample.name.as_str() {
                "coffer_osd_op_bytes_total" if read => &mut figures.read_bytes,
                "coffer_osd_op_bytes_total" => &mut figures.write_bytes,
                "coffer_osd_ops_total" if read => &mut figures.read_ops,
                "coffer_osd_ops_total" => &mut figures.write_ops,
                "coffer_osd_op_duration_seconds_sum" if read => &mut figures.read_seconds,
                "coffer_osd_op_duration_seconds_sum" => &mut figures.write_seconds,
                "coffer_osd_recovery_pending_objects" => &mut figures.recovery_pending,
                "coffer_osd_recovered_objects_total" => &mut figures.recovered_objects,
                _ => continue,
            };
            *slot += sample.value;
        }
        figures
    }
}

/// What one OSD did between two scrapes: counters that went back (a restarted OSD) count
/// from zero.
fn grew(now: f64, before: f64) -> f64 {
    if now >= before {
        now - before
    } else {
        now
    }
}

/// The cluster between two scrapes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Point {
    /// Seconds since the Unix epoch, at the later scrape.
    pub at: f64,
    pub read_bytes_per_s: f64,
    pub write_bytes_per_s: f64,
    pub read_ops_per_s: f64,
    pub write_ops_per_s: f64,
    /// Mean latency of the operations in the interval (0 without any).
    pub read_latency_s: f64,
    pub write_latency_s: f64,
}

/// The OSDs' last figures and the cluster's last hour.
#[derive(Default)]
pub struct History {
    pub osds: BTreeMap<String, OsdFigures>,
    /// Each OSD's mean latency over the last interval, reads then writes.
    pub osd_latency: BTreeMap<String, (f64, f64)>,
    pub points: VecDeque<Point>,
    last_at: Option<f64>,
}

impl History {
    /// Takes a scrape of every OSD at `at` (seconds since the epoch).
    pub fn record(&mut self, at: f64, scraped: BTreeMap<String, OsdFigures>) {
        let mut sum = [0.0f64; 6];
        let mut latency = BTreeMap::new();
        for (osd, now) in &scraped {
            let before = self.osds.get(osd).cloned().unwrap_or_default();
            let deltas = [
                grew(now.read_bytes, before.read_bytes),
                grew(now.write_bytes, before.write_bytes),
                grew(now.read_ops, before.read_ops),
                grew(now.write_ops, before.write_ops),
                grew(now.read_seconds, before.read_seconds),
                grew(now.write_seconds, before.write_seconds),
            ];
            for (total, delta) in sum.iter_mut().zip(deltas) {
                *total += delta;
            }
            let mean = |seconds: f64, ops: f64| if ops > 0.0 { seconds / ops } else { 0.0 };
            latency.insert(
                osd.clone(),
                (mean(deltas[4], deltas[2]), mean(deltas[5], deltas[3])),
            );
        }
        if let Some(last) = self.last_at.filter(|last| at > *last) {
            let span = at - last;
            let mean = |seconds: f64, ops: f64| if ops > 0.0 { seconds / ops } else { 0.0 };
            self.points.push_back(Point {
                at,
                read_bytes_per_s: sum[0] / span,
                write_bytes_per_s: sum[1] / span,
                read_ops_per_s: sum[2] / span,
                write_ops_per_s: sum[3] / span,
                read_latency_s: mean(sum[4], sum[2]),
                write_latency_s: mean(sum[5], sum[3]),
            });
            while self.points.len() > POINTS_MAX {
                self.points.pop_front();
            }
            self.osd_latency = latency;
        }
        self.last_at = Some(at);
        self.osds = scraped;
    }
}

const CHART_WIDTH: f64 = 560.0;
const CHART_HEIGHT: f64 = 140.0;
/// The span a chart shows, in seconds.
const CHART_SPAN: f64 = 3600.0;
/// Points drawn as dots as well as a line, up to this many.
const DOTS_MAX: usize = 60;

/// One line of a chart.
pub struct Line {
    pub name: &'static str,
    pub colour: &'static str,
    pub value: fn(&Point) -> f64,
}

/// The two lines of a chart of reads and writes.
pub fn read_write(read: fn(&Point) -> f64, write: fn(&Point) -> f64) -> [Line; 2] {
    [
        Line {
            name: "read",
            colour: "#2464b4",
            value: read,
        },
        Line {
            name: "write",
            colour: "#c0262d",
            value: write,
        },
    ]
}

/// A line chart of `lines` over the last hour to `now`, its axis labelled by `unit`.
pub fn chart(
    title: &str,
    points: &VecDeque<Point>,
    now: f64,
    lines: &[Line],
    unit: fn(f64) -> String,
) -> String {
    let top = points
        .iter()
        .flat_map(|p| lines.iter().map(move |line| (line.value)(p)))
        .fold(0.0f64, f64::max);
    let scale = if top > 0.0 { top } else { 1.0 };
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<figure class=\"chart\"><figcaption>{}</figcaption><svg viewBox=\"0 0 {w} {h}\" \
         width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"{}\">\
         <rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" class=\"plot\"/>",
        super::pages::escape(title),
        super::pages::escape(title),
        w = CHART_WIDTH,
        h = CHART_HEIGHT + 20.0,
    );
    for Line { colour, value, .. } in lines {
        let at: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| now - p.at <= CHART_SPAN)
            .map(|p| {
                let x = CHART_WIDTH * (1.0 - (now - p.at) / CHART_SPAN);
                (x, CHART_HEIGHT * (1.0 - value(p) / scale))
            })
            .collect();
        let line: Vec<String> = at.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
            line.join(" ")
        );
        // A line needs two points: while there are few, each is also a dot.
        if at.len() <= DOTS_MAX {
            for (x, y) in &at {
                let _ = write!(
                    svg,
                    "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\" fill=\"{colour}\"/>"
                );
            }
        }
    }
    let _ = write!(
        svg,
        "<text x=\"4\" y=\"14\">{}</text><text x=\"4\" y=\"{b}\">1 h ago</text>\
         <text x=\"{r}\" y=\"{b}\" text-anchor=\"end\">now</text></svg><p class=\"legend\">",
        super::pages::escape(&unit(top)),
        b = CHART_HEIGHT + 16.0,
        r = CHART_WIDTH - 4.0,
    );
    for Line {
        name,
        colour,
        value,
    } in lines
    {
        let last = points.back().map_or(0.0, value);
        let _ = write!(
            svg,
            "<span style=\"color:{colour}\">&#9632;</span> {} {} ",
            super::pages::escape(name),
            super::pages::escape(&unit(last))
        );
    }
    svg.push_str("</p></figure>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP coffer_osd_ops Client operations\n\
        # TYPE coffer_osd_ops_total counter\n\
        coffer_osd_ops_total{pool=\"1\",kind=\"write\"} 10\n\
        coffer_osd_ops_total{pool=\"2\",kind=\"write\"} 5\n\
        coffer_osd_ops_total{pool=\"1\",kind=\"read\"} 4\n\
        coffer_osd_op_bytes_total{pool=\"1\",kind=\"write\"} 40960\n\
        coffer_osd_op_duration_seconds_sum{kind=\"write\"} 0.3\n\
        coffer_osd_store_used_bytes 1048576\n\
        odd{name=\"a \\\"quoted\\\" b\"} 1.5\n\
        not a sample\n";

    #[test]
    fn samples_are_read_with_their_labels() {
        let samples = parse(TEXT);
        assert_eq!(samples.len(), 7);
        assert_eq!(samples[0].label("kind"), Some("write"));
        assert_eq!(samples[6].label("name"), Some("a \"quoted\" b"));
        let figures = OsdFigures::from_samples(&samples);
        assert_eq!(figures.write_ops, 15.0);
        assert_eq!(figures.read_ops, 4.0);
        assert_eq!(figures.write_bytes, 40960.0);
    }

    #[test]
    fn points_are_rates_between_scrapes_and_a_restart_counts_from_zero() {
        let mut history = History::default();
        let figures = |ops: f64, seconds: f64| OsdFigures {
            write_ops: ops,
            write_bytes: ops * 4096.0,
            write_seconds: seconds,
            ..OsdFigures::default()
        };
        history.record(
            100.0,
            BTreeMap::from([("osd.0".into(), figures(100.0, 1.0))]),
        );
        assert!(history.points.is_empty(), "one scrape makes no rate");
        history.record(
            110.0,
            BTreeMap::from([("osd.0".into(), figures(300.0, 2.0))]),
        );
        let point = history.points[0];
        assert_eq!(point.write_ops_per_s, 20.0);
        assert_eq!(point.write_bytes_per_s, 20.0 * 4096.0);
        assert_eq!(point.write_latency_s, 1.0 / 200.0);
        history.record(
            120.0,
            BTreeMap::from([("osd.0".into(), figures(50.0, 0.5))]),
        );
        assert_eq!(history.points[1].write_ops_per_s, 5.0);
        let svg = chart(
            "writes",
            &history.points,
            120.0,
            &[Line {
                name: "write",
                colour: "#c00",
                value: |p| p.write_ops_per_s,
            }],
            |v| format!("{v:.0}/s"),
        );
        assert!(svg.contains("<polyline") && svg.contains("20/s"), "{svg}");
    }
}
