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
    let artifact = if arch == "x86_64" && os == "linux" {
        std::fs::read(&precompiled).unwrap_or_default()
    } else {
        Vec::new()
    };
    std::fs::write(out_dir.join("quickcell_guest.cwasm"), &artifact)
        .expect("write embedded precompiled guest");
}
