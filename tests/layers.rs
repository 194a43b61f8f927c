//! The library's layering rules, checked on its source (DESIGN.md §2): no two files import
//! each other, directly or through others; no library file is over 800 lines; a module
//! with children is `x.rs` beside `x/`, never `x/mod.rs`.
//!
//! A file depends on another when it names an item the other defines: a `use` of it, or a
//! `crate::`, `super::` or `self::` path in code. A name a module re-exports is followed to the
//! file that defines it, so the crate root and module files can gather the public API without
//! tying every file to every other. Declaring a child module (`mod x;`) is not a dependency.
//! Comments are not read; inline modules (`mod tests { .. }`) resolve their paths from where
//! they stand.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

/// The most lines a library source file may have.
const MAX_LINES: usize = 800;

/// Where a re-export of another crate's item leads: outside the library.
const EXTERNAL: &str = "<extern>";

/// A module path from the crate root, such as `["reactor", "slot"]`.
type ModPath = Vec<String>;

/// One source file: its module path, its text without comments, and its `use` declarations.
struct SourceFile {
    rel: String,
    module: ModPath,
    code: String,
    lines: usize,
}

fn library_files(src: &Path) -> Vec<SourceFile> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<PathBuf> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                let text = fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
                let rel = path
                    .strip_prefix(src)
                    .expect("below src")
                    .to_string_lossy()
                    .replace('\\', "/");
                out.push(SourceFile {
                    module: module_of(&rel),
                    code: strip_comments(&text),
                    lines: text.lines().count(),
                    rel,
                });
            }
        }
    }
    out
}

/// `lib.rs` → `[]`, `a/mod.rs` → `["a"]`, `a/b.rs` → `["a", "b"]`.
fn module_of(rel: &str) -> ModPath {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// The text with line and block comments and string literals blanked (line breaks kept).
fn strip_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i < b.len() && !b[i..].starts_with(b"*/") {
                if b[i] == b'\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' {
            // A string literal (raw strings here hold no paths worth reading).
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                } else if b[i] == b'\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') {
            // A char literal such as '"' or '\n'; lifetimes are left alone.
            let end = b[i + 1..]
                .iter()
                .position(|&c| c == b'\'')
                .map_or(b.len(), |p| i + 2 + p);
            i = end;
            out.push_str("' '");
        } else {
            let ch = text[i..].chars().next().expect("in bounds");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// A path as written and the module it was written in.
struct Reference {
    from: ModPath,
    path: Vec<String>,
}

/// The paths a file names, each with the (inline) module it stands in; and its re-exports:
/// name → full path, for `use` declarations at the file's top level.
fn references(
    file: &SourceFile,
    modules: &BTreeSet<ModPath>,
) -> (Vec<Reference>, Vec<(String, Vec<String>)>) {
    let code = &file.code;
    let bytes = code.as_bytes();
    let mut refs = Vec::new();
    let mut exports = Vec::new();
    // Inline modules open at a brace depth: (depth, name); and where a test module opened.
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut in_test: Option<usize> = None;
    let mut depth = 0usize;
    let mut i = 0;
    let current = |inline: &Vec<(usize, String)>| {
        let mut m = file.module.clone();
        m.extend(inline.iter().map(|(_, n)| n.clone()));
        m
    };
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'{' {
            depth += 1;
            i += 1;
            continue;
        }
        if c == b'}' {
            depth = depth.saturating_sub(1);
            while inline.last().is_some_and(|(d, _)| *d > depth) {
                inline.pop();
            }
            if in_test.is_some_and(|d| d > depth) {
                in_test = None;
            }
            i += 1;
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == b'_') {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        let word = &code[start..i];
        let boundary =
            start == 0 || !(bytes[start - 1] == b':' || bytes[start - 1].is_ascii_alphanumeric());
        if !boundary {
            continue;
        }
        match word {
            "mod" => {
                let rest = &code[i..];
                let name: String = rest
                    .trim_start()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let after = rest.trim_start()[name.len()..].trim_start();
                if !name.is_empty() && after.starts_with('{') {
                    if in_test.is_none() && is_test_only(&code[..start]) {
                        in_test = Some(depth + 1);
                    }
                    inline.push((depth + 1, name));
                }
            }
            _ if in_test.is_some() => {}
            "use" => {
                let end = code[i..].find(';').map_or(code.len(), |p| i + p);
                let tree = &code[i..end];
                let here = current(&inline);
                let top_level = inline.is_empty() && depth == 0;
                for (path, alias) in expand_use_tree(tree) {
                    let Some(first) = path.first() else { continue };
                    let is_local = matches!(first.as_str(), "crate" | "super" | "self") || {
                        let mut child = here.clone();
                        child.push(first.clone());
                        modules.contains(&child)
                    };
                    if !is_local {
                        // A name for another crate's item: paths through it leave the library.
                        if top_level && alias != "*" {
                            exports.push((alias, vec![EXTERNAL.to_string()]));
                        }
                        continue;
                    }
                    let path = if matches!(first.as_str(), "crate" | "super" | "self") {
                        path
                    } else {
                        std::iter::once("self".to_string()).chain(path).collect()
                    };
                    if top_level && alias != "*" {
                        exports.push((alias, absolute(&here, &path)));
                    }
                    refs.push(Reference {
                        from: here.clone(),
                        path,
                    });
                }
                i = end;
            }
            "crate" | "super" | "self" if code[i..].starts_with("::") => {
                let mut path = vec![word.to_string()];
                let mut j = i;
                while code[j..].starts_with("::") {
                    let seg: String = code[j + 2..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if seg.is_empty() {
                        break;
                    }
                    j += 2 + seg.len();
                    path.push(seg);
                }
                i = j;
                refs.push(Reference {
                    from: current(&inline),
                    path,
                });
            }
            _ => {}
        }
    }
    (refs, exports)
}

/// Whether the item that follows `before` carries `#[cfg(test)]`: tests may use any layer.
fn is_test_only(before: &str) -> bool {
    let mut rest = before.trim_end();
    while rest.ends_with(']') {
        let Some(open) = rest.rfind("#[") else {
            return false;
        };
        if rest[open..].replace(' ', "") == "#[cfg(test)]" {
            return true;
        }
        rest = rest[..open].trim_end();
    }
    false
}

/// The modules declared `#[cfg(test)] mod name;` in `file`: files that only tests compile.
fn test_modules(file: &SourceFile) -> Vec<ModPath> {
    let code = &file.code;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(p) = code[from..].find("mod ") {
        let at = from + p;
        from = at + 4;
        let name: String = code[from..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty()
            && code[from + name.len()..].trim_start().starts_with(';')
            && is_test_only(&code[..at])
        {
            let mut m = file.module.clone();
            m.push(name);
            out.push(m);
        }
    }
    out
}

/// Expands `a::{b, c::{d as e, *}}` into `(["a","b"], "b")`, `(["a","c","d"], "e")`,
/// `(["a","c"], "*")`.
fn expand_use_tree(tree: &str) -> Vec<(Vec<String>, String)> {
    fn walk(s: &str, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
        for item in split_top(s) {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            if let Some(open) = item.find('{') {
                let head = item[..open].trim().trim_end_matches("::");
                let inner = &item[open + 1..item.rfind('}').unwrap_or(item.len())];
                let mut p = prefix.to_vec();
                p.extend(
                    head.split("::")
                        .filter(|s| !s.is_empty())
                        .map(|s| s.trim().to_string()),
                );
                walk(inner, &p, out);
            } else {
                let (path, alias) = match item.split_once(" as ") {
                    Some((p, a)) => (p.trim(), a.trim().to_string()),
                    None => (item, String::new()),
                };
                let mut p = prefix.to_vec();
                p.extend(
                    path.split("::")
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty()),
                );
                if p.last().is_some_and(|l| l == "*") {
                    p.pop();
                    out.push((p, "*".to_string()));
                } else if p.last().is_some_and(|l| l == "self") {
                    p.pop();
                    let name = if alias.is_empty() {
                        p.last().cloned().unwrap_or_default()
                    } else {
                        alias
                    };
                    out.push((p, name));
                } else {
                    let name = if alias.is_empty() {
                        p.last().cloned().unwrap_or_default()
                    } else {
                        alias
                    };
                    out.push((p, name));
                }
            }
        }
    }
    let tree = tree.trim().trim_start_matches("::");
    let mut out = Vec::new();
    walk(tree, &[], &mut out);
    out
}

/// Splits on commas outside braces.
fn split_top(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// A path made absolute from the module it was written in.
fn absolute(from: &ModPath, path: &[String]) -> Vec<String> {
    let mut base: Vec<String> = Vec::new();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => rest = &rest[1..],
        Some("self") => {
            base = from.clone();
            rest = &rest[1..];
        }
        Some("super") => {
            base = from.clone();
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => base = from.clone(),
    }
    base.extend(rest.iter().cloned());
    base
}

/// The file that defines what `path` (absolute) names, following re-exports.
fn resolve<'a>(
    path: &[String],
    files: &'a BTreeMap<ModPath, usize>,
    exports: &HashMap<ModPath, HashMap<String, Vec<String>>>,
    hops: usize,
) -> Option<(&'a ModPath, usize)> {
    // The deepest module the path runs through.
    let mut k = path.len();
    while k > 0 && !files.contains_key(&path[..k].to_vec()) {
        k -= 1;
    }
    let (module, &index) = files.get_key_value(&path[..k].to_vec())?;
    if hops < 8 {
        if let Some(name) = path.get(k) {
            if let Some(target) = exports.get(module).and_then(|m| m.get(name)) {
                if target.first().is_some_and(|t| t == EXTERNAL) {
                    return None;
                }
                let mut next = target.clone();
                next.extend(path[k + 1..].iter().cloned());
                if next != path {
                    return resolve(&next, files, exports, hops + 1);
                }
            }
        }
    }
    Some((module, index))
}

/// The strongly connected components with more than one file (Tarjan's algorithm).
fn cycles(n: usize, edges: &BTreeMap<usize, BTreeSet<usize>>) -> Vec<Vec<usize>> {
    struct Tarjan<'a> {
        edges: &'a BTreeMap<usize, BTreeSet<usize>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            let targets: Vec<usize> = self.edges.get(&v).into_iter().flatten().copied().collect();
            for w in targets {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.out.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    t.out
}

/// The dependency edges between the library's files, with one path that causes each.
fn dependency_graph(files: &[SourceFile]) -> BTreeMap<(usize, usize), String> {
    let tests: BTreeSet<ModPath> = files.iter().flat_map(test_modules).collect();
    let is_test = |m: &ModPath| tests.iter().any(|t| m.starts_with(t));
    let by_module: BTreeMap<ModPath, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.clone(), i))
        .collect();
    let modules: BTreeSet<ModPath> = by_module.keys().cloned().collect();
    let mut all_refs = Vec::new();
    let mut exports: HashMap<ModPath, HashMap<String, Vec<String>>> = HashMap::new();
    for (i, f) in files.iter().enumerate() {
        let (refs, ex) = references(f, &modules);
        exports.entry(f.module.clone()).or_default().extend(ex);
        all_refs.push((i, refs));
    }
    let mut edges = BTreeMap::new();
    for (i, refs) in all_refs {
        if is_test(&files[i].module) {
            continue;
        }
        for r in refs {
            let path = absolute(&r.from, &r.path);
            if let Some((_, j)) = resolve(&path, &by_module, &exports, 0) {
                if j != i {
                    edges.entry((i, j)).or_insert_with(|| r.path.join("::"));
                }
            }
        }
    }
    edges
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The C library's sources (package rsm-capi), held to the same rules.
fn capi_src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("capi")
        .join("src")
}

#[test]
fn no_two_library_files_import_each_other() {
    assert_no_cycles(&src_dir());
}

#[test]
fn no_two_c_library_files_import_each_other() {
    assert_no_cycles(&capi_src_dir());
}

fn assert_no_cycles(src: &Path) {
    let files = library_files(src);
    assert!(
        files.len() > 10,
        "the library's files were not found in {}",
        src.display()
    );
    let graph = dependency_graph(&files);
    let mut adjacency: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for &(a, b) in graph.keys() {
        adjacency.entry(a).or_default().insert(b);
    }
    let found = cycles(files.len(), &adjacency);
    let mut report = String::new();
    for component in &found {
        let names: Vec<&str> = component.iter().map(|&i| files[i].rel.as_str()).collect();
        report.push_str(&format!(
            "circle of {} files: {}\n",
            names.len(),
            names.join(", ")
        ));
        for (&(a, b), why) in &graph {
            if component.contains(&a) && component.contains(&b) {
                report.push_str(&format!("  {} -> {} ({why})\n", files[a].rel, files[b].rel));
            }
        }
    }
    assert!(
        found.is_empty(),
        "library files import each other:\n{report}"
    );
}

#[test]
fn no_library_file_is_over_eight_hundred_lines() {
    let long: Vec<String> = library_files(&src_dir())
        .into_iter()
        .chain(library_files(&capi_src_dir()))
        .filter(|f| f.lines > MAX_LINES)
        .map(|f| format!("{} ({} lines)", f.rel, f.lines))
        .collect();
    assert!(long.is_empty(), "split these by concern: {long:?}");
}

#[test]
fn modules_with_children_are_files_beside_their_folders() {
    let old_style: Vec<String> = library_files(&src_dir())
        .into_iter()
        .chain(library_files(&capi_src_dir()))
        .filter(|f| f.rel.ends_with("mod.rs"))
        .map(|f| f.rel)
        .collect();
    assert!(
        old_style.is_empty(),
        "move each x/mod.rs to x.rs: {old_style:?}"
    );
}

/// The checker itself finds a loop, follows a re-export, and reads inline modules right.
#[test]
fn the_checker_sees_loops_through_re_exports_and_not_through_tests() {
    let file = |rel: &str, text: &str| SourceFile {
        rel: rel.to_string(),
        module: module_of(rel),
        code: strip_comments(text),
        lines: text.lines().count(),
    };
    let files = vec![
        file("lib.rs", "mod a;\nmod b;\nmod c;\npub use c::Thing;\n"),
        file(
            "a.rs",
            "use crate::Thing; // crate::b::Ignored in a comment\n",
        ),
        file(
            "b.rs",
            "pub fn f() { let _ = \"crate::a::NotCode\"; }\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::a::X;\n}\n",
        ),
        file("c.rs", "pub struct Thing;\nfn g() { crate::a::h(); }\n"),
    ];
    let graph = dependency_graph(&files);
    let edge = |a: &str, b: &str| {
        let ia = files.iter().position(|f| f.rel == a).unwrap();
        let ib = files.iter().position(|f| f.rel == b).unwrap();
        graph.contains_key(&(ia, ib))
    };
    assert!(
        edge("a.rs", "c.rs"),
        "the root's re-export leads to its definition"
    );
    assert!(!edge("a.rs", "lib.rs"));
    assert!(edge("c.rs", "a.rs"));
    assert!(!edge("a.rs", "b.rs"), "comments are not read");
    assert!(!edge("b.rs", "a.rs"), "strings are not read");
    assert!(
        !edge("b.rs", "lib.rs"),
        "super in an inline module is the file itself"
    );
    let mut adjacency: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for &(a, b) in graph.keys() {
        adjacency.entry(a).or_default().insert(b);
    }
    assert_eq!(
        cycles(files.len(), &adjacency).len(),
        1,
        "a.rs and c.rs form a loop"
    );
}

/// Prints the library's files by layer, each with the files it depends on:
/// `cargo test --test layers -- --ignored --nocapture`.
#[test]
#[ignore = "prints the layers for a reader; asserts nothing"]
fn print_the_layers() {
    let files = library_files(&src_dir());
    let graph = dependency_graph(&files);
    let mut deps: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); files.len()];
    for &(a, b) in graph.keys() {
        deps[a].insert(b);
    }
    // A file's layer: one above the highest of what it depends on (the graph is acyclic).
    let mut layer: Vec<Option<usize>> = vec![None; files.len()];
    for _ in 0..files.len() {
        for i in 0..files.len() {
            if layer[i].is_none() && deps[i].iter().all(|&d| layer[d].is_some()) {
                layer[i] = Some(
                    deps[i]
                        .iter()
                        .map(|&d| layer[d].unwrap_or(0) + 1)
                        .max()
                        .unwrap_or(0),
                );
            }
        }
    }
    let mut order: Vec<usize> = (0..files.len()).collect();
    order.sort_by_key(|&i| (layer[i], files[i].rel.clone()));
    for i in order {
        let on: Vec<&str> = deps[i].iter().map(|&d| files[d].rel.as_str()).collect();
        println!(
            "{:>2}  {:<28} {}",
            layer[i].map_or(-1, |l| l as i64),
            files[i].rel,
            on.join(" ")
        );
    }
}
