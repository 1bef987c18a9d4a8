//! Matching a request's descriptor against a domain's tree, as envoyproxy/ratelimit does: walk
//! the entries level by level, trying at each the entry's `key_value`, then the wildcard values
//! in file order, then the bare `key` (a value-specific entry beats a key-only one); the limit
//! applies only when the last entry lands on a descriptor that has one.

use super::{Config, LimitSpec};
use crate::proto::Entry;
use ratelimit::{LimitType, Subject};
use std::sync::Arc;

/// A matched descriptor: its limit and the subject it counts under.
pub struct Matched {
    pub spec: Arc<LimitSpec>,
    pub subject: Subject<'static>,
}

/// The limit of `entries` in `domain`, if any, and its subject.
pub fn find(config: &Config, domain: &str, entries: &[Entry]) -> Option<Matched> {
    let mut node = config.domains.get(domain)?;
    // The subject: every entry's key and value (length-prefixed, so no two paths share bytes);
    // a shared wildcard counts under its pattern rather than the value.
    let mut subject = Vec::with_capacity(64);
    let mut found = None;
    let mut key_value = String::with_capacity(64);
    for (i, entry) in entries.iter().enumerate() {
        key_value.clear();
        key_value.push_str(&entry.key);
        key_value.push('_');
        key_value.push_str(&entry.value);
        let mut counted_value = entry.value.as_str();
        let mut next = node.children.get(&key_value);
        if next.is_none() {
            for (pattern, parts, shared) in &node.wildcards {
                if wildcard_match(parts, key_value.as_str()) {
                    next = node.children.get(pattern);
                    if *shared {
                        counted_value = pattern.strip_prefix(&format!("{}_", entry.key)).unwrap_or(pattern);
                    }
                    break;
                }
            }
        }
        if next.is_none() {
            next = node.children.get(&entry.key);
        }
        push(&mut subject, entry.key.as_bytes());
        push(&mut subject, counted_value.as_bytes());
        let Some(next) = next else { break };
        if i + 1 == entries.len() {
            found = next.limit.clone();
        }
        if next.children.is_empty() {
            break;
        }
        node = next;
    }
    let spec = found?;
    let last = entries.last().map_or("", |e| e.value.as_str());
    let subject = match spec.limit_type {
        LimitType::Key if spec.limiter.starts_with("rls:") => Subject::bytes(subject),
        // A limiter of the attribute's layout: the last entry's value is its subject, as the
        // attribute would key it.
        LimitType::Key | LimitType::User => Subject::bytes(last.as_bytes().to_vec()),
        LimitType::Ip => match ratelimit::subject::parse_ip(last) {
            Some(ip) => Subject::ip(ip),
            None => Subject::missing(),
        },
        LimitType::Global => Subject::global(),
    };
    Some(Matched { spec, subject })
}

fn push(out: &mut Vec<u8>, part: &[u8]) {
    out.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(part);
}

/// Whether `value` matches a pattern split on `*` (each `*` any run of characters).
fn wildcard_match(parts: &[String], value: &str) -> bool {
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else { return false };
    if parts.len() == 1 {
        return first == value;
    }
    if !value.starts_with(first.as_str()) || !value.ends_with(last.as_str()) {
        return false;
    }
    if value.len() < parts.iter().map(String::len).sum::<usize>() {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part.as_str()) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::wildcard_match;

    fn parts(p: &str) -> Vec<String> {
        p.split('*').map(str::to_owned).collect()
    }

    #[test]
    fn wildcards() {
        assert!(wildcard_match(&parts("path_/foo*"), "path_/foo/bar"));
        assert!(!wildcard_match(&parts("path_/foo*"), "path_/fo"));
        assert!(wildcard_match(&parts("path_a*b*c"), "path_a1b2c"));
        assert!(!wildcard_match(&parts("path_a*b*c"), "path_acb"));
        assert!(wildcard_match(&parts("k_v"), "k_v"));
    }
}
