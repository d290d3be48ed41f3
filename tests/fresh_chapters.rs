//! A chapter's page says how to write its program in a project of your own:
//! `cargo new`, then the page's `cargo add` line. This builds each chapter
//! that way, from the line as the page prints it, so a page whose line lacks
//! a crate or a feature (or pins one that no longer fits) fails here.
//!
//! It needs the crates that line names, from crates.io: so it is #[ignore]d
//! with that reason, and `make test` (cluster/test.sh) runs it. Built into
//! target/fresh-chapters, so a second run is warm.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The one line of `page` that starts with `cargo add `, its words after
/// `cargo`.
fn cargo_add_line(page: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join(page)).unwrap_or_else(|e| panic!("read {page}: {e}"));
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("cargo add ")).collect();
    assert_eq!(lines.len(), 1, "{page} should show one `cargo add` line: {lines:#?}");
    lines[0].split_whitespace().skip(1).map(String::from).collect()
}

/// Runs cargo in `dir` with `args`, building into target/fresh-chapters/target; panics with its output if it fails.
fn cargo(dir: &Path, args: &[String]) {
    let target = repo().join("target/fresh-chapters/target");
    let out = Command::new(env!("CARGO"))
        .args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap_or_else(|e| panic!("run cargo {args:?}: {e}"));
    assert!(
        out.status.success(),
        "cargo {args:?} in {} failed ({}):\n{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `cargo new NAME`, the page's `cargo add` line, the chapter's file as
/// src/main.rs, then `cargo check --all-targets` (its unit tests too).
fn builds_from_its_page(page: &str, example: &str, name: &str) {
    let base = repo().join("target/fresh-chapters");
    let project = base.join(name);
    // A project made under this repository would join its workspace (cargo
    // new adds it to the members of the nearest workspace above it): a
    // workspace of its own, with nothing else in it, keeps the repository's
    // Cargo.toml untouched and the project as fresh as `cargo new` makes it.
    if project.exists() {
        std::fs::remove_dir_all(&project).unwrap_or_else(|e| panic!("remove {}: {e}", project.display()));
    }
    std::fs::create_dir_all(&base).unwrap_or_else(|e| panic!("make {}: {e}", base.display()));
    let members = base.join("Cargo.toml");
    std::fs::write(&members, "[workspace]\nresolver = \"3\"\n").unwrap_or_else(|e| panic!("write {members:?}: {e}"));
    let _ = std::fs::remove_file(base.join("Cargo.lock")); // the newest versions the line allows, every run
    cargo(&base, &["new".into(), "--vcs".into(), "none".into(), name.into()]);
    cargo(&project, &cargo_add_line(page));
    let main = project.join("src/main.rs");
    std::fs::copy(repo().join(example), &main).unwrap_or_else(|e| panic!("copy {example} to {main:?}: {e}"));
    cargo(&project, &["check".into(), "--all-targets".into()]);
}

/// Each chapter whose page shows a `cargo add` line: the page, and the
/// program a reader puts in src/main.rs.
const CHAPTERS: [(&str, &str, &str); 5] = [
    ("book/src/ch1-watch.md", "examples/ch1_watch.rs", "ch1"),
    ("book/src/ch2-cache.md", "examples/ch2_cache.rs", "ch2"),
    ("book/src/ch3-queue.md", "examples/ch3_queue.rs", "ch3"),
    ("book/src/ch4-controller.md", "examples/ch4_controller.rs", "ch4"),
    ("book/src/ch8-secret-copier.md", "examples/ch8_secret_copier.rs", "ch8"),
];

#[test]
fn every_cargo_add_line_pins_a_version_of_each_crate() {
    for (page, _, _) in CHAPTERS {
        let words = cargo_add_line(page);
        let crates: Vec<&String> = words.iter().skip(1).take_while(|w| !w.starts_with('-')).collect();
        assert!(!crates.is_empty(), "{page}: {words:?}");
        for c in crates {
            assert!(c.contains('@'), "{page}: `{c}` in its cargo add line pins no version: {words:?}");
        }
    }
}

/// One test, the chapters one after another: they share the workspace in
/// target/fresh-chapters, which each `cargo new` edits.
#[test]
#[ignore = "needs the network (crates.io) for a fresh project's cargo add: run `make test`"]
fn every_chapter_builds_from_its_pages_cargo_add_line_in_a_fresh_project() {
    for (page, example, name) in CHAPTERS {
        builds_from_its_page(page, example, name);
    }
}
