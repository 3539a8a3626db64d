//! The house rule of `make test`: in both crates, every import points down —
//! no cycle between files, none between rooms (top-level modules).

use flashsale_testkit::house::{Graph, cycles, module_graph, name, rooms};

fn report(what: &str, graph: &Graph) -> Vec<String> {
    cycles(graph)
        .into_iter()
        .map(|c| {
            let names: Vec<String> = c.iter().map(name).collect();
            format!("{what}: {}", names.join(" ↔ "))
        })
        .collect()
}

#[test]
fn every_import_points_down() {
    let mut found = Vec::new();
    for krate in ["operator", "workload"] {
        let src = flashsale_testkit::repo_dir().join(krate).join("src");
        let graph = module_graph(&src).unwrap_or_else(|e| panic!("{krate}: {e}"));
        println!("{krate}: {} modules", graph.len());
        for (room, imports) in rooms(&graph) {
            let below: Vec<String> = imports.iter().map(name).collect();
            println!("  {:<12} → {}", name(&room), below.join(", "));
        }
        found.extend(report(&format!("{krate} files"), &graph));
        found.extend(report(&format!("{krate} rooms"), &rooms(&graph)));
    }
    assert!(
        found.is_empty(),
        "import cycles (move what ties them to the lower module):\n{}",
        found.join("\n")
    );
}
