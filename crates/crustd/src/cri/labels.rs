//! Labels and annotations between the records and the CRI: a record keeps them in a
//! `BTreeMap`, so its JSON on disk has one order and two records diff cleanly, while the
//! CRI messages carry protobuf maps (`HashMap`); and the List RPCs' `label_selector`,
//! which every status and stats list applies the same way.

use std::collections::{BTreeMap, HashMap};

/// A record's labels or annotations as a CRI message carries them.
pub fn to_cri(m: &BTreeMap<String, String>) -> HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// Whether `labels` has every pair of a List filter's `label_selector`: the CRI's
/// selector is equality only, and an empty one selects everything.
pub fn selected(selector: &HashMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map<M: FromIterator<(String, String)>>(pairs: &[(&str, &str)]) -> M {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selector_wants_every_pair() {
        let labels: BTreeMap<_, _> = map(&[("app", "web"), ("tier", "front")]);
        for (selector, want) in [
            (vec![], true),
            (vec![("app", "web")], true),
            (vec![("app", "web"), ("tier", "front")], true),
            (vec![("app", "db")], false),
            (vec![("app", "web"), ("zone", "a")], false),
            (vec![("app", "")], false),
        ] {
            let s: HashMap<_, _> = map(&selector);
            assert_eq!(selected(&s, &labels), want, "{selector:?}");
        }
    }

    #[test]
    fn to_cri_keeps_every_pair() {
        let labels: BTreeMap<_, _> = map(&[("a", "1"), ("b", "")]);
        assert_eq!(
            to_cri(&labels),
            map::<HashMap<_, _>>(&[("a", "1"), ("b", "")])
        );
    }
}
