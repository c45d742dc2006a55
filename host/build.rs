//! Builds the wasm guest (`guest/`) and embeds it in the host.
//!
//! The guest is a separate Cargo workspace targeting `wasm32-wasip1`. Its C
//! part (QuickJS) is compiled with Debian's clang-19 against Debian's
//! wasi-libc headers, so no SDK is downloaded. When a prerequisite is
//! missing the build stops with one message naming what to install and the
//! script that installs it (`scripts/setup`).

use sha2::{Digest, Sha256};
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const SETUP_HINT: &str = "run `scripts/setup` (as root) to install them, or by hand: \
`apt-get install -y --no-install-recommends clang-19 llvm-19 wasi-libc` and \
`rustup target add wasm32-wasip1`";

const WASI_INCLUDE: &str = "/usr/include/wasm32-wasi";

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let guest_dir = manifest_dir.join("guest");
    for path in [
        "guest/src",
        "guest/Cargo.toml",
        "guest/Cargo.lock",
        "guest/.cargo/config.toml",
        "wit",
    ] {
        println!(
            "cargo:rerun-if-changed={}",
            manifest_dir.join(path).display()
        );
    }
    println!("cargo:rerun-if-env-changed=QUICKCELL_GUEST_WASM");

    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let embedded = out_dir.join("quickcell_guest.wasm");

    // An explicitly provided, prebuilt guest (for packagers) skips the build.
    let built = match env::var_os("QUICKCELL_GUEST_WASM") {
        Some(path) => PathBuf::from(path),
        None => build_guest(&guest_dir, &out_dir),
    };
    let bytes = std::fs::read(&built).unwrap_or_else(|e| {
        panic!(
            "quickcell: cannot read the built guest {}: {e}",
            built.display()
        )
    });
    std::fs::write(&embedded, &bytes).expect("write embedded guest");
    let hash = Sha256::digest(&bytes);
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    println!("cargo:rustc-env=QUICKCELL_GUEST_SHA256={hex}");
}

fn build_guest(guest_dir: &Path, out_dir: &Path) -> PathBuf {
    check_prerequisites();
    // Share one guest target directory between profiles: <target>/quickcell-guest.
    let target_root = out_dir
        .ancestors()
        .nth(4)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| out_dir.join("guest-target"));
    let guest_target = target_root.join("quickcell-guest");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(guest_dir)
        .args([
            "build",
            "--release",
            "--locked",
            "--target",
            "wasm32-wasip1",
        ])
        .arg("--target-dir")
        .arg(&guest_target)
        // The outer build's flags are for the host, not for the guest; the
        // guest's own flags live in guest/.cargo/config.toml.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_PRIMARY_PACKAGE")
        .env("RQUICKJS_SYS_NO_WASI_SDK", "1")
        .env("CC_wasm32_wasip1", "clang-19")
        .env("AR_wasm32_wasip1", "llvm-ar-19")
        // clang 19 targets Wasm without bulk memory and non-trapping
        // float-to-int by default; Rust's side of the guest has both, and so
        // does Wasmtime. With them QuickJS copies with `memory.copy` instead
        // of a libc loop and converts numbers without range-check branches.
        .env(
            "CFLAGS_wasm32_wasip1",
            format!("-isystem {WASI_INCLUDE} -mbulk-memory -mnontrapping-fptoint"),
        )
        .env(
            "BINDGEN_EXTRA_CLANG_ARGS_wasm32_wasip1",
            format!("-isystem {WASI_INCLUDE}"),
        );
    for (key, _) in env::vars() {
        if key.starts_with("CARGO_PROFILE_") || key.starts_with("CARGO_CFG_") {
            cmd.env_remove(key);
        }
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("quickcell: cannot run cargo to build the guest: {e}"));
    if !status.success() {
        panic!(
            "quickcell: building the wasm guest failed (see the compiler output above). \
             If a tool or header is missing, {SETUP_HINT}."
        );
    }
    guest_target.join("wasm32-wasip1/release/quickcell_guest.wasm")
}

fn check_prerequisites() {
    let mut missing = Vec::new();
    if !runs("clang-19") {
        missing.push("clang-19");
    }
    if !runs("llvm-ar-19") {
        missing.push("llvm-19 (llvm-ar-19)");
    }
    if !Path::new(WASI_INCLUDE).join("stdlib.h").exists() {
        missing.push("wasi-libc (/usr/include/wasm32-wasi)");
    }
    if !has_wasm_target() {
        missing.push("the Rust target wasm32-wasip1");
    }
    if !missing.is_empty() {
        panic!(
            "\n\nquickcell: cannot build the wasm guest: missing {}.\nTo fix: {SETUP_HINT}.\n\n",
            missing.join(", ")
        );
    }
}

fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn has_wasm_target() -> bool {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match sysroot {
        Some(root) => Path::new(&root).join("lib/rustlib/wasm32-wasip1").exists(),
        None => false,
    }
}
