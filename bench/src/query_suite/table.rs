//! The query suite's summary table on stdout.

use super::*;

pub(super) fn print_table(results: &[Value]) {
    println!();
    println!(
        "{:<46} {:>4} {:>9} {:>17} {:>15} {}",
        "query",
        "win",
        "restart",
        "uncached p50/p99",
        "cached p50/p99",
        baselines::table_header()
    );
    let ms = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    for r in results {
        println!(
            "{:<46} {:>4} {:>7.1}ms {:>7.1}/{:>7.1}ms {:>6.2}/{:>6.2}ms {}",
            r.get("query").and_then(Value::as_str).unwrap_or(""),
            r.get("window").and_then(Value::as_str).unwrap_or(""),
            ms(r, "restart_first_ms"),
            ms(r, "uncached_p50_ms"),
            ms(r, "uncached_p99_ms"),
            ms(r, "cached_p50_ms"),
            ms(r, "cached_p99_ms"),
            baselines::table_cells(r)
        );
    }
}
