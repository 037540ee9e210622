//! Numbers as a person reads them: `1k`, `1.5 s`, `64 MiB`, `32,729`. Used by
//! the plots' tick labels and the tables alike.

use std::fmt;
use std::time::Duration;

/// A duration as a person writes it (`60 ms`, `1.5 s`), for `{}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Human(pub Duration);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&millis(self.0.as_secs_f64() * 1e3))
    }
}

/// A change as a signed percentage: `−98 %`, `+6 %`, `0 %`.
pub fn change(x: f64) -> String {
    if !x.is_finite() {
        return "–".to_owned();
    }
    let p = (100.0 * x).round();
    if p < 0.0 {
        format!("−{} %", -p)
    } else if p > 0.0 {
        format!("+{p} %")
    } else {
        "0 %".to_owned()
    }
}

/// A value with an SI suffix and at most three significant digits:
/// `0`, `250`, `2.5`, `1k`, `1.5k`, `250k`, `1.2M`.
pub fn si(v: f64) -> String {
    if !v.is_finite() {
        return "–".to_owned();
    }
    let a = v.abs();
    let (scaled, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    format!("{}{suffix}", trim(scaled))
}

/// Three significant digits, no trailing zeros: `1`, `1.5`, `12.5`, `250`.
fn trim(v: f64) -> String {
    let a = v.abs();
    let s = if a == 0.0 {
        "0".to_owned()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// Seconds as a tick label: `0 s`, `0.25 s`, `1 s`, `1.5 s`, `2 min`.
pub fn seconds(s: f64) -> String {
    if !s.is_finite() {
        "–".to_owned()
    } else if s.abs() >= 120.0 {
        format!("{} min", trim(s / 60.0))
    } else {
        format!("{} s", trim(s))
    }
}

/// Milliseconds for a table: `850 ms`, `1.2 s`.
pub fn millis(ms: f64) -> String {
    if !ms.is_finite() {
        "–".to_owned()
    } else if ms.abs() >= 1000.0 {
        seconds(ms / 1e3)
    } else if ms.abs() >= 10.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{} ms", trim(ms))
    }
}

/// Microseconds for a table: `0.42 µs`, `85 µs`, `1.2 ms`.
pub fn micros(us: f64) -> String {
    if !us.is_finite() {
        "–".to_owned()
    } else if us.abs() >= 1000.0 {
        millis(us / 1e3)
    } else {
        format!("{} µs", trim(us))
    }
}

/// Mebibytes as a tick label: `0 MiB`, `64 MiB`, `1.5 GiB`, `512 KiB`.
pub fn mib(m: f64) -> String {
    if !m.is_finite() {
        "–".to_owned()
    } else if m == 0.0 {
        "0 MiB".to_owned()
    } else if m.abs() >= 1024.0 {
        format!("{} GiB", trim(m / 1024.0))
    } else if m.abs() < 1.0 {
        format!("{} KiB", trim(m * 1024.0))
    } else {
        format!("{} MiB", trim(m))
    }
}

/// A whole number with thousands separators: `32,729`.
pub fn count(v: f64) -> String {
    if !v.is_finite() {
        return "–".to_owned();
    }
    let n = v.round() as i64;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_numbers() {
        assert_eq!(si(0.0), "0");
        assert_eq!(si(250.0), "250");
        assert_eq!(si(2.5), "2.5");
        assert_eq!(si(1000.0), "1k");
        assert_eq!(si(1500.0), "1.5k");
        assert_eq!(si(250_000.0), "250k");
        assert_eq!(si(1_234_567.0), "1.23M");
        assert_eq!(seconds(0.0), "0 s");
        assert_eq!(seconds(0.25), "0.25 s");
        assert_eq!(seconds(1.0), "1 s");
        assert_eq!(seconds(1.5), "1.5 s");
        assert_eq!(seconds(300.0), "5 min");
        assert_eq!(millis(850.4), "850 ms");
        assert_eq!(millis(1200.0), "1.2 s");
        assert_eq!(mib(64.0), "64 MiB");
        assert_eq!(mib(1536.0), "1.5 GiB");
        assert_eq!(mib(0.5), "512 KiB");
        assert_eq!(count(32729.0), "32,729");
        assert_eq!(count(999.0), "999");
        assert_eq!(count(1_000_000.0), "1,000,000");
        assert_eq!(change(-0.981), "−98 %");
        assert_eq!(change(0.06), "+6 %");
        assert_eq!(change(0.0), "0 %");
        assert_eq!(Human(Duration::from_millis(60)).to_string(), "60 ms");
        assert_eq!(Human(Duration::from_millis(1500)).to_string(), "1.5 s");
    }
}
