//! The built guest conforms to `wit/bridge.wit`, so the file and the code
//! cannot drift apart.

use std::collections::BTreeSet;
use wit_parser::{Resolve, WorldId, WorldItem};

/// `(direction, interface, function, params, result)` for every function of
/// a world, with types rendered for comparison across resolves.
fn signatures(resolve: &Resolve, world: WorldId) -> BTreeSet<String> {
    let w = &resolve.worlds[world];
    let mut out = BTreeSet::new();
    for (dir, items) in [("import", &w.imports), ("export", &w.exports)] {
        for (key, item) in items {
            let WorldItem::Interface { id, .. } = item else {
                out.insert(format!(
                    "{dir} non-interface item {}",
                    resolve.name_world_key(key)
                ));
                continue;
            };
            let iface = resolve.name_world_key(key);
            for (name, func) in &resolve.interfaces[*id].functions {
                let params: Vec<String> = func
                    .params
                    .iter()
                    .map(|p| format!("{}: {:?}", p.name, p.ty))
                    .collect();
                out.insert(format!(
                    "{dir} {iface}#{name}({}) -> {:?}",
                    params.join(", "),
                    func.result
                ));
            }
        }
    }
    out
}

#[test]
fn guest_conforms_to_the_wit_world() {
    let wasm = quickcell::testing::guest_wasm();
    // The world wit-bindgen embedded when it generated the guest's bindings.
    let (_, bindgen) =
        wit_component::metadata::decode(wasm).expect("the guest embeds its WIT world");
    let embedded = signatures(&bindgen.resolve, bindgen.world);

    // The world as wit/bridge.wit states it today.
    let mut resolve = Resolve::default();
    let (pkg, _) = resolve
        .push_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("wit"))
        .unwrap();
    let world = resolve.select_world(&[pkg], Some("guest")).unwrap();
    let declared = signatures(&resolve, world);
    assert!(!declared.is_empty());
    assert_eq!(
        embedded, declared,
        "the built guest was generated from a different bridge.wit"
    );

    // The core module imports and exports exactly those functions under
    // the canonical-ABI names the host links against.
    use wasmtime::wasmparser::{Parser, Payload};
    let mut imports = BTreeSet::new();
    let mut exports = BTreeSet::new();
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.unwrap() {
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.unwrap();
                    if import.module.starts_with("quickcell:") {
                        imports.insert(format!("{}#{}", import.module, import.name));
                    }
                }
            }
            Payload::ExportSection(reader) => {
                for export in reader {
                    let name = export.unwrap().name;
                    if name.starts_with("quickcell:") {
                        exports.insert(name.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    let from_wit = |dir: &str| -> BTreeSet<String> {
        declared
            .iter()
            .filter_map(|s| s.strip_prefix(&format!("{dir} ")))
            .map(|s| s.split('(').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(imports, from_wit("import"));
    assert_eq!(exports, from_wit("export"));
}
