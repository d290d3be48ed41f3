//! results.json: the same run as results.md, machine-readable, so that every
//! figure the README, the book and the manifest quote is generated from it
//! and checked against it (tests/figures.rs in demo-controller).
//!
//! It is read back from results.md's own tables rather than built beside
//! them: one rendering of each number (rounded as the table shows it), so a
//! figure quoted from results.json is the figure a reader finds in
//! results.md. `bench --record-from bench/results.md` writes it for a
//! results.md from before the harness wrote both.

use serde_json::{Map, Value, json};

/// The markdown table rows under the heading `## {section}`, each row's cells
/// trimmed; the header and separator rows left out.
fn table_rows<'a>(md: &'a str, section: &str) -> Vec<Vec<&'a str>> {
    let Some(start) = md.find(&format!("\n## {section}\n")) else { return Vec::new() };
    let body = &md[start + section.len() + 5..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    body.lines()
        .filter(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| l.trim().trim_matches('|').split('|').map(str::trim).collect())
        .collect()
}

/// The header row's cells of the first table under `## {section}`.
fn table_header<'a>(md: &'a str, section: &str) -> Vec<&'a str> {
    let Some(start) = md.find(&format!("\n## {section}\n")) else { return Vec::new() };
    let body = &md[start..];
    body.lines()
        .find(|l| l.starts_with('|'))
        .map(|l| l.trim().trim_matches('|').split('|').map(str::trim).collect())
        .unwrap_or_default()
}

/// "12,345" -> 12345; "0.24" -> 0.24; "n/a" or "" -> null. A number
/// written without a point stays a whole number.
fn number(cell: &str) -> Value {
    let cell = cell.replace(',', "");
    match cell.parse::<i64>() {
        Ok(whole) => Value::from(whole),
        Err(_) => cell.parse::<f64>().map_or(Value::Null, Value::from),
    }
}

/// results.md (as `report::markdown` writes it) to results.json.
pub fn from_markdown(md: &str) -> Value {
    let mut facts = Map::new();
    for line in md.lines().take_while(|l| !l.starts_with("## ")) {
        if let Some((key, value)) = line.strip_prefix("- ").and_then(|l| l.split_once(": ")) {
            facts.insert(key.to_string(), Value::from(value));
        }
    }
    let peers = table_header(md, "Loggers");
    let loggers: Vec<Value> = table_rows(md, "Loggers")
        .into_iter()
        .map(|row| {
            let values: Map<String, Value> =
                peers.iter().zip(&row).skip(2).map(|(peer, cell)| (peer.to_string(), number(cell))).collect();
            json!({ "n": number(row[0]), "metric": row[1].trim(), "values": values })
        })
        .collect();
    let columns = table_header(md, "Floors");
    let floors: Vec<Value> = table_rows(md, "Floors")
        .into_iter()
        .map(|row| {
            let values: Map<String, Value> = columns
                .iter()
                .zip(&row)
                .skip(2)
                .filter(|(_, cell)| !cell.is_empty())
                .map(|(column, cell)| (column.to_string(), number(cell)))
                .collect();
            json!({ "n": number(row[0]), "floor": row[1], "values": values })
        })
        .collect();
    let two_replicas: Vec<Value> = table_rows(md, "Two replicas")
        .into_iter()
        .map(|row| {
            json!({ "n": number(row[0]), "metric": row[1].trim(), "leader": number(row[2]), "standby": number(row[3]) })
        })
        .collect();
    let targets_at = md
        .split("Checked at N = ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| c != ',' && !c.is_ascii_digit()).next())
        .map_or(Value::Null, number);
    let targets: Vec<Value> = table_rows(md, "Targets")
        .into_iter()
        .map(|row| json!({ "target": row[0], "measured": row[1], "met": row[2].trim_matches('*') }))
        .collect();
    json!({
        "written_by": "bench/harness (make bench), read back from results.md",
        "facts": facts,
        "loggers": loggers,
        "floors": floors,
        "two_replicas": two_replicas,
        "targets_at": targets_at,
        "targets": targets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_every_table_of_results_md() {
        let md = "# Benchmark\n\n- started: 2026-11-24 09:19 UTC\n- commit: abc\n\n## Loggers\n\n\
                  | N | metric | a | b |\n|---:|---|---:|---:|\n| 1,000 | time (ms) | 88 | n/a |\n\
                  | 1,000 |   / floor (x) | 1.02 | 0.63 |\n\n## Floors\n\n\
                  | N | floor | time (ms) | CPU (ms) |\n|---:|---|---:|---:|\n| 10,000 | floor: bare | 698 | |\n\n\
                  ## Two replicas\n\n| N | metric | leader | standby |\n|---:|---|---:|---:|\n\
                  | 10,000 | steady RSS (MiB) | 46.1 | 45.0 |\n\n\
                  ## Targets\n\nChecked at N = 10,000. demo-controller means ...\n\n| target | measured | met |\n\
                  |---|---:|:---:|\n| RSS <= 0.4x | 0.24x | met |\n| CPU <= 1x | 2.12x | **missed** |\n\n## How to read it\n";
        let v = from_markdown(md);
        assert_eq!(v["facts"]["commit"], "abc");
        assert_eq!(v["loggers"][0], json!({ "n": 1000, "metric": "time (ms)", "values": { "a": 88, "b": null } }));
        assert_eq!(v["loggers"][1]["metric"], "/ floor (x)");
        assert_eq!(v["floors"][0], json!({ "n": 10000, "floor": "floor: bare", "values": { "time (ms)": 698 } }));
        assert_eq!(
            v["two_replicas"][0],
            json!({ "n": 10000, "metric": "steady RSS (MiB)", "leader": 46.1, "standby": 45.0 })
        );
        assert_eq!(v["targets_at"], 10000);
        assert_eq!(v["targets"][1], json!({ "target": "CPU <= 1x", "measured": "2.12x", "met": "missed" }));
    }
}
