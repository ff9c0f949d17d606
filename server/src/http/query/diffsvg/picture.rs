//! Draws a diff flame graph as a static SVG: frames sized by the compare side,
//! coloured by how much **their own total's** share of the profile changed (red grew,
//! blue shrank), so a parent whose callees grew is red too — inferno's differential
//! mode colours only the frame where a stack ends. A legend gives the colour scale
//! and both ranges; every frame's tooltip has both sides in human units.

use std::fmt::Write;

use profiledb_storage::query::flamegraph::FlameGraphDiff;

use crate::time::{human_value, rfc3339};

const WIDTH: f64 = 1200.0;
const ROW: f64 = 17.0;
const TOP: f64 = 84.0;
const MIN_WIDTH_PX: f64 = 0.3;

/// What the picture says about itself.
pub struct Labels<'a> {
    pub title: &'a str,
    pub unit: &'a str,
    pub base: (i64, i64),
    pub compare: (i64, i64),
}

struct Frame {
    depth: usize,
    x: f64,
    width: f64,
    name: usize,
    base: i64,
    compare: i64,
    /// Change of the frame's share of its side's total, in percentage points.
    change_pp: f64,
}

/// The frames of `d` laid out on the compare side (ticks → pixels).
fn frames(d: &FlameGraphDiff) -> Vec<Frame> {
    let (lt, rt) = (d.left_ticks.max(1) as f64, d.right_ticks.max(1) as f64);
    let scale = WIDTH / rt;
    let mut out = Vec::new();
    for (depth, level) in d.levels.iter().enumerate() {
        let mut end = 0i64;
        for node in level.chunks_exact(7) {
            let x = end + node[3];
            end = x + node[4];
            let (base, compare) = (node[1], node[4]);
            let width = compare as f64 * scale;
            if width < MIN_WIDTH_PX {
                continue;
            }
            out.push(Frame {
                depth,
                x: x as f64 * scale,
                width,
                name: usize::try_from(node[6]).unwrap_or(0),
                base,
                compare,
                change_pp: (compare as f64 / rt - base as f64 / lt) * 100.0,
            });
        }
    }
    out
}

/// Red for growth, blue for shrinkage, white for none, saturating at `scale_pp`.
fn colour(change_pp: f64, scale_pp: f64) -> String {
    let t = (change_pp / scale_pp).clamp(-1.0, 1.0);
    let fade = (255.0 * (1.0 - t.abs())).round() as u8;
    if t >= 0.0 {
        format!("rgb(255,{fade},{fade})")
    } else {
        format!("rgb({fade},{fade},255)")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The SVG document.
pub fn draw(d: &FlameGraphDiff, l: &Labels<'_>) -> String {
    let frames = frames(d);
    let depth = frames.iter().map(|f| f.depth).max().unwrap_or(0) + 1;
    // The colour scale: the largest change, at least 1 pp so noise stays pale.
    let scale_pp = frames.iter().map(|f| f.change_pp.abs()).fold(1.0, f64::max);
    let height = TOP + depth as f64 * ROW + 24.0;
    let mut s = String::with_capacity(256 * frames.len() + 4096);
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         font-family=\"Verdana, sans-serif\" font-size=\"12\">\
         <rect width=\"100%\" height=\"100%\" fill=\"#fafafa\"/>\
         <text x=\"600\" y=\"20\" text-anchor=\"middle\" font-size=\"16\">{}</text>",
        esc(l.title)
    );
    let side = |name: &str, (a, b): (i64, i64), ticks: i64, y: i32| {
        format!(
            "<text x=\"10\" y=\"{y}\">{name}: {} .. {} — total {}</text>",
            rfc3339(a),
            rfc3339(b),
            human_value(ticks as f64, l.unit)
        )
    };
    s.push_str(&side("base", l.base, d.left_ticks, 42));
    s.push_str(&side("compare", l.compare, d.right_ticks, 60));
    // Legend: a gradient from shrank to grew.
    let _ = write!(
        s,
        "<defs><linearGradient id=\"scale\"><stop offset=\"0\" stop-color=\"{}\"/>\
         <stop offset=\"0.5\" stop-color=\"#ffffff\"/><stop offset=\"1\" stop-color=\"{}\"/>\
         </linearGradient></defs>\
         <rect x=\"860\" y=\"32\" width=\"200\" height=\"12\" fill=\"url(#scale)\" stroke=\"#999\"/>\
         <text x=\"855\" y=\"43\" text-anchor=\"end\">share −{scale_pp:.1} pp</text>\
         <text x=\"1065\" y=\"43\">+{scale_pp:.1} pp</text>\
         <text x=\"960\" y=\"60\" text-anchor=\"middle\" font-size=\"11\">width: compare side; colour: change of the frame's total share</text>",
        colour(-scale_pp, scale_pp),
        colour(scale_pp, scale_pp)
    );
    if frames.is_empty() {
        let _ = write!(
            s,
            "<text x=\"600\" y=\"{}\" text-anchor=\"middle\">no samples in the compare range</text>",
            TOP + 14.0
        );
    }
    for f in &frames {
        let name = d.names.get(f.name).map_or("?", String::as_str);
        let y = TOP + f.depth as f64 * ROW;
        let _ = write!(
            s,
            "<g><title>{} — base {} ({:.2}%), compare {} ({:.2}%), {:+.2} pp</title>\
             <rect x=\"{:.2}\" y=\"{y}\" width=\"{:.2}\" height=\"{}\" fill=\"{}\" stroke=\"#c8c8c8\" stroke-width=\"0.5\"/>",
            esc(name),
            human_value(f.base as f64, l.unit),
            100.0 * f.base as f64 / d.left_ticks.max(1) as f64,
            human_value(f.compare as f64, l.unit),
            100.0 * f.compare as f64 / d.right_ticks.max(1) as f64,
            f.change_pp,
            f.x,
            f.width,
            ROW - 1.0,
            colour(f.change_pp, scale_pp)
        );
        // A label only where it fits (about 7 px a character).
        let chars = ((f.width - 6.0) / 7.0).floor();
        if chars >= 3.0 {
            let mut label: String = name.chars().take(chars as usize).collect();
            if label.chars().count() < name.chars().count() {
                label.pop();
                label.push('…');
            }
            let _ = write!(
                s,
                "<text x=\"{:.2}\" y=\"{}\">{}</text>",
                f.x + 3.0,
                y + ROW - 5.0,
                esc(&label)
            );
        }
        s.push_str("</g>");
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Base: main 100 = a 50 + b 50. Compare: main 100 = a 80 + b 20. `main`'s share
    /// is unchanged (white), `a` grew 30 pp (red), `b` shrank 30 pp (blue).
    fn diff() -> FlameGraphDiff {
        FlameGraphDiff {
            names: vec!["total".into(), "main".into(), "a".into(), "b".into()],
            levels: vec![
                vec![0, 100, 0, 0, 100, 0, 0],
                vec![0, 100, 0, 0, 100, 0, 1],
                vec![0, 50, 50, 0, 80, 80, 2, 0, 50, 50, 0, 20, 20, 3],
            ],
            total: 200,
            max_self: 80,
            left_ticks: 100,
            right_ticks: 100,
        }
    }

    #[test]
    fn frames_are_sized_by_compare_and_coloured_by_total_share_change() {
        let f = frames(&diff());
        assert_eq!(f.len(), 4);
        let a = f.iter().find(|f| f.name == 2).unwrap();
        let b = f.iter().find(|f| f.name == 3).unwrap();
        assert!((a.change_pp - 30.0).abs() < 1e-9);
        assert!((b.change_pp + 30.0).abs() < 1e-9);
        assert!((a.width - 960.0).abs() < 1e-9);
        assert!((b.x - 960.0).abs() < 1e-9 && (b.width - 240.0).abs() < 1e-9);
        assert_eq!(colour(30.0, 30.0), "rgb(255,0,0)");
        assert_eq!(colour(-30.0, 30.0), "rgb(0,0,255)");
        assert_eq!(colour(0.0, 30.0), "rgb(255,255,255)");
    }

    #[test]
    fn parent_of_grown_callees_is_red() {
        // Base: main 50 + idle 50; compare: main 80 (all in a) + idle 20.
        let d = FlameGraphDiff {
            names: vec!["total".into(), "idle".into(), "main".into(), "a".into()],
            levels: vec![
                vec![0, 100, 0, 0, 100, 0, 0],
                vec![0, 50, 50, 0, 20, 20, 1, 0, 50, 0, 0, 80, 0, 2],
                vec![50, 50, 50, 20, 80, 80, 3],
            ],
            total: 200,
            max_self: 80,
            left_ticks: 100,
            right_ticks: 100,
        };
        let f = frames(&d);
        let main = f.iter().find(|f| f.name == 2).unwrap();
        assert!((main.change_pp - 30.0).abs() < 1e-9, "{}", main.change_pp);
        let svg = draw(
            &d,
            &Labels {
                title: "t <1>",
                unit: "nanoseconds",
                base: (0, 60_000),
                compare: (60_000, 120_000),
            },
        );
        assert!(svg.contains("base: 1970-01-01T00:00:00.000Z .. 1970-01-01T00:01:00.000Z"));
        assert!(svg.contains("share −30.0 pp") && svg.contains("+30.0 pp"));
        assert!(svg.contains("t &lt;1&gt;"));
        assert!(svg.contains(
            "<title>main — base 50 ns (50.00%), compare 80 ns (80.00%), +30.00 pp</title>"
        ));
    }
}
