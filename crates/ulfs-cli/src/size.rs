//! Parsing of human size arguments (`64M`, `2G`, `512K`, `4096`).
//!
//! Sizes decide how large an image becomes, so a typo must never silently
//! turn into some other size: the grammar is strict (whole numbers, one
//! binary unit, nothing else) and overflow is an error, not a wrap.

/// Parse `<digits>[unit]` where unit is one of K, M, G, T, P (powers of
/// 1024, any case, optionally spelled `KiB`/`KB`-style) or `B`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(digits_end);
    if digits.is_empty() {
        return Err(format!(
            "invalid size '{s}': expected a whole number with an optional unit (K, M, G, T), e.g. 64M"
        ));
    }
    if unit.starts_with(['.', ',']) {
        return Err(format!(
            "invalid size '{s}': use a whole number (e.g. 1536M instead of 1.5G)"
        ));
    }
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        "p" | "pb" | "pib" => 50,
        _ => {
            return Err(format!(
                "invalid size '{s}': unknown unit '{unit}' (use K, M, G, T or P, powers of 1024)"
            ));
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid size '{s}': number too large"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("invalid size '{s}': too large"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn plain_bytes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4096B"), Ok(4096));
    }

    #[test]
    fn binary_units_any_case() {
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("2gb"), Ok(2 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("1P"), Ok(1 << 50));
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "", "M", "-1", "+5", "1.5G", "12X", "64 M", " 64M", "64M ", "64MM", "0x10", "1e6",
            "64Mi", "١٢", "64M\n",
        ] {
            assert!(parse_size(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn fractions_get_a_hint() {
        let e = parse_size("1.5G").unwrap_err();
        assert!(e.contains("whole number"), "{e}");
    }

    #[test]
    fn rejects_overflow() {
        assert!(parse_size("18446744073709551616").is_err());
        assert!(parse_size("16384P").is_err());
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn error_names_the_input() {
        let e = parse_size("12X").unwrap_err();
        assert!(e.contains("12X") && e.contains("unit"), "{e}");
    }
}
