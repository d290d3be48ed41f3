//! The text a line is made of: every text that comes from the server (or
//! from whatever stands between it and us) is made safe here before it
//! reaches a log line.
//!
//! Text in a status comes from others: a container's termination message is
//! whatever the program wrote, a megabyte or an escape sequence included. It
//! is made safe once, when the pod is parsed ([`Text`], [`Word`]), so that the
//! cache never holds more than a line's worth and no line ever breaks. Names,
//! namespaces and error bodies go through [`cleaned`] where they are printed.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex};

use serde::{Deserialize, Deserializer};

/// A message is cut after this many characters (escapes included). kubelet's
/// own messages fit; a program's stack trace does not need to.
pub const MESSAGE_CHARS: usize = 200;
/// A reason or a name is cut after this many. Reasons are CamelCase words
/// (`CreateContainerConfigError`, the longest common one, has 26 letters) and
/// container names are at most 63 by validation.
pub const WORD_CHARS: usize = 64;
/// How many distinct words are shared at most (see [`Word`]).
const SHARED_WORDS: usize = 4096;

/// A short text that repeats across pods: a reason (`CrashLoopBackOff`) or a
/// container name (`app`). Ten thousand pods with an `app` container share one
/// `app`: each holds a pointer to it (16 bytes), not a copy of its own (an
/// allocation of 32 bytes at least, for 3 letters).
///
/// The table of shared words only grows, so it is capped: past
/// [`SHARED_WORDS`] distinct words (only a hostile cluster has that many
/// reasons) a new word is a plain allocation of its own.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Word(Arc<str>);

impl Word {
    pub fn new(raw: &str) -> Word {
        static SHARED: LazyLock<Mutex<HashSet<Arc<str>>>> = LazyLock::new(Default::default);
        let cleaned;
        let text = if needs_cleaning(raw, WORD_CHARS) {
            cleaned = clean(raw, WORD_CHARS);
            cleaned.as_str()
        } else {
            raw
        };
        Word(share(&SHARED, text, SHARED_WORDS))
    }
}

/// How many distinct names are shared at most (see [`shared_name`]).
const SHARED_NAMES: usize = 16_384;

/// A namespace or a node name, shared by every pod that has it: the store
/// holds one `default` for all the pods of `default`, not one each. Unlike a
/// [`Word`] it is kept exactly as the server sent it (a key is looked up by
/// it); what is shown of it is cleaned where it is printed. Past
/// [`SHARED_NAMES`] distinct names, a new one is a plain allocation.
pub fn shared_name(raw: &str) -> Arc<str> {
    static SHARED: LazyLock<Mutex<HashSet<Arc<str>>>> = LazyLock::new(Default::default);
    share(&SHARED, raw, SHARED_NAMES)
}

/// The copy of `text` in `table`, added while the table has fewer than `cap`.
fn share(table: &Mutex<HashSet<Arc<str>>>, text: &str, cap: usize) -> Arc<str> {
    // Held for a lookup only; pods are parsed mostly by the watcher's one
    // task, so it is rarely contended.
    let mut shared = table.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(known) = shared.get(text) {
        return known.clone();
    }
    let new: Arc<str> = Arc::from(text);
    if shared.len() < cap {
        shared.insert(new.clone());
    }
    new
}

impl Default for Word {
    fn default() -> Word {
        Word::new("")
    }
}

/// A message: owned (they name the pod, so no two are alike), cut and escaped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Text(Box<str>);

impl Text {
    pub fn new(raw: &str) -> Text {
        Text(clean(raw, MESSAGE_CHARS).into_boxed_str())
    }
}

impl std::ops::Deref for Word {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Word {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Both are parsed from a borrowed `&str` when the JSON allows it (no escapes
/// in the string): a 1 MB message is read in place and only its first
/// [`MESSAGE_CHARS`] are copied.
struct StrVisitor<T>(fn(&str) -> T);

impl<T> serde::de::Visitor<'_> for StrVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
        Ok((self.0)(v))
    }
}

impl<'de> Deserialize<'de> for Word {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Word, D::Error> {
        deserializer.deserialize_str(StrVisitor(Word::new))
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Text, D::Error> {
        deserializer.deserialize_str(StrVisitor(Text::new))
    }
}

/// A name, a namespace, a node or a label is cut after this many characters:
/// the longest the API server accepts (a DNS subdomain, 253), so a real one
/// is never cut; only a proxy or a broken server can send longer.
pub const NAME_CHARS: usize = 253;

/// Characters that would break a line or fool a reader: control characters
/// (newline, carriage return, escape...), the Unicode line separators, the
/// bidirectional marks and overrides that make text display in another order
/// than it is (U+061C, the Arabic letter mark, among them), and the
/// zero-width characters that make two different texts look the same
/// (U+200B..U+200D, the word joiner U+2060, the byte-order mark U+FEFF).
fn hostile(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'
                | '\u{2066}'..='\u{2069}'
                | '\u{feff}'
        )
}

fn needs_cleaning(raw: &str, max_chars: usize) -> bool {
    raw.len() > max_chars || raw.chars().any(hostile)
}

/// The one cleaning of text that comes from the server, or from whatever
/// stands between it and us (a proxy's error page, a Content-Type): `raw` as
/// is when it is already fit for a line, else [`clean`]ed. Every such text
/// goes through here (or through [`Word`] and [`Text`], which call [`clean`])
/// before it reaches a log line: names and namespaces, the phase, the node,
/// labels, reasons and messages, error bodies.
pub fn cleaned(raw: &str, max_chars: usize) -> std::borrow::Cow<'_, str> {
    if needs_cleaning(raw, max_chars) { std::borrow::Cow::Owned(clean(raw, max_chars)) } else { raw.into() }
}

/// `raw` made fit for one line: each hostile character written as its Rust
/// escape (`\n`, `\u{1b}`), and everything past `max_chars` characters of the
/// result cut, with a marker that says so and how long the original was:
/// `...first 200 characters…(cut, 1048576 bytes)`.
pub fn clean(raw: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(raw.len().min(max_chars + 32));
    let mut chars = 0;
    for c in raw.chars() {
        let escaped = if hostile(c) { Some(c.escape_default()) } else { None };
        let width = escaped.as_ref().map_or(1, |e| e.len());
        if chars + width > max_chars {
            out.push_str(&format!("…(cut, {} bytes)", raw.len()));
            return out;
        }
        match escaped {
            Some(e) => out.extend(e),
            None => out.push(c),
        }
        chars += width;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_is_escaped_and_cut() {
        assert_eq!(clean("back-off 10s", MESSAGE_CHARS), "back-off 10s");
        assert_eq!(clean("a\nb\r\tc\u{1b}[31mred\u{7f}", 100), r"a\nb\r\tc\u{1b}[31mred\u{7f}");
        assert_eq!(clean("evil\u{202e}txt.exe\u{2028}", 100), r"evil\u{202e}txt.exe\u{2028}");
        assert_eq!(clean("ééééé", 3), "ééé…(cut, 10 bytes)", "cut on characters, not bytes");
        assert_eq!(clean("ab\ncd", 3), r"ab…(cut, 5 bytes)", "an escape is never cut in half");
        assert!(!clean("a\u{2060}b\u{feff}", 100).chars().any(hostile));
    }

    #[test]
    fn a_hostile_word_is_cut_shorter_and_a_word_is_shared() {
        let reason = Word::new(&"Reason".repeat(100));
        assert!(reason.ends_with("…(cut, 600 bytes)") && reason.chars().count() < WORD_CHARS + 20, "{reason}");
        assert!(Arc::ptr_eq(&Word::new("app").0, &Word::new("app").0));
    }
}
