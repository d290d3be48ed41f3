//! Reading a `--selector` the way the API server does, so the logger can tell
//! a pod that left the selector from a pod that was deleted.
//!
//! Why we need it: when a pod's labels change so that it no longer matches
//! the watch's label selector, the API server sends a DELETED event, exactly
//! as for a deletion. The object in that event is the pod *after* the change
//! (its new labels, no deletionTimestamp): matching those labels against the
//! selector is how we tell "relabelled out" from "deleted".
//!
//! The API server owns the grammar and has already accepted the selector at
//! start-up (client::check_selector), so this parser only has to read valid
//! selectors: `k`, `!k`, `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`.
//! It returns `None` for what it does not read (`k>1`, `k<1`); the logger then
//! simply gives no reason.

use std::collections::BTreeSet;

use kube::core::labels::{Expression, Selector};

/// Parses a label selector such as `app=web,tier!=db,env in (prod,staging)`.
pub fn parse(text: &str) -> Option<Selector> {
    let mut expressions = Vec::new();
    for requirement in split_top_level(text) {
        expressions.push(requirement_of(requirement.trim())?);
    }
    Some(expressions.into_iter().collect())
}

/// Splits on the commas that separate requirements, not those inside `( )`.
fn split_top_level(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0u32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

fn requirement_of(req: &str) -> Option<Expression> {
    let set = |list: &str| -> Option<BTreeSet<String>> {
        let inner = list.trim().strip_prefix('(')?.strip_suffix(')')?;
        Some(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
    };
    if let Some((key, values)) = req.split_once(" notin ") {
        return Some(Expression::NotIn(key.trim().into(), set(values)?));
    }
    if let Some((key, values)) = req.split_once(" in ") {
        return Some(Expression::In(key.trim().into(), set(values)?));
    }
    if let Some((key, value)) = req.split_once("!=") {
        return Some(Expression::NotEqual(key.trim().into(), value.trim().into()));
    }
    if let Some((key, value)) = req.split_once("==").or_else(|| req.split_once('=')) {
        return Some(Expression::Equal(key.trim().into(), value.trim().into()));
    }
    if req.contains(['<', '>', '(', ')', ' ']) {
        return None;
    }
    match req.strip_prefix('!') {
        Some(key) => Some(Expression::DoesNotExist(key.trim().into())),
        None => Some(Expression::Exists(req.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::labels::SelectorExt;
    use std::collections::BTreeMap;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn reads_every_operator_the_api_server_documents() {
        let s = parse("app=web, tier!=db,env in (prod, staging),!legacy,team,zone notin (a),x==1").unwrap();
        let good = labels(&[("app", "web"), ("env", "prod"), ("team", "t"), ("zone", "b"), ("x", "1")]);
        assert!(s.matches(&good));
        for (k, v) in [("app", "api"), ("tier", "db"), ("env", "dev"), ("legacy", "y"), ("zone", "a"), ("x", "2")] {
            let mut bad = good.clone();
            bad.insert(k.into(), v.into());
            assert!(!s.matches(&bad), "{k}={v} should not match");
        }
        let mut no_team = good.clone();
        no_team.remove("team");
        assert!(!s.matches(&no_team));
    }

    #[test]
    fn what_it_cannot_read_gives_no_selector() {
        assert!(parse("replicas>1").is_none());
        assert!(parse("app in prod").is_none());
    }
}
