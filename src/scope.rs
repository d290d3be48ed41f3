//! What a leader's mark was written for, and whether the Lease's release
//! stamp came from its holder. A mark says which pod changes were logged;
//! it means something only to a replica that watches the same pods (the
//! same `-n` and `-l`). And a release stamp lets the next replica take the
//! Lease at once, so it must be one that the last holder wrote on this very
//! Lease, not one restored from a backup or typed by hand.

use serde::{Deserialize, Serialize};

/// The annotation beside the mark that says what it was written for: the
/// format of this record, the namespace (`-n`, none for all) and the label
/// selector (`-l`, normalised by [`normalised`]). A holder writes it with
/// every write of the Lease.
pub const SCOPE: &str = "demo-controller.example.com/mark-scope";

/// The format of the [`SCOPE`] record written here. A record of another
/// format is not understood, so its mark is not followed.
pub const FORMAT: u32 = 1;

/// What a replica watches: the pods its marks speak of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scope {
    pub format: u32,
    pub namespace: Option<String>,
    pub selector: Option<String>,
}

impl Scope {
    /// The scope of `-n namespace` and `-l selector` (None: all, none).
    pub fn new(namespace: Option<&str>, selector: Option<&str>) -> Scope {
        let selector = selector.map(normalised).filter(|s| !s.is_empty());
        Scope { format: FORMAT, namespace: namespace.map(str::to_string), selector }
    }

    /// The annotation's value.
    pub fn record(&self) -> String {
        // A struct of strings and a number: serializing cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// How the flags that made it read, for a log line.
    pub fn flags(&self) -> String {
        let namespace = self.namespace.as_ref().map_or("all namespaces".into(), |ns| format!("-n {ns}"));
        let selector = self.selector.as_ref().map_or("no -l".into(), |s| format!("-l '{s}'"));
        format!("{namespace}, {selector}")
    }
}

/// How the scope a Lease's mark was written for compares with ours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Compared {
    /// The same pods: the mark is ours to follow.
    Same,
    /// No record: an older demo-controller wrote the mark (or a hand edit
    /// left it alone).
    Unknown,
    /// Another scope, or a record we cannot read: how it reads.
    Other(String),
}

/// Compares the [`SCOPE`] record on a Lease (`written`, None if absent)
/// with `ours`.
pub fn compare(written: Option<&str>, ours: &Scope) -> Compared {
    let Some(written) = written else { return Compared::Unknown };
    match serde_json::from_str::<Scope>(written) {
        Ok(theirs) if theirs.format != FORMAT => Compared::Other(format!("a record of format {}", theirs.format)),
        Ok(theirs) => {
            // Normalised again: the same selector is the same scope however
            // it was written.
            let theirs = Scope::new(theirs.namespace.as_deref(), theirs.selector.as_deref());
            if theirs == *ours { Compared::Same } else { Compared::Other(theirs.flags()) }
        }
        Err(_) => Compared::Other(format!("an unreadable record {written:?}")),
    }
}

/// A label selector written one way: terms sorted and without duplicates,
/// no spaces but the one after a set's key and operator, `==` as `=`, a
/// set's values sorted. `tier!=db, app = web` and `app=web,tier!=db` are the
/// same selector, and so are `env in (b, a)` and `env in (a,b)`.
pub fn normalised(selector: &str) -> String {
    let mut terms: Vec<String> = split_terms(selector)
        .into_iter()
        .map(|term| match term.split_once('(') {
            Some((head, values)) => {
                let head = head.split_whitespace().collect::<Vec<_>>().join(" ");
                let mut values: Vec<&str> =
                    values.trim_end_matches(')').split(',').map(str::trim).filter(|v| !v.is_empty()).collect();
                values.sort_unstable();
                values.dedup();
                format!("{head} ({})", values.join(","))
            }
            None => term.split_whitespace().collect::<String>().replace("==", "="),
        })
        .filter(|term| !term.is_empty())
        .collect();
    terms.sort_unstable();
    terms.dedup();
    terms.join(",")
}

/// The selector's terms: split at the commas outside parentheses.
fn split_terms(selector: &str) -> Vec<&str> {
    let (mut terms, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(selector[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(selector[start..].trim());
    terms
}

/// The release stamp's value: who released the Lease, and which Lease
/// object it was (its uid, which the API server gives each object when it
/// is created: a copy restored from a backup is a new object).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub holder: String,
    pub uid: String,
}

impl Stamp {
    /// The stamp on a Lease, if there is one we can read (an older
    /// demo-controller's `"true"` is none: it named no holder).
    pub fn read(value: &str) -> Option<Stamp> {
        serde_json::from_str(value).ok()
    }

    /// The annotation's value.
    pub fn record(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_selector_written_differently_is_the_same_scope() {
        assert_eq!(normalised("tier!=db, app = web"), "app=web,tier!=db");
        assert_eq!(normalised("app==web,tier!=db"), "app=web,tier!=db");
        assert_eq!(normalised("env in (b, a),app"), "app,env in (a,b)");
        assert_eq!(normalised("env  notin(a,a,c)"), "env notin (a,c)");
        assert_eq!(normalised("!canary, app=web, app=web"), "!canary,app=web");
        let ours = Scope::new(Some("shop"), Some("app=web,tier!=db"));
        let written = Scope::new(Some("shop"), Some("tier!=db,app=web")).record();
        assert_eq!(compare(Some(&written), &ours), Compared::Same);
    }

    #[test]
    fn another_namespace_selector_or_format_is_another_scope() {
        let ours = Scope::new(None, Some("app in (a,b)"));
        let narrower = Scope::new(None, Some("app=a")).record();
        assert_eq!(compare(Some(&narrower), &ours), Compared::Other("all namespaces, -l 'app=a'".into()));
        let namespaced = Scope::new(Some("shop"), Some("app in (b,a)")).record();
        assert_eq!(compare(Some(&namespaced), &ours), Compared::Other("-n shop, -l 'app in (a,b)'".into()));
        let unselected = Scope::new(None, None);
        assert_eq!(compare(Some(&unselected.record()), &ours), Compared::Other("all namespaces, no -l".into()));
        let future = r#"{"format":2,"namespace":null,"selector":"app in (a,b)"}"#;
        assert_eq!(compare(Some(future), &ours), Compared::Other("a record of format 2".into()));
        assert!(matches!(compare(Some("app=a"), &ours), Compared::Other(_)));
        assert_eq!(compare(None, &ours), Compared::Unknown, "an older demo-controller's mark");
    }

    #[test]
    fn a_stamp_names_its_holder_and_its_lease() {
        let stamp = Stamp { holder: "pod-a_1234abcd".into(), uid: "6f1c".into() };
        assert_eq!(Stamp::read(&stamp.record()), Some(stamp));
        assert_eq!(Stamp::read("true"), None, "an older demo-controller's stamp names no holder");
    }
}
