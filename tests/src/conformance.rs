//! Reading a ginkgo run of Kubernetes' e2e suite (its JUnit report) against an
//! expected-failure list, for the conformance suite
//! (tests/tests/cluster/node_conformance.rs).

use std::collections::{BTreeMap, BTreeSet};

/// One spec's outcome in a JUnit report.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Outcome {
    Passed,
    Failed,
    Skipped,
}

/// The specs of ginkgo's JUnit report by name (without ginkgo's `[It] ` prefix), with
/// their outcome. Suite-level nodes (`[SynchronizedBeforeSuite]`, ...) are included: a
/// failed one fails the run.
pub fn parse_junit(xml: &str) -> BTreeMap<String, Outcome> {
    let mut out = BTreeMap::new();
    for case in xml.split("<testcase ").skip(1) {
        let Some(name) = case_name(case) else {
            continue;
        };
        let outcome = match attr(case, "status").unwrap_or_default().as_str() {
            "passed" => Outcome::Passed,
            "skipped" | "pending" => Outcome::Skipped,
            // failed, panicked, interrupted, timedout, aborted
            _ => Outcome::Failed,
        };
        out.insert(name, outcome);
    }
    out
}

/// Attribute `k` of the `<testcase ` element `case` starts with.
fn attr(case: &str, k: &str) -> Option<String> {
    let head = format!(" {}", &case[..case.find('>').unwrap_or(case.len())]);
    let key = format!(" {k}=\"");
    let start = head.find(&key)? + key.len();
    let len = head[start..].find('"')?;
    Some(unescape(&head[start..start + len]))
}

/// A test case's spec name, without ginkgo's `[It] ` prefix.
fn case_name(case: &str) -> Option<String> {
    let name = attr(case, "name")?;
    Some(name.strip_prefix("[It] ").unwrap_or(&name).to_string())
}

/// The failure message of each failed spec of a JUnit report (the body of its
/// `<failure>` element: ginkgo's `[FAILED]` line and where), by name as in
/// [`parse_junit`]. The CI log keeps only the run's output, not the report, so this is
/// what says why a spec failed there.
pub fn failure_messages(xml: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for case in xml.split("<testcase ").skip(1) {
        let (Some(name), Some(open)) = (case_name(case), case.find("<failure")) else {
            continue;
        };
        let body = &case[open..];
        let Some(start) = body.find('>') else {
            continue;
        };
        let body = &body[start + 1..];
        let end = body.find("</failure>").unwrap_or(body.len());
        out.insert(name, unescape(&body[..end]).trim().to_string());
    }
    out
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&apos;", "'")
        .replace("&#xA;", "\n")
        .replace("&#x9;", "\t")
        .replace("&amp;", "&")
}

/// The expected-failure list: one spec name a line, `#` comments (the why) and blank
/// lines ignored. A name after `not run: ` is a spec that is not even run (it can only
/// fail here, and only by waiting out a long timeout): it is part of the list and of
/// [`skip_regex`], not of the returned set.
pub fn parse_expected(text: &str) -> BTreeSet<String> {
    lines(text)
        .filter(|l| !l.starts_with(NOT_RUN) && !l.starts_with(KUBELET_ONLY))
        .map(str::to_string)
        .collect()
}

/// The names after `kubelet only: `: specs the real kubelet fails here (the
/// environment's doing, for it) that the crustlet must pass; expected failures of the
/// real kubelet's runs only.
pub fn parse_kubelet_only(text: &str) -> BTreeSet<String> {
    lines(text)
        .filter_map(|l| l.strip_prefix(KUBELET_ONLY))
        .map(str::to_string)
        .collect()
}

const NOT_RUN: &str = "not run: ";
const KUBELET_ONLY: &str = "kubelet only: ";

fn lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// A ginkgo `--skip` alternative matching exactly the list's `not run:` specs, if any.
pub fn skip_regex(text: &str) -> Option<String> {
    let names: Vec<String> = lines(text)
        .filter_map(|l| l.strip_prefix(NOT_RUN))
        .map(|n| {
            n.chars()
                .flat_map(|c| {
                    let special = "\\.+*?()|[]{}^$".contains(c);
                    special.then_some('\\').into_iter().chain([c])
                })
                .collect()
        })
        .collect();
    (!names.is_empty()).then(|| names.join("|"))
}

/// What a run's outcomes say against the expected-failure list: the specs that failed
/// unexpectedly, and the listed ones that passed.
pub fn judge(
    outcomes: &BTreeMap<String, Outcome>,
    expected: &BTreeSet<String>,
) -> (Vec<String>, Vec<String>) {
    let mut unexpected = vec![];
    let mut now_pass = vec![];
    for (name, o) in outcomes {
        match (o, expected.contains(name)) {
            (Outcome::Failed, false) => unexpected.push(name.clone()),
            (Outcome::Passed, true) => now_pass.push(name.clone()),
            _ => {}
        }
    }
    (unexpected, now_pass)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4" disabled="0" errors="0" failures="1" time="10">
  <testsuite name="Kubernetes e2e suite" package="/e2e" tests="4">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1"></testcase>
    <testcase name="[It] [sig-node] Pods should get a host IP [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="passed" time="3"></testcase>
    <testcase name="[It] [sig-node] Downward API should provide pod &amp; node info &quot;quoted&quot; [NodeConformance]" classname="Kubernetes e2e suite" status="failed" time="5">
      <failure message="" type="failed">[FAILED] timed out &#34;x&#34;&#xA;In [It] at: e2e/x.go:1</failure>
    </testcase>
    <testcase name="[It] [sig-node] Something [Slow]" classname="Kubernetes e2e suite" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
  </testsuite>
</testsuites>"#;

    #[test]
    fn a_ginkgo_report_gives_each_spec_its_outcome() {
        let o = parse_junit(REPORT);
        assert_eq!(o.len(), 4);
        assert_eq!(o["[SynchronizedBeforeSuite]"], Outcome::Passed);
        assert_eq!(
            o["[sig-node] Pods should get a host IP [NodeConformance] [Conformance]"],
            Outcome::Passed
        );
        assert_eq!(
            o[r#"[sig-node] Downward API should provide pod & node info "quoted" [NodeConformance]"#],
            Outcome::Failed
        );
        assert_eq!(o["[sig-node] Something [Slow]"], Outcome::Skipped);
    }

    #[test]
    fn a_failed_spec_says_why() {
        let m = failure_messages(REPORT);
        assert_eq!(m.len(), 1);
        assert_eq!(
            m[r#"[sig-node] Downward API should provide pod & node info "quoted" [NodeConformance]"#],
            "[FAILED] timed out \"x\"\nIn [It] at: e2e/x.go:1"
        );
    }

    #[test]
    fn only_listed_failures_pass_and_a_listed_spec_that_passes_fails_the_run() {
        let o = parse_junit(REPORT);
        let failing =
            r#"[sig-node] Downward API should provide pod & node info "quoted" [NodeConformance]"#;
        // Not listed: an unexpected failure.
        let (u, n) = judge(&o, &parse_expected("# nothing\n"));
        assert_eq!(u, vec![failing.to_string()]);
        assert!(n.is_empty());
        // Listed (with a comment and blank lines around it): expected.
        let (u, n) = judge(&o, &parse_expected(&format!("# why\n\n{failing}\n")));
        assert!(u.is_empty() && n.is_empty());
        // A listed spec that passed: the list must shrink.
        let passing = "[sig-node] Pods should get a host IP [NodeConformance] [Conformance]";
        let (u, n) = judge(&o, &parse_expected(&format!("{failing}\n{passing}\n")));
        assert!(u.is_empty());
        assert_eq!(n, vec![passing.to_string()]);
        // A spec not run is not expected to fail, and is skipped by its exact name.
        let list = format!("{failing}\nnot run: {passing}\n");
        let (u, n) = judge(&o, &parse_expected(&list));
        assert!(u.is_empty() && n.is_empty());
        assert_eq!(
            skip_regex(&list).unwrap(),
            r"\[sig-node\] Pods should get a host IP \[NodeConformance\] \[Conformance\]"
        );
        assert_eq!(skip_regex(failing), None);
        // A listed spec that did not run (skipped, filtered) says nothing.
        let (u, n) = judge(
            &o,
            &parse_expected(&format!("{failing}\n[sig-node] Something [Slow]\n")),
        );
        assert!(u.is_empty() && n.is_empty());
        // `kubelet only:` is not in the crustlet's list, and is in the kubelet's.
        let list = format!("kubelet only: {failing}\n");
        assert!(parse_expected(&list).is_empty());
        assert_eq!(
            parse_kubelet_only(&list).into_iter().collect::<Vec<_>>(),
            vec![failing.to_string()]
        );
        assert_eq!(skip_regex(&list), None);
    }
}
