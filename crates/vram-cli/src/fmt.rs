//! Human-readable numbers.

/// Bytes in binary units with three significant digits: `1.50 GiB`, `512 MiB`, `0 B`.
pub use vram_model::fmt::bytes;

/// An integer with thousands separators: `8,030,261,248`.
pub use vram_model::fmt::thousands;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(bytes(80 << 30), "80.0 GiB");
        assert_eq!(bytes(500 << 20), "500 MiB");
        assert_eq!(thousands(8_030_261_248), "8,030,261,248");
        assert_eq!(thousands(999), "999");
    }
}
