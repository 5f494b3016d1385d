//! The Prometheus text exposition format, read back: what the kubelet serves on
//! `/metrics/cadvisor`, for the kubelet suite to find samples in.

/// One sample: metric name, labels in their order, value.
pub type Sample = (String, Vec<(String, String)>, f64);

/// The samples of a text exposition, comments and blank lines left out, label values
/// unescaped (`\"`, `\\`, `\n`), timestamps dropped; `None` for a line it cannot read.
pub fn samples(text: &str) -> Option<Vec<Sample>> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(sample)
        .collect()
}

fn sample(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' ']).unwrap_or(line.len());
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = vec![];
    if let Some(r) = rest.strip_prefix('{') {
        let mut chars = r.char_indices();
        let mut key = String::new();
        loop {
            let (i, ch) = chars.next()?;
            match ch {
                '}' => {
                    rest = &r[i + 1..];
                    break;
                }
                ',' | ' ' => {}
                '=' => {
                    if chars.next()?.1 != '"' {
                        return None;
                    }
                    let mut value = String::new();
                    loop {
                        match chars.next()?.1 {
                            '\\' => match chars.next()?.1 {
                                'n' => value.push('\n'),
                                c => value.push(c),
                            },
                            '"' => break,
                            c => value.push(c),
                        }
                    }
                    labels.push((std::mem::take(&mut key), value));
                }
                _ => key.push(ch),
            }
        }
    }
    let value = match rest.split_whitespace().next()? {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some((name, labels, value))
}

/// The value of label `key`.
pub fn label<'a>(s: &'a Sample, key: &str) -> Option<&'a str> {
    s.1.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_labels_values() {
        let text = "# HELP a_total Help.\n# TYPE a_total counter\n\
            a_total{container=\"main\",image=\"r/i:1\",pod=\"p\\\"q\\\\\",x=\"a\\nb\"} 1.6777216e+07\n\
            \n\
            machine_cpu_cores 2 1700000000000\n\
            up{} NaN\n";
        let s = samples(text).unwrap();
        let l = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(s[0].0, "a_total");
        assert_eq!(
            s[0].1,
            [
                l("container", "main"),
                l("image", "r/i:1"),
                l("pod", "p\"q\\"),
                l("x", "a\nb")
            ]
        );
        assert_eq!(s[0].2, 16_777_216.0);
        assert_eq!(label(&s[0], "image"), Some("r/i:1"));
        assert_eq!(label(&s[0], "id"), None);
        assert_eq!(
            (s[1].0.as_str(), s[1].1.len(), s[1].2),
            ("machine_cpu_cores", 0, 2.0)
        );
        assert!(s[2].2.is_nan());
    }

    #[test]
    fn a_broken_line_is_none() {
        assert_eq!(samples("a{b=\"c} 1\n"), None);
        assert_eq!(samples("a{b=c} 1\n"), None);
        assert_eq!(samples("a 1\nb\n"), None);
        assert_eq!(samples("a x\n"), None);
    }
}
