//! Every section a comment or document cites exists: "DESIGN.md §N", "DESIGN.md, decision N"
//! and "docs/rsmapi.md §N" name a heading (or decision) of that file, so that a maintainer who
//! follows a citation finds what it points to.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The section numbers of a Markdown file's headings: `## 6. Progress` gives "6",
/// `### 6.1 Signals` gives "6.1".
fn sections(doc: &str) -> BTreeSet<String> {
    doc.lines()
        .filter(|l| l.starts_with('#'))
        .filter_map(|l| {
            let title = l.trim_start_matches('#').trim();
            let number: String = title
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let number = number.trim_end_matches('.').to_string();
            (!number.is_empty()).then_some(number)
        })
        .collect()
}

/// The decisions of DESIGN.md §11: "**Decision N.**".
fn decisions(doc: &str) -> BTreeSet<String> {
    doc.split("**Decision ")
        .skip(1)
        .filter_map(|rest| {
            let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
            (!n.is_empty()).then_some(n)
        })
        .collect()
}

/// Every file whose text may cite the documents: sources, tests, examples, docs.
fn citing_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = [
        "src", "tests", "examples", "benches", "cli", "fabric", "xtask", "docs",
    ]
    .iter()
    .map(|d| root().join(d))
    .collect();
    out.push(root().join("README.md"));
    out.push(root().join("DESIGN.md"));
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "target") {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "rs" || x == "md") {
                out.push(p);
            }
        }
    }
    out
}

/// The section numbers cited after `marker` (such as "DESIGN.md §"), with any that follow as
/// "§6, §8" or "§4.4, §4.10".
fn cited_sections(text: &str, marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices(marker) {
        let mut rest = &text[i + marker.len()..];
        loop {
            let n: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let n = n.trim_end_matches('.').to_string();
            if n.is_empty() {
                break;
            }
            rest = &rest[n.len()..];
            out.push(n);
            let next = rest.trim_start_matches(['.', ',', ' ', '\n', '/', '!']);
            match next.strip_prefix('§') {
                Some(r) => rest = r,
                None => break,
            }
        }
    }
    out
}

/// The decision numbers cited as "DESIGN.md, decision 4" or "DESIGN.md, decisions 10, 12
/// and 15".
fn cited_decisions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("DESIGN.md, decision") {
        let rest = text[i + "DESIGN.md, decision".len()..].trim_start_matches('s');
        let list: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || matches!(c, ' ' | ',' | 'a' | 'n' | 'd'))
            .collect();
        out.extend(
            list.split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .map(String::from),
        );
    }
    out
}

#[test]
fn every_cited_section_and_decision_exists() {
    let design = fs::read_to_string(root().join("DESIGN.md")).expect("DESIGN.md exists");
    let rsmapi = fs::read_to_string(root().join("docs/rsmapi.md")).expect("docs/rsmapi.md exists");
    let design_sections = sections(&design);
    let rsmapi_sections = sections(&rsmapi);
    let design_decisions = decisions(&design);
    let numbered: BTreeSet<String> = (1..=design_decisions.len())
        .map(|n| n.to_string())
        .collect();
    assert!(
        design_decisions.len() >= 21 && design_decisions == numbered,
        "DESIGN.md §11 numbers its decisions 1 to N, without gaps: {design_decisions:?}"
    );
    let mut missing = Vec::new();
    for file in citing_files() {
        let Ok(text) = fs::read_to_string(&file) else {
            continue;
        };
        let name = file
            .strip_prefix(root())
            .unwrap_or(&file)
            .display()
            .to_string();
        for n in cited_sections(&text, "DESIGN.md §") {
            if !design_sections.contains(&n) {
                missing.push(format!("{name}: DESIGN.md §{n}"));
            }
        }
        for n in cited_sections(&text, "docs/rsmapi.md §") {
            if !rsmapi_sections.contains(&n) {
                missing.push(format!("{name}: docs/rsmapi.md §{n}"));
            }
        }
        for n in cited_decisions(&text) {
            if !design_decisions.contains(&n) {
                missing.push(format!("{name}: DESIGN.md, decision {n}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "citations of sections that do not exist: {missing:#?}"
    );
}

#[test]
fn the_citation_reader_reads_lists() {
    assert_eq!(
        cited_sections("see DESIGN.md §7, §8 and DESIGN.md §6.1.", "DESIGN.md §"),
        ["7", "8", "6.1"]
    );
    assert_eq!(
        cited_decisions("(DESIGN.md, decisions 10, 12 and 15) and DESIGN.md, decision 4."),
        ["10", "12", "15", "4"]
    );
    assert_eq!(
        sections("## 6. Progress\n### 6.1 Signals\n# Title\n"),
        BTreeSet::from(["6".into(), "6.1".into()])
    );
}
