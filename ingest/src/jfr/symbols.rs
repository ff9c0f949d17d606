//! Names of classes the JVM generates at run time carry a counter or an address
//! (`Foo$$Lambda$669.0x0000000800fd7318`, `GeneratedMethodAccessor31`), so the same
//! code gets a new name in every process and every upload. As Pyroscope does, the
//! varying part is replaced by `_`, so such frames merge across uploads.

use std::borrow::Cow;

const ACCESSOR: &str = "jdk/internal/reflect/GeneratedMethodAccessor";
const LAMBDA: &str = "$$Lambda";
const CGLIB: &str = "$$EnhancerBySpringCGLIB$$";

/// `symbol` with generated-class counters and addresses replaced by `_`.
pub fn merge_generated(symbol: &str) -> Cow<'_, str> {
    if let Some(n) = symbol.strip_prefix(ACCESSOR) {
        if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
            return Cow::Owned(format!("{ACCESSOR}_"));
        }
    }
    if let Some(i) = symbol.rfind(LAMBDA).filter(|&i| i > 0) {
        let end = i + LAMBDA.len();
        if is_lambda_suffix(&symbol[end..]) {
            return Cow::Owned(format!("{}_", &symbol[..end]));
        }
    }
    if let Some(i) = symbol.rfind(CGLIB).filter(|&i| i > 0) {
        let end = i + CGLIB.len();
        return Cow::Owned(format!("{}_", &symbol[..end]));
    }
    Cow::Borrowed(symbol)
}

/// `\d+`, or `$?\d*` then `.`, `/` or `+`, an optional `0x` and lowercase hex
/// digits, then optionally `/` and decimal digits. The JDK's recorder names a
/// hidden class `Name+0x<address>/<identity hash>`
/// (`HotApp$$Lambda$88+0x00007fc5a8007a08/1790421142`); async-profiler and
/// `Class.getName` write `Name/0x<address>` or `Name.0x<address>`.
fn is_lambda_suffix(s: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if digits(s) {
        return true;
    }
    let s = s.strip_prefix('$').unwrap_or(s);
    let s = s.trim_start_matches(|c: char| c.is_ascii_digit());
    let Some(s) = s.strip_prefix(['.', '/', '+']) else {
        return false;
    };
    let hex = s.strip_prefix("0x").unwrap_or(s);
    let (hex, hash) = match hex.split_once('/') {
        Some((h, n)) => (h, Some(n)),
        None => (hex, None),
    };
    !hex.is_empty()
        && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        && hash.is_none_or(digits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_merge() {
        for (input, want) in [
            (
                "jdk/internal/reflect/GeneratedMethodAccessor31",
                "jdk/internal/reflect/GeneratedMethodAccessor_",
            ),
            (
                "org/example/OrderService$$Lambda$669.0x0000000800fd7318",
                "org/example/OrderService$$Lambda_",
            ),
            ("Fib$$Lambda.0x00007ffa600c4da0", "Fib$$Lambda_"),
            ("Fib$$Lambda/0x00007ffa600c4da0", "Fib$$Lambda_"),
            ("Fib$$Lambda42", "Fib$$Lambda_"),
            // The JDK 17 recorder's hidden class name; the address and hash change
            // between runs.
            (
                "HotApp$$Lambda$88+0x00007fc5a8007a08/1790421142",
                "HotApp$$Lambda_",
            ),
            (
                "jdk/internal/Svc$$Lambda$38+0x00007fc3b806d1c0/1029991479",
                "jdk/internal/Svc$$Lambda_",
            ),
            (
                "com/x/Svc$$EnhancerBySpringCGLIB$$a1b2c3",
                "com/x/Svc$$EnhancerBySpringCGLIB$$_",
            ),
        ] {
            assert_eq!(merge_generated(input), want, "{input}");
        }
        for same in [
            "java/lang/Thread",
            "jdk/internal/reflect/GeneratedMethodAccessor",
            "Fib$$Lambda.0xZZ",
            "$$Lambda1",
            "Fib$$Lambda$",
            "Fib$$Lambda$1+0x1f/x",
        ] {
            assert!(matches!(merge_generated(same), Cow::Borrowed(_)), "{same}");
        }
    }
}
