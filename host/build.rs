//! Embeds the wasm guest and its precompiled artifact in the host.
//!
//! Nothing is compiled here: the repository carries the built guest
//! (`prebuilt/quickcell_guest.wasm`, made by `scripts/build-guest`, which the
//! test suite checks against a build from source) and, for x86-64 Linux, the
//! guest pre-initialized and precompiled for quickcell's engine
//! configuration (`prebuilt/`, made by `scripts/refresh-guest`), so a
//! build needs neither the guest's toolchain (clang, wasi-libc, the wasm
//! Rust target) nor a second Wasmtime.
//!
//! `QUICKCELL_GUEST_WASM=FILE` embeds another guest module (for packagers
//! and guest development); the precompiled artifact, made from the
//! committed guest, is then ignored at run time and the guest is compiled
//! on first use.

use sha2::{Digest, Sha256};
use std::env;
use std::path::PathBuf;

/// The committed guest module.
const GUEST: &str = "prebuilt/quickcell_guest.wasm";

/// The committed precompiled guest for x86-64 Linux.
const PRECOMPILED_X86_64_LINUX: &str = "prebuilt/quickcell_guest.x86_64-linux.cwasm";

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-env-changed=QUICKCELL_GUEST_WASM");

    let guest = match env::var_os("QUICKCELL_GUEST_WASM") {
        Some(path) => PathBuf::from(path),
        None => manifest_dir.join(GUEST),
    };
    println!("cargo:rerun-if-changed={}", guest.display());
    let bytes = std::fs::read(&guest).unwrap_or_else(|e| {
        panic!(
            "quickcell: cannot read the guest module {}: {e} \
             (scripts/build-guest builds it from guest/)",
            guest.display()
        )
    });
    std::fs::write(out_dir.join("quickcell_guest.wasm"), &bytes).expect("write embedded guest");
    let hex: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    println!("cargo:rustc-env=QUICKCELL_GUEST_SHA256={hex}");

    // The artifact is native code for one architecture and OS; other
    // targets embed nothing and compile the guest on first use.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let precompiled = manifest_dir.join(PRECOMPILED_X86_64_LINUX);
    println!("cargo:rerun-if-changed={}", precompiled.display());
    // Cranelift is in the build when the `compiler` feature asks for it, and
    // always on targets without a precompiled guest (Cargo.toml's target
    // table adds it there): `cfg(quickcell_compiler)` tells the code.
    let native_artifact = arch == "x86_64" && os == "linux";
    let has_compiler = env::var_os("CARGO_FEATURE_COMPILER").is_some() || !native_artifact;
    println!("cargo::rustc-check-cfg=cfg(quickcell_compiler)");
    if has_compiler {
        println!("cargo::rustc-cfg=quickcell_compiler");
    }
    let artifact = if native_artifact {
        match std::fs::read(&precompiled) {
            Ok(artifact) => artifact,
            Err(e) if has_compiler => {
                println!(
                    "cargo:warning=no precompiled guest ({}: {e}); the guest is compiled on first use",
                    precompiled.display()
                );
                Vec::new()
            }
            Err(e) => panic!(
                "quickcell: without the `compiler` feature the binary runs only the precompiled \
                 guest, and {} cannot be read: {e}",
                precompiled.display()
            ),
        }
    } else {
        Vec::new()
    };
    // A binary that can neither compile nor load its artifact would fail at
    // its first cell: refuse to build it.
    if !has_compiler {
        if artifact.is_empty() {
            panic!(
                "quickcell: the `compiler` feature is needed on {arch}-{os}: there is no \
                 precompiled guest for it"
            );
        }
        if env::var_os("QUICKCELL_GUEST_WASM").is_some() {
            panic!(
                "quickcell: QUICKCELL_GUEST_WASM needs the `compiler` feature: the precompiled \
                 guest is made from the committed guest, not from that one"
            );
        }
    }
    std::fs::write(out_dir.join("quickcell_guest.cwasm"), &artifact)
        .expect("write embedded precompiled guest");
    let artifact_hex: String = Sha256::digest(&artifact)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    println!("cargo:rustc-env=QUICKCELL_PRECOMPILED_SHA256={artifact_hex}");
}
