//! What Explore shows beside its flame graph, computed from the whole merge rather
//! than from the flame graph, which `max_nodes` truncates (its `other` nodes hide
//! functions): `GET /api/v1/functions`, every function's self and total value, and
//! `GET /api/v1/sandwich`, one function's callers and callees.
//!
//! Both read the merged call tree of the selection. A function's self value is
//! what the group-by by `function` gives (the stacks ending in it), its total what
//! the group-by by `function_total` gives (the stacks containing it, each once
//! however deep it recurses).

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use profiledb_storage::{flamegraph, CallTree, TreeNode};
use serde::{Deserialize, Serialize};

use super::answers::cached_answer;
use super::native::{count, flame_json, raw_query, to_json, FlameJson, JSON};
use super::warnings;
use crate::error::{ApiError, ApiResult};
use crate::http::request::{blocking, max_nodes, window, Params, Selection};
use crate::http::{tenant_of, AppRef};

pub fn routes() -> Router<AppRef> {
    Router::new()
        .route("/api/v1/functions", get(functions))
        .route("/api/v1/sandwich", get(sandwich))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FunctionParams {
    query: Option<String>,
    from: Option<String>,
    until: Option<String>,
    /// Rows: the top `limit` by self value and the top `limit` by total (default
    /// 1000, 0 = every function).
    limit: Option<usize>,
    /// For the sandwich: the function.
    function: Option<String>,
    /// For the sandwich: each flame graph's node budget.
    max_nodes: Option<i64>,
}

/// Children of every node, parents before children (the tree's own order).
struct Children {
    start: Vec<u32>,
    list: Vec<u32>,
}

impl Children {
    fn of(nodes: &[TreeNode]) -> Self {
        let mut start = vec![0u32; nodes.len() + 1];
        for n in nodes.iter().skip(1) {
            start[n.parent as usize + 1] += 1;
        }
        for i in 0..nodes.len() {
            start[i + 1] += start[i];
        }
        let mut fill = start.clone();
        let mut list = vec![0u32; nodes.len().saturating_sub(1)];
        for (i, n) in nodes.iter().enumerate().skip(1) {
            let p = n.parent as usize;
            list[fill[p] as usize] = i as u32;
            fill[p] += 1;
        }
        Children { start, list }
    }

    fn get(&self, node: u32) -> &[u32] {
        let (a, b) = (self.start[node as usize], self.start[node as usize + 1]);
        &self.list[a as usize..b as usize]
    }
}

/// Depth-first over `tree`, calling `f(node, outermost)` where `outermost` says no
/// ancestor has the node's name (where a recursive function's total is counted).
fn walk(tree: &CallTree, children: &Children, mut f: impl FnMut(u32, bool)) {
    let nodes = tree.nodes();
    // How many nodes of each name are on the current path.
    let mut on_path = vec![0u32; nodes.iter().map(|n| n.name as usize + 1).max().unwrap_or(0)];
    // (node, entering) pairs: leaving a node takes its name off the path.
    let mut stack: Vec<(u32, bool)> = children.get(0).iter().rev().map(|&c| (c, true)).collect();
    while let Some((node, entering)) = stack.pop() {
        let name = nodes[node as usize].name as usize;
        if !entering {
            on_path[name] -= 1;
            continue;
        }
        f(node, on_path[name] == 0);
        on_path[name] += 1;
        stack.push((node, false));
        stack.extend(children.get(node).iter().rev().map(|&c| (c, true)));
    }
}

#[derive(Serialize)]
struct FunctionRow<'a> {
    name: &'a str,
    #[serde(rename = "self")]
    self_value: i64,
    total: i64,
}

/// Every function's self and total value, largest self first (then total, name).
fn function_rows(tree: &CallTree) -> Vec<FunctionRow<'_>> {
    let nodes = tree.nodes();
    let names = nodes.iter().map(|n| n.name as usize + 1).max().unwrap_or(0);
    let (mut selfs, mut totals, mut seen) =
        (vec![0i64; names], vec![0i64; names], vec![false; names]);
    walk(tree, &Children::of(nodes), |node, outermost| {
        let n = &nodes[node as usize];
        let k = n.name as usize;
        seen[k] = true;
        selfs[k] = selfs[k].saturating_add(n.self_value);
        if outermost {
            totals[k] = totals[k].saturating_add(n.total);
        }
    });
    let mut rows: Vec<FunctionRow> = (0..names)
        .filter(|&k| seen[k])
        .map(|k| FunctionRow {
            name: tree.name(k as u32),
            self_value: selfs[k],
            total: totals[k],
        })
        .collect();
    rows.sort_by(|a, b| {
        b.self_value
            .cmp(&a.self_value)
            .then(b.total.cmp(&a.total))
            .then(a.name.cmp(b.name))
    });
    rows
}

/// The top `limit` rows by self value and the top `limit` by total (0 = all).
fn top_rows(mut rows: Vec<FunctionRow<'_>>, limit: usize) -> Vec<FunctionRow<'_>> {
    if limit == 0 || rows.len() <= limit {
        return rows;
    }
    let mut by_total: Vec<usize> = (0..rows.len()).collect();
    by_total.sort_by(|&a, &b| rows[b].total.cmp(&rows[a].total).then(a.cmp(&b)));
    let mut keep = vec![false; rows.len()];
    keep[..limit].iter_mut().for_each(|k| *k = true);
    for &i in &by_total[..limit] {
        keep[i] = true;
    }
    let mut k = keep.into_iter();
    rows.retain(|_| k.next().unwrap_or(false));
    rows
}

/// The merged call tree of a request's selection, and warnings when it is empty.
async fn merged_tree(
    state: &AppRef,
    headers: &HeaderMap,
    p: &FunctionParams,
) -> ApiResult<(CallTree, Vec<String>)> {
    let sel = Selection::from_query(p.query.as_deref())?.selector;
    let range = window(("from", p.from.as_deref()), ("until", p.until.as_deref()))?;
    let (querier, tenant) = (state.querier()?, tenant_of(headers)?);
    blocking(move || {
        let tree = querier
            .merge_flamegraph(&tenant, &sel, range)?
            .to_tree_checked()?;
        let warnings = match tree.total() {
            0 => warnings::selection(&querier, &tenant, &sel, range)?,
            _ => Vec::new(),
        };
        Ok((tree, warnings))
    })
    .await
}

/// `GET /api/v1/functions?query=&from=&until=&limit=`
async fn functions(
    State(state): State<AppRef>,
    headers: HeaderMap,
    uri: Uri,
    Params(p): Params<FunctionParams>,
) -> ApiResult<Response> {
    count(&state);
    if p.function.is_some() || p.max_nodes.is_some() {
        return Err(ApiError::bad_request(
            "function and max_nodes are parameters of /api/v1/sandwich",
        ));
    }
    let tenant = tenant_of(&headers)?;
    let range = window(("from", p.from.as_deref()), ("until", p.until.as_deref()))?;
    let limit = p.limit.unwrap_or(1000);
    cached_answer(&state, &tenant, &[range], raw_query(&uri), JSON, || async {
        let (tree, warnings) = merged_tree(&state, &headers, &p).await?;
        #[derive(Serialize)]
        struct Answer<'a> {
            total: i64,
            functions: Vec<FunctionRow<'a>>,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            warnings: Vec<String>,
        }
        to_json(&Answer {
            total: tree.total(),
            functions: top_rows(function_rows(&tree), limit),
            warnings,
        })
    })
    .await
}

/// Callers (`inverted`) or callees of every outermost node named `function`, as a
/// tree rooted at the function; the value of the stacks containing it.
fn sandwich_tree(tree: &CallTree, function: &str, inverted: bool) -> (CallTree, i64) {
    let nodes = tree.nodes();
    let children = Children::of(nodes);
    let mut out = CallTree::new();
    let fname = out.intern(function);
    let top = out.child(0, fname);
    let mut value = 0i64;
    let mut outer = Vec::new();
    walk(tree, &children, |node, outermost| {
        if outermost && tree.node_name(node) == function {
            outer.push(node);
        }
    });
    for &node in &outer {
        let total = nodes[node as usize].total;
        value = value.saturating_add(total);
        if inverted {
            // The path to the root, nearest caller first, ends with the whole value.
            let mut at = top;
            let mut up = nodes[node as usize].parent;
            while up != 0 && (up as usize) < nodes.len() {
                let name = out.intern(tree.node_name(up));
                at = out.child(at, name);
                up = nodes[up as usize].parent;
            }
            out.add_self(at, total);
            continue;
        }
        // The subtree under the function, merged by path.
        out.add_self(top, nodes[node as usize].self_value);
        let mut stack: Vec<(u32, u32)> = children.get(node).iter().map(|&c| (c, top)).collect();
        while let Some((old, parent)) = stack.pop() {
            let name = out.intern(tree.node_name(old));
            let new = out.child(parent, name);
            out.add_self(new, nodes[old as usize].self_value);
            stack.extend(children.get(old).iter().map(|&c| (c, new)));
        }
    }
    out.finalize();
    (out, value)
}

/// `GET /api/v1/sandwich?query=&from=&until=&function=&max_nodes=`
async fn sandwich(
    State(state): State<AppRef>,
    headers: HeaderMap,
    uri: Uri,
    Params(p): Params<FunctionParams>,
) -> ApiResult<Response> {
    count(&state);
    let function = p
        .function
        .clone()
        .filter(|f| !f.is_empty())
        .ok_or_else(|| ApiError::bad_request("missing parameter function (a function name)"))?;
    if p.limit.is_some() {
        return Err(ApiError::bad_request(
            "limit is a parameter of /api/v1/functions",
        ));
    }
    let mn = max_nodes(p.max_nodes)?;
    let tenant = tenant_of(&headers)?;
    let range = window(("from", p.from.as_deref()), ("until", p.until.as_deref()))?;
    cached_answer(&state, &tenant, &[range], raw_query(&uri), JSON, || async {
        let (tree, mut warnings) = merged_tree(&state, &headers, &p).await?;
        let (callers, value) = sandwich_tree(&tree, &function, true);
        let (callees, _) = sandwich_tree(&tree, &function, false);
        if value == 0 && tree.total() > 0 {
            warnings.push(format!(
                "no stack of the selection has the function {function:?}"
            ));
        }
        let (callers, callees) = (flamegraph(&callers, mn), flamegraph(&callees, mn));
        #[derive(Serialize)]
        struct Answer<'a> {
            function: &'a str,
            total: i64,
            value: i64,
            callers: FlameJson<'a>,
            callees: FlameJson<'a>,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            warnings: Vec<String>,
        }
        to_json(&Answer {
            function: &function,
            total: tree.total(),
            value,
            callers: flame_json(&callers),
            callees: flame_json(&callees),
            warnings,
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(stacks: &[(&str, i64)]) -> CallTree {
        let mut t = CallTree::new();
        for (s, v) in stacks {
            t.add_stack(&s.split(';').collect::<Vec<_>>(), *v);
        }
        t.finalize();
        t
    }

    #[test]
    fn self_and_total_count_each_stack_once() {
        let t = tree(&[("main;f;g;f", 3), ("main;f", 2), ("main;h", 5), ("idle", 1)]);
        let rows = function_rows(&t);
        let got: Vec<(&str, i64, i64)> = rows
            .iter()
            .map(|r| (r.name, r.self_value, r.total))
            .collect();
        assert_eq!(
            got,
            [
                ("f", 5, 5),
                ("h", 5, 5),
                ("idle", 1, 1),
                ("main", 0, 10),
                ("g", 0, 3)
            ]
        );
        // The top 1 by self (f) and by total (main).
        let names: Vec<&str> = top_rows(function_rows(&t), 1)
            .iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["f", "main"]);
    }

    #[test]
    fn sandwich_merges_every_outermost_call() {
        let t = tree(&[
            ("main;f;g;f", 3),
            ("main;f", 2),
            ("main;h;f;k", 4),
            ("idle", 1),
        ]);
        let (callers, v) = sandwich_tree(&t, "f", true);
        assert_eq!(v, 9);
        let folded = callers.folded();
        assert_eq!(folded.get("f;main"), Some(&5));
        assert_eq!(folded.get("f;h;main"), Some(&4));
        let (callees, v) = sandwich_tree(&t, "f", false);
        assert_eq!(v, 9);
        let folded = callees.folded();
        assert_eq!(folded.get("f"), Some(&2));
        assert_eq!(folded.get("f;g;f"), Some(&3));
        assert_eq!(folded.get("f;k"), Some(&4));
        assert_eq!(callees.total(), 9);
    }
}
