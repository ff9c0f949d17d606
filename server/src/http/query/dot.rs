//! A merged profile as a Graphviz DOT call graph, pprof's `-dot` view: one node per
//! function with its flat (self) and cumulative value, one edge per caller → callee
//! with the value flowing through it. Grafana's Profiles Drilldown asks for it
//! (`/pyroscope/render?format=dot`) to describe a profile in text.
//!
//! Recursion is counted once: a function's cumulative value, and an edge's weight,
//! take a stack's value only at the outermost occurrence on that stack, so no figure
//! exceeds the total. Only the `max_nodes` functions with the largest cumulative
//! values are drawn (edges between them), as pprof's node limit does.

use std::collections::HashMap;
use std::fmt::Write;

use profiledb_storage::CallTree;

/// Functions drawn when the caller gives no limit (Pyroscope's default for DOT).
pub const DEFAULT_DOT_NODES: usize = 100;

#[derive(Default, Clone, Copy)]
struct FnStats {
    flat: i64,
    cum: i64,
}

/// The call graph: stats per function name and value per (caller, callee).
struct Graph<'a> {
    fns: HashMap<&'a str, FnStats>,
    edges: HashMap<(&'a str, &'a str), i64>,
}

/// Flat and cumulative value per function name, and value per (caller, callee).
fn graph(tree: &CallTree) -> Graph<'_> {
    let nodes = tree.nodes();
    let mut children: Vec<Vec<u32>> = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate().skip(1) {
        if let Some(c) = children.get_mut(n.parent as usize) {
            c.push(i as u32);
        }
    }
    let mut fns: HashMap<&str, FnStats> = HashMap::new();
    let mut edges: HashMap<(&str, &str), i64> = HashMap::new();
    // Depth-first with counts of the names and edges on the current path, so a
    // recursive frame adds its value only where it first appears.
    let mut on_path: HashMap<&str, u32> = HashMap::new();
    let mut edges_on_path: HashMap<(&str, &str), u32> = HashMap::new();
    // (node, entering?) — the root (0) is `total`, not a function.
    let mut stack: Vec<(u32, bool)> = children[0].iter().rev().map(|&c| (c, true)).collect();
    while let Some((i, entering)) = stack.pop() {
        let n = &nodes[i as usize];
        let name = tree.name(n.name);
        let caller = (n.parent != 0).then(|| tree.node_name(n.parent));
        if entering {
            let f = fns.entry(name).or_default();
            f.flat += n.self_value;
            let seen = on_path.entry(name).or_insert(0);
            if *seen == 0 {
                f.cum += n.total;
            }
            *seen += 1;
            if let Some(c) = caller {
                let seen = edges_on_path.entry((c, name)).or_insert(0);
                if *seen == 0 {
                    *edges.entry((c, name)).or_insert(0) += n.total;
                }
                *seen += 1;
            }
            stack.push((i, false));
            stack.extend(children[i as usize].iter().rev().map(|&c| (c, true)));
        } else {
            if let Some(seen) = on_path.get_mut(name) {
                *seen -= 1;
            }
            if let Some(seen) = caller.and_then(|c| edges_on_path.get_mut(&(c, name))) {
                *seen -= 1;
            }
        }
    }
    Graph { fns, edges }
}

/// DOT text for `tree`, titled `title` (the profile type), values in `unit`.
/// An empty profile gives an empty text.
pub fn dot(tree: &CallTree, title: &str, unit: &str, max_nodes: usize) -> String {
    let total = tree.total();
    if total == 0 {
        return String::new();
    }
    let Graph { fns, edges } = graph(tree);
    let mut ranked: Vec<(&str, FnStats)> = fns.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cum.cmp(&a.1.cum).then_with(|| a.0.cmp(b.0)));
    let shown = ranked.len().min(max_nodes.max(1));
    let dropped = ranked.len() - shown;
    ranked.truncate(shown);
    let ids: HashMap<&str, usize> = ranked
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (*n, i + 1))
        .collect();
    let pct = |v: i64| 100.0 * v as f64 / total as f64;

    let mut out = String::new();
    let _ = writeln!(out, "digraph \"{}\" {{", esc(title));
    let _ = writeln!(out, "node [style=filled fillcolor=\"#f8f8f8\"]");
    let _ = writeln!(
        out,
        "subgraph cluster_L {{ \"Type: {}\\lTotal: {total} {}\\lShowing {shown} of {} functions ({dropped} dropped)\\l\" [shape=box fontsize=16] }}",
        esc(title),
        esc(unit),
        shown + dropped
    );
    for (name, f) in &ranked {
        let _ = writeln!(
            out,
            "N{} [label=\"{}\\n{} ({:.2}%)\\nof {} ({:.2}%)\" shape=box fontsize={} tooltip=\"{} ({} {})\"]",
            ids[name],
            esc(name),
            f.flat,
            pct(f.flat),
            f.cum,
            pct(f.cum),
            // Larger type for functions with more time of their own, as pprof does.
            8 + (pct(f.flat) / 100.0 * 24.0).round() as i64,
            esc(name),
            f.cum,
            esc(unit),
        );
    }
    let mut drawn: Vec<((&str, &str), i64)> = edges
        .into_iter()
        .filter(|((a, b), _)| ids.contains_key(a) && ids.contains_key(b))
        .collect();
    drawn.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    for ((a, b), w) in drawn {
        let _ = writeln!(
            out,
            "N{} -> N{} [label=\" {w}\" weight={} penwidth={}]",
            ids[a],
            ids[b],
            (pct(w).round() as i64).max(1),
            1 + (pct(w) / 100.0 * 4.0).round() as i64,
        );
    }
    out.push_str("}\n");
    out
}

/// Escapes a DOT double-quoted string.
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(stacks: &[(&[&str], i64)]) -> CallTree {
        let mut t = CallTree::new();
        for (s, v) in stacks {
            t.add_stack(s, *v);
        }
        t.finalize();
        t
    }

    #[test]
    fn nodes_carry_flat_and_cumulative_and_edges_the_flow() {
        let t = tree(&[(&["main", "a"], 30), (&["main", "b"], 60), (&["main"], 10)]);
        let d = dot(&t, "cpu", "nanoseconds", 100);
        assert!(d.starts_with("digraph \"cpu\" {\n"), "{d}");
        assert!(
            d.contains("N1 [label=\"main\\n10 (10.00%)\\nof 100 (100.00%)\""),
            "{d}"
        );
        assert!(
            d.contains("N2 [label=\"b\\n60 (60.00%)\\nof 60 (60.00%)\""),
            "{d}"
        );
        assert!(
            d.contains("N3 [label=\"a\\n30 (30.00%)\\nof 30 (30.00%)\""),
            "{d}"
        );
        let edges: Vec<&str> = d.lines().filter(|l| l.contains("->")).collect();
        assert_eq!(edges.len(), 2);
        assert!(edges[0].starts_with("N1 -> N2 [label=\" 60\""), "{d}");
        assert!(edges[1].starts_with("N1 -> N3 [label=\" 30\""), "{d}");
        assert!(d.ends_with("}\n"));
    }

    #[test]
    fn recursion_is_counted_once_and_the_node_limit_drops_the_smallest() {
        // f calls itself: its cumulative value is the stack's 10, not 20 or 30.
        let t = tree(&[(&["main", "f", "f", "f"], 10), (&["main", "g"], 1)]);
        let Graph { fns, edges } = graph(&t);
        assert_eq!((fns["f"].flat, fns["f"].cum), (10, 10));
        assert_eq!(fns["main"].cum, 11);
        assert_eq!(edges[&("f", "f")], 10);
        assert_eq!(edges[&("main", "f")], 10);
        let d = dot(&t, "cpu", "ns", 2);
        assert!(d.contains("Showing 2 of 3 functions (1 dropped)"), "{d}");
        assert!(!d.contains("\"g\\n"), "{d}");
        // Names are escaped.
        let q = tree(&[(&["say \"hi\""], 1)]);
        assert!(dot(&q, "t", "u", 10).contains("label=\"say \\\"hi\\\"\\n"));
        assert_eq!(dot(&CallTree::new(), "t", "u", 10), "");
    }
}
