//! Kubernetes resource quantities (`500m`, `1.5`, `128Mi`, `1G`, `2e3`) as the numbers
//! the CRI wants: CPU in millicores, everything else in whole units (bytes).

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("quantity {0:?} is not a Kubernetes quantity")]
pub struct BadQuantity(pub String);

/// The value times 1000, rounded up (as the kubelet's MilliValue rounds a fraction of a
/// millicore up).
pub fn milli(q: &Quantity) -> Result<i64, BadQuantity> {
    scaled(&q.0, 3)
}

/// The value in whole units, rounded up.
pub fn value(q: &Quantity) -> Result<i64, BadQuantity> {
    scaled(&q.0, 0)
}

/// `s` times 10^`exp10`, rounded up to an integer.
fn scaled(s: &str, exp10: i32) -> Result<i64, BadQuantity> {
    let bad = || BadQuantity(s.to_string());
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    if num.is_empty() {
        return Err(bad());
    }
    // (binary multiplier, decimal exponent)
    let (bin, dec): (u32, i32) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        e if e.starts_with(['e', 'E']) => (0, e[1..].parse().map_err(|_| bad())?),
        _ => return Err(bad()),
    };
    let (neg, digits) = match num.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, num.strip_prefix('+').unwrap_or(num)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty()
        || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit())
    {
        return Err(bad());
    }
    // An exact integer mantissa and its decimal exponent, in 128 bits.
    let mantissa: i128 = format!("{int}{frac}").parse().map_err(|_| bad())?;
    let exp = dec + exp10 - frac.len() as i32;
    let mut v = mantissa.checked_mul(1i128 << bin).ok_or_else(bad)?;
    if exp >= 0 {
        v = v
            .checked_mul(10i128.checked_pow(exp as u32).ok_or_else(bad)?)
            .ok_or_else(bad)?;
    } else {
        let d = 10i128.checked_pow((-exp) as u32).ok_or_else(bad)?;
        v = (v + d - 1) / d;
    }
    let v = if neg { -v } else { v };
    i64::try_from(v).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity(s.to_string())
    }

    #[test]
    fn cpu_and_memory() {
        assert_eq!(milli(&q("500m")), Ok(500));
        assert_eq!(milli(&q("1.5")), Ok(1500));
        assert_eq!(milli(&q("2")), Ok(2000));
        assert_eq!(milli(&q("0.0005")), Ok(1), "rounded up");
        assert_eq!(value(&q("128Mi")), Ok(128 << 20));
        assert_eq!(value(&q("1G")), Ok(1_000_000_000));
        assert_eq!(value(&q("1.5Gi")), Ok(3 << 29));
        assert_eq!(value(&q("2e3")), Ok(2000));
        assert_eq!(value(&q("100k")), Ok(100_000));
        assert_eq!(value(&q("1500m")), Ok(2));
        assert!(value(&q("12xyz")).is_err());
        assert!(value(&q("")).is_err());
        assert!(value(&q("1..2")).is_err());
    }
}
