//! Numbers as the outputs print them (shared by every crate that prints one).

/// An integer with thousands separators: `8,030,261,248`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Bytes in binary units with three significant digits: `1.50 GiB`, `512 MiB`, `0 B` (every
/// size `vram` prints in its tables and reports).
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else if v >= 100.0 {
        format!("{v:.0} {}", UNITS[u])
    } else if v >= 10.0 {
        format!("{v:.1} {}", UNITS[u])
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn three_digits() {
        assert_eq!(super::bytes(0), "0 B");
        assert_eq!(super::bytes(1536), "1.50 KiB");
        assert_eq!(super::bytes(80 << 30), "80.0 GiB");
        assert_eq!(super::bytes(500 << 20), "500 MiB");
        assert_eq!(super::bytes(131 << 30), "131 GiB");
    }

    #[test]
    fn groups_of_three() {
        assert_eq!(super::thousands(8_030_261_248), "8,030,261,248");
        assert_eq!(super::thousands(999), "999");
        assert_eq!(super::thousands(1000), "1,000");
        assert_eq!(super::thousands(0), "0");
    }
}
