//! The matrix as grouped bars: one group per (client shape, IO size, op), one bar per
//! configuration, its height the percent of the baseline, with the 95 % goal drawn across
//! and the spread over repetitions as error bars. Drawn as SVG; a `.png` path gets the same
//! drawing rendered by resvg.

use std::fmt::Write;
use std::path::Path;

use super::Cell;
use crate::bench::report::size_label;

const BAR_WIDTH: f64 = 14.0;
const GROUP_GAP: f64 = 14.0;
const LEFT: f64 = 60.0;
const TOP: f64 = 70.0;
const PLOT_HEIGHT: f64 = 300.0;
const BOTTOM: f64 = 60.0;
const GOAL_PCT: f64 = 95.0;
/// Room for a group's two-line label ("many 4M", "write") and for the title.
const GROUP_WIDTH_MIN: f64 = 64.0;
const WIDTH_MIN: f64 = 600.0;
/// Bar colours, one per configuration after the baseline (cycled past the last).
const COLOURS: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f",
];

enum Format {
    Svg,
    Png,
}

fn format_of(path: &Path) -> Result<Format, String> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        _ => Err(format!(
            "--plot {}: the file name must end in .svg or .png",
            path.display()
        )),
    }
}

/// Refuses a plot path the bench could not write, before any cluster is started.
pub fn check_path(path: &Path) -> Result<(), String> {
    format_of(path).map(drop)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The groups in measured order: (shape, IO size, op).
fn groups(cells: &[Cell]) -> Vec<(&'static str, u64, &'static str)> {
    let mut groups = Vec::new();
    for c in cells {
        let group = (c.shape, c.io_size, c.op);
        if !groups.contains(&group) {
            groups.push(group);
        }
    }
    groups
}

pub fn svg(cells: &[Cell], configs: &[&str]) -> String {
    let baseline = configs.first().copied().unwrap_or_default();
    let bars: Vec<&str> = configs.iter().skip(1).copied().collect();
    let groups = groups(cells);
    let group_width = (bars.len().max(1) as f64 * BAR_WIDTH + GROUP_GAP).max(GROUP_WIDTH_MIN);
    let width = (LEFT + groups.len() as f64 * group_width + 20.0).max(WIDTH_MIN);
    let height = TOP + PLOT_HEIGHT + BOTTOM;
    let top_pct = cells
        .iter()
        .map(|c| c.pct_of_baseline + c.pct_of_baseline_stddev)
        .fold(120.0, f64::max);
    let y_max = (top_pct / 20.0).ceil() * 20.0;
    let y = |pct: f64| TOP + PLOT_HEIGHT * (1.0 - pct.clamp(0.0, y_max) / y_max);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="DejaVu Sans, sans-serif" font-size="11">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="20" font-size="14">coffer bench matrix: percent of {} in the same run</text>"#,
        escape(baseline)
    );
    for (i, config) in bars.iter().enumerate() {
        let x = LEFT + i as f64 * 130.0;
        let _ = writeln!(
            out,
            r#"<rect x="{x}" y="32" width="12" height="12" fill="{}"/><text x="{}" y="42">{}</text>"#,
            COLOURS[i % COLOURS.len()],
            x + 16.0,
            escape(config)
        );
    }
    let mut pct = 0.0;
    while pct <= y_max {
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{pct:.0} %</text>"##,
            width - 20.0,
            LEFT - 6.0,
            y(pct) + 4.0,
            y = y(pct)
        );
        pct += 20.0;
    }
    for (i, (shape, io_size, op)) in groups.iter().enumerate() {
        let bars_width = bars.len() as f64 * BAR_WIDTH;
        let x0 = LEFT + i as f64 * group_width + (group_width - bars_width) / 2.0;
        for (b, config) in bars.iter().enumerate() {
            let Some(cell) = cells.iter().find(|c| {
                c.config == *config && (c.shape, c.io_size, c.op) == (*shape, *io_size, *op)
            }) else {
                continue;
            };
            let x = x0 + b as f64 * BAR_WIDTH;
            let top = y(cell.pct_of_baseline);
            let _ = writeln!(
                out,
                r#"<rect x="{x:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{} {shape} {} {op}: {:.1} %</title></rect>"#,
                BAR_WIDTH - 2.0,
                TOP + PLOT_HEIGHT - top,
                COLOURS[b % COLOURS.len()],
                escape(config),
                size_label(*io_size),
                cell.pct_of_baseline
            );
            if cell.pct_of_baseline_stddev > 0.0 {
                let mid = x + (BAR_WIDTH - 2.0) / 2.0;
                let _ = writeln!(
                    out,
                    r#"<line x1="{mid:.1}" x2="{mid:.1}" y1="{:.1}" y2="{:.1}" stroke="black"/>"#,
                    y(cell.pct_of_baseline + cell.pct_of_baseline_stddev),
                    y(cell.pct_of_baseline - cell.pct_of_baseline_stddev)
                );
            }
        }
        let centre = x0 + bars_width / 2.0;
        let _ = writeln!(
            out,
            r#"<text x="{centre:.1}" y="{:.1}" text-anchor="middle">{shape} {}</text><text x="{centre:.1}" y="{:.1}" text-anchor="middle">{op}</text>"#,
            TOP + PLOT_HEIGHT + 16.0,
            size_label(*io_size),
            TOP + PLOT_HEIGHT + 30.0
        );
    }
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" x2="{:.1}" y1="{y100:.1}" y2="{y100:.1}" stroke="#333"/><line x1="{LEFT}" x2="{:.1}" y1="{y95:.1}" y2="{y95:.1}" stroke="#c00" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" fill="#c00" text-anchor="end">goal {GOAL_PCT:.0} %</text>"##,
        width - 20.0,
        width - 20.0,
        width - 22.0,
        y(GOAL_PCT) + 13.0,
        y100 = y(100.0),
        y95 = y(GOAL_PCT),
    );
    out.push_str("</svg>\n");
    out
}

pub fn write(path: &Path, cells: &[Cell], configs: &[&str]) -> Result<(), String> {
    let drawing = svg(cells, configs);
    let failed = |e: &dyn std::fmt::Display| format!("writing {}: {e}", path.display());
    match format_of(path)? {
        Format::Svg => std::fs::write(path, drawing).map_err(|e| failed(&e)),
        Format::Png => {
            use resvg::{tiny_skia, usvg};
            let mut options = usvg::Options::default();
            options.fontdb_mut().load_system_fonts();
            let tree = usvg::Tree::from_str(&drawing, &options).map_err(|e| failed(&e))?;
            let size = tree.size().to_int_size();
            // Twice the drawing's size, so text stays sharp.
            let mut pixmap = tiny_skia::Pixmap::new(size.width() * 2, size.height() * 2)
                .ok_or_else(|| failed(&"the plot has no area"))?;
            resvg::render(
                &tree,
                tiny_skia::Transform::from_scale(2.0, 2.0),
                &mut pixmap.as_mut(),
            );
            pixmap.save_png(path).map_err(|e| failed(&e))
        }
    }
}
