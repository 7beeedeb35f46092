//! Number and text formatting of the Prometheus encoders: floats as Prometheus parses
//! them (shortest round-trip digits, as `Display` writes them), integers, HELP text,
//! into any [`Text`]: a `String`, or the reused buffer of a scrape's chunks.

use bytes::BytesMut;

/// Where the encoders write: text appended in pieces, each piece valid UTF-8.
pub(crate) trait Text {
    /// Appends `s`.
    fn put_str(&mut self, s: &str);
    /// Appends one ASCII character.
    fn put_ascii(&mut self, b: u8);
    /// Bytes written so far.
    fn written(&self) -> usize;
}

impl Text for String {
    #[inline]
    fn put_str(&mut self, s: &str) {
        self.push_str(s);
    }
    #[inline]
    fn put_ascii(&mut self, b: u8) {
        debug_assert!(b.is_ascii());
        self.push(char::from(b));
    }
    #[inline]
    fn written(&self) -> usize {
        self.len()
    }
}

/// A chunk of a scrape's body: only whole `&str` pieces and ASCII bytes go in, so it
/// is always UTF-8.
impl Text for BytesMut {
    #[inline]
    fn put_str(&mut self, s: &str) {
        self.extend_from_slice(s.as_bytes());
    }
    #[inline]
    fn put_ascii(&mut self, b: u8) {
        debug_assert!(b.is_ascii());
        self.extend_from_slice(&[b]);
    }
    #[inline]
    fn written(&self) -> usize {
        self.len()
    }
}

/// Escapes a `# HELP` text (`\`, newline).
pub(crate) fn escape_help(help: &str, out: &mut impl Text) {
    let mut rest = help;
    while let Some(i) = rest.find(['\\', '\n']) {
        out.put_str(&rest[..i]);
        out.put_str(if rest.as_bytes()[i] == b'\\' {
            "\\\\"
        } else {
            "\\n"
        });
        rest = &rest[i + 1..];
    }
    out.put_str(rest);
}

/// Formats a sample value the way Prometheus parses it: integers without a fraction,
/// other values as Rust's `{}` prints them (the shortest digits that round-trip, in
/// positional notation, never an exponent), without going through `core::fmt`.
pub(crate) fn format_value(v: f64, out: &mut impl Text) {
    if v.is_nan() {
        out.put_str("NaN");
    } else if v == f64::INFINITY {
        out.put_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.put_str("-Inf");
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        if v < 0.0 {
            out.put_ascii(b'-');
        }
        format_u64(v.abs() as u64, out);
    } else {
        format_shortest(v, out);
    }
}

/// A finite `v` as `format!("{v}")` writes it. zmij finds the same shortest
/// round-trip digits as `core::fmt` but may write them with an exponent (`1e-7`,
/// `1.5e+21`); the digits are re-placed positionally here.
fn format_shortest(v: f64, out: &mut impl Text) {
    let mut buf = zmij::Buffer::new();
    let text = buf.format_finite(v);
    let s = text.as_bytes();
    // Most values: `12.34`, `0.001234` (no exponent, a fraction without trailing
    // zeros) are already written as `core::fmt` writes them.
    if let Some(dot) = s.iter().position(|&b| b == b'.') {
        let frac = &s[dot + 1..];
        if frac.last().is_some_and(|&b| b != b'0')
            && frac.iter().all(u8::is_ascii_digit)
            && !is_tie(v, -(frac.len() as i64))
        {
            out.put_str(text);
            return;
        }
    }
    let (negative, s) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    let (mantissa, exp) = match s.iter().position(|&b| b == b'e' || b == b'E') {
        Some(i) => (&s[..i], parse_exp(&s[i + 1..])),
        None => (s, 0),
    };
    // The mantissa's digits without the point, and how many of them precede it.
    let mut digits = [0u8; 32];
    let mut n = 0usize;
    let mut int_len: Option<usize> = None;
    for &b in mantissa {
        if b == b'.' {
            int_len = Some(n);
        } else if n < digits.len() {
            digits[n] = b;
            n += 1;
        }
    }
    let mut point = int_len.unwrap_or(n) as i64 + exp;
    // Drop leading zeros (moving the point) and trailing zeros.
    let mut start = 0;
    while start < n && digits[start] == b'0' {
        start += 1;
        point -= 1;
    }
    while n > start && digits[n - 1] == b'0' {
        n -= 1;
    }
    let digits = &digits[start..n];
    let len = digits.len() as i64;
    if is_tie(v, point - len) {
        // `v` lies exactly halfway between two shortest candidates: zmij rounds the
        // last digit to even, `core::fmt` up. Rare (values like 2^50 + 0.25).
        out.put_str(&v.to_string());
        return;
    }
    if negative {
        out.put_ascii(b'-');
    }
    if digits.is_empty() {
        out.put_ascii(b'0');
        return;
    }
    if point <= 0 {
        out.put_str("0.");
        put_zeros(out, -point);
        put_digits(out, digits);
    } else if point >= len {
        put_digits(out, digits);
        put_zeros(out, point - len);
    } else {
        let (int, frac) = digits.split_at(point as usize);
        put_digits(out, int);
        out.put_ascii(b'.');
        put_digits(out, frac);
    }
}

/// Appends ASCII `digits`.
fn put_digits(out: &mut impl Text, digits: &[u8]) {
    for &b in digits {
        out.put_ascii(b);
    }
}

/// Appends `k` zeros.
fn put_zeros(out: &mut impl Text, k: i64) {
    for _ in 0..k {
        out.put_ascii(b'0');
    }
}

/// Whether finite `v` is exactly halfway between two multiples of `10^k`, that is
/// whether `2v / 10^k` is an odd integer. With `v = m·2^e`, `m` odd, that holds iff
/// `e + 1 == k` and, for `k ≥ 0`, `5^k` divides `m`.
fn is_tie(v: f64, k: i64) -> bool {
    let bits = v.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i64;
    let fraction = bits & ((1u64 << 52) - 1);
    let (m, e) = if biased == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1u64 << 52), biased - 1075)
    };
    if m == 0 {
        return false;
    }
    let zeros = m.trailing_zeros();
    let (m, e) = (m >> zeros, e + i64::from(zeros));
    if e + 1 != k {
        return false;
    }
    // 5^23 exceeds any 53-bit mantissa.
    k < 0 || (k <= 22 && m % 5u64.pow(k as u32) == 0)
}

fn parse_exp(s: &[u8]) -> i64 {
    let (negative, s) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, s),
    };
    let e = s
        .iter()
        .fold(0i64, |e, &b| e * 10 + i64::from(b.wrapping_sub(b'0')));
    if negative { -e } else { e }
}

/// Appends the decimal digits of `n`.
pub(crate) fn format_u64(n: u64, out: &mut impl Text) {
    out.put_str(itoa::Buffer::new().format(n));
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn values_format_as_prometheus_parses_them() {
        for (v, want) in [
            (0.0, "0"),
            (-0.0, "0"),
            (3.0, "3"),
            (-12.0, "-12"),
            (0.25, "0.25"),
            (1e20, "100000000000000000000"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
        ] {
            let mut s = String::new();
            format_value(v, &mut s);
            assert_eq!(s, want);
        }
        let mut s = String::new();
        format_u64(u64::MAX, &mut s);
        assert_eq!(s, u64::MAX.to_string());
    }

    fn assert_formats_as_display(v: f64) {
        let mut s = String::new();
        format_value(v, &mut s);
        // The integer fast path writes `-0` as `0`.
        let want = if v == 0.0 {
            "0".to_owned()
        } else {
            format!("{v}")
        };
        assert_eq!(s, want, "bits {:#x}", v.to_bits());
    }

    #[test]
    fn values_format_as_display_does() {
        let specials = [
            0.1,
            0.2,
            0.3,
            0.1 + 0.2,
            1e-7,
            1e-5,
            1e-4,
            1e21,
            1e22,
            1.5e300,
            1e15,
            1e16,
            1e15 + 0.5,
            123_456_789_012_345_680.0,
            4_503_599_627_370_497.0,
            9_007_199_254_740_993.0,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            f64::EPSILON,
            5e-324,
            -5e-324,
            2.5e-300,
            1.0 / 3.0,
            -2.0 / 3.0,
            123.456,
            -0.0,
            0.0,
            -1e-7,
            0.000_123,
            1234.5,
            f64::from_bits(0x44b5_2d02_c7e1_4af6), // nearest 1e23, below it
        ];
        for v in specials {
            assert_formats_as_display(v);
        }
        // Powers of ten and their neighbours, over the whole range.
        for e in -324..=308 {
            let p = format!("1e{e}").parse::<f64>().unwrap_or(0.0);
            for v in [
                p,
                f64::from_bits(p.to_bits() + 1),
                f64::from_bits(p.to_bits().saturating_sub(1)),
            ] {
                assert_formats_as_display(v);
                assert_formats_as_display(-v);
            }
        }
        // Short decimals at every scale, and their neighbours (where a candidate may
        // sit on a rounding boundary, like 1e23).
        for e in -30..=300 {
            for d in (1..1000).step_by(7) {
                let p = format!("{d}e{e}").parse::<f64>().unwrap_or(0.0);
                for v in [
                    p,
                    f64::from_bits(p.to_bits() + 1),
                    f64::from_bits(p.to_bits() - 1),
                ] {
                    assert_formats_as_display(v);
                }
            }
        }
        // Exact halves and quarters above 2^50, where two shortest candidates tie.
        for i in 0..10_000u64 {
            let base = (1u64 << 50) + i * 7_919;
            for frac in [0.25, 0.5, 0.75] {
                assert_formats_as_display(base as f64 + frac);
                assert_formats_as_display((base << 2) as f64 + frac * 4.0);
            }
        }
        // A deterministic spread of bit patterns (xorshift).
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = f64::from_bits(x);
            if v.is_finite() {
                assert_formats_as_display(v);
            }
            // Short decimals, as counters and sums of timings are.
            assert_formats_as_display((x % 1_000_000) as f64 / 1000.0);
            assert_formats_as_display((x % 100_000) as f64 * 0.37);
        }
    }

    proptest! {
        #[test]
        fn any_float_formats_as_display_does(bits in any::<u64>(), small in -1e6f64..1e6) {
            for v in [f64::from_bits(bits), small] {
                if v.is_finite() {
                    assert_formats_as_display(v);
                }
            }
        }
    }
}
