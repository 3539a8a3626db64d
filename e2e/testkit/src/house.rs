//! The crates' module graph read from their sources (with `syn`): the
//! import cycles between files, and between rooms (top-level modules).
//!
//! A module imports another where one of its paths (`use crate::a::b`,
//! `super::c`, `crate::a::f()`) names it; paths inside `#[cfg(test)]` items
//! are left out (a test may reach anywhere). The binaries (`main.rs`,
//! `bin/`) sit on top and are not part of the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// A module by its path from the crate root: `["decide", "plan"]`.
pub type ModPath = Vec<String>;

/// Which modules each module imports.
pub type Graph = BTreeMap<ModPath, BTreeSet<ModPath>>;

/// Reads every module of the crate whose sources are in `src`.
pub fn module_graph(src: &Path) -> Result<Graph, String> {
    let files = rust_files(src)?;
    let modules: BTreeMap<ModPath, PathBuf> = files
        .into_iter()
        .filter_map(|f| Some((module_of(src, &f)?, f)))
        .collect();
    let mut graph = Graph::new();
    for (module, file) in &modules {
        let code = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let parsed = syn::parse_file(&code).map_err(|e| format!("{}: {e}", file.display()))?;
        let mut paths = Paths::default();
        paths.visit_file(&parsed);
        let imports = paths
            .found
            .iter()
            .filter_map(|p| resolve(module, p, &modules))
            .filter(|target| target != module)
            .collect();
        graph.insert(module.clone(), imports);
    }
    Ok(graph)
}

/// The graph between rooms: each module belongs to its first segment.
pub fn rooms(graph: &Graph) -> Graph {
    let room = |m: &ModPath| m.iter().take(1).cloned().collect::<ModPath>();
    let mut out = Graph::new();
    for (from, targets) in graph {
        let entry = out.entry(room(from)).or_default();
        entry.extend(targets.iter().map(room).filter(|t| *t != room(from)));
    }
    out.remove(&ModPath::new());
    for targets in out.values_mut() {
        targets.remove(&ModPath::new());
    }
    out
}

/// The import cycles of `graph`: its strongly connected components of more
/// than one module (Tarjan's algorithm), each sorted.
pub fn cycles(graph: &Graph) -> Vec<Vec<ModPath>> {
    struct Tarjan<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a ModPath) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.clone());
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
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

/// `a::b` for people.
pub fn name(m: &ModPath) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

fn rust_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.is_dir() {
            out.extend(rust_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(out)
}

/// The module a file holds; `None` for the binaries.
fn module_of(src: &Path, file: &Path) -> Option<ModPath> {
    let rel = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: ModPath = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") || parts == ["main"] {
        return None;
    }
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    Some(parts)
}

/// The longest known module a path names, from `module` (whose `self` is
/// itself, whether a file or a directory's `mod.rs`, and `super` its parent).
fn resolve(
    module: &ModPath,
    path: &[String],
    modules: &BTreeMap<ModPath, PathBuf>,
) -> Option<ModPath> {
    let (first, mut rest) = path.split_first()?;
    // The module `self` names, then `super` one level up per `super`.
    let mut base = match first.as_str() {
        "crate" => ModPath::new(),
        "self" => module.clone(),
        "super" => {
            let mut parent = module.clone();
            parent.pop();
            parent
        }
        _ => return None,
    };
    while let Some((next, tail)) = rest.split_first()
        && next == "super"
    {
        base.pop();
        rest = tail;
    }
    let candidate: ModPath = base.into_iter().chain(rest.iter().cloned()).collect();
    (1..=candidate.len())
        .rev()
        .map(|k| candidate[..k].to_vec())
        .find(|m| modules.contains_key(m))
}

/// Every `crate::`, `super::` and `self::` path outside `#[cfg(test)]` items.
#[derive(Default)]
struct Paths {
    found: Vec<Vec<String>>,
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
    })
}

fn flatten_use(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut full = prefix.clone();
            if n.ident != "self" {
                full.push(n.ident.to_string());
            }
            out.push(full);
        }
        syn::UseTree::Rename(r) => {
            let mut full = prefix.clone();
            full.push(r.ident.to_string());
            out.push(full);
        }
        syn::UseTree::Glob(_) => out.push(prefix.clone()),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                flatten_use(tree, prefix, out);
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Impl(i) => &i.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_test_only(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let mut prefix = Vec::new();
        flatten_use(&item.tree, &mut prefix, &mut self.found);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments
            .first()
            .is_some_and(|s| s == "crate" || s == "super" || s == "self")
        {
            self.found.push(segments);
        }
        syn::visit::visit_path(self, path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate in a temporary directory, from (file, source) pairs.
    fn crate_of(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "house-{}-{}",
            std::process::id(),
            files.len() * 31 + files.iter().map(|(f, _)| f.len()).sum::<usize>()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        for (file, code) in files {
            let path = dir.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, code).unwrap();
        }
        dir
    }

    fn m(path: &str) -> ModPath {
        path.split("::").map(String::from).collect()
    }

    #[test]
    fn a_cycle_through_use_super_and_a_call_path_is_found() {
        let src = crate_of(&[
            ("lib.rs", "pub mod low;\npub mod high;\n"),
            ("low/mod.rs", "pub mod a;\npub mod b;\n"),
            ("low/a.rs", "use super::b::Thing;\n"),
            (
                "low/b.rs",
                "pub struct Thing;\nfn f() { crate::high::g(); }\n",
            ),
            ("high.rs", "pub fn g() { let _ = crate::low::a::X; }\n"),
            ("main.rs", "use crate::high;\n"),
        ]);
        let graph = module_graph(&src).unwrap();
        assert_eq!(graph[&m("low::a")], BTreeSet::from([m("low::b")]));
        assert_eq!(
            cycles(&graph),
            vec![vec![m("high"), m("low::a"), m("low::b")]]
        );
        assert_eq!(cycles(&rooms(&graph)), vec![vec![m("high"), m("low")]]);
    }

    #[test]
    fn imports_that_point_down_and_test_code_make_no_cycle() {
        let src = crate_of(&[
            ("lib.rs", "pub mod model;\npub mod steps;\n"),
            (
                "model.rs",
                "pub struct Sale;\n#[cfg(test)]\nmod tests { use crate::steps::run; }\n",
            ),
            ("steps/mod.rs", "pub mod run;\nuse self::run::go;\n"),
            ("steps/run.rs", "use crate::model::Sale;\npub fn go() {}\n"),
        ]);
        let graph = module_graph(&src).unwrap();
        assert_eq!(graph[&m("model")], BTreeSet::new(), "test code is left out");
        assert_eq!(graph[&m("steps")], BTreeSet::from([m("steps::run")]));
        assert!(cycles(&graph).is_empty());
        assert!(cycles(&rooms(&graph)).is_empty());
    }
}
