//! The guest the binary carries: the precompiled artifact in `prebuilt/`
//! and the first cell on a fresh machine.

use std::path::Path;
use std::process::{Command, Output};

/// Whether this build embeds a precompiled guest (x86-64 Linux).
const HAS_ARTIFACT: bool = cfg!(all(target_arch = "x86_64", target_os = "linux"));

/// The committed artifact, relative to the repository.
const ARTIFACT: &str = "prebuilt/quickcell_guest.x86_64-linux.cwasm";

/// Writes what this Wasmtime makes of the committed guest to the artifact's
/// path plus `.new`. Only `scripts/refresh-guest` runs it (ignored
/// otherwise): no environment variable can turn the check below into a
/// write.
#[tokio::test]
#[ignore = "writes prebuilt/*.cwasm.new: scripts/refresh-guest runs it"]
async fn write_the_committed_guest_precompiled() {
    if !HAS_ARTIFACT {
        panic!("the precompiled guest is for x86-64 Linux");
    }
    let made = quickcell::testing::make_precompiled_guest().await.unwrap();
    let new = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("{ARTIFACT}.new"));
    std::fs::write(new, made).unwrap();
}

/// The committed artifact is exactly what this Wasmtime makes of the
/// committed guest: it matches the source (the guest module, checked
/// against a build from source by `scripts/build-guest --check`) and the
/// engine (configuration and Wasmtime version).
#[tokio::test]
async fn the_embedded_artifact_is_the_committed_guest_precompiled() {
    if !HAS_ARTIFACT {
        return;
    }
    let made = quickcell::testing::make_precompiled_guest().await.unwrap();
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join(ARTIFACT);
    let again = quickcell::testing::make_precompiled_guest().await.unwrap();
    assert!(made == again, "precompiling the guest is deterministic");
    let embedded = quickcell::testing::precompiled_guest();
    assert!(
        made == embedded,
        "{} ({} bytes) is not this build's guest precompiled by this Wasmtime ({} bytes): \
         run scripts/refresh-guest and commit the result",
        committed.display(),
        embedded.len(),
        made.len()
    );
}

/// `quickcell exec` in a process whose HOME, cache and state are empty.
fn exec_on_a_fresh_machine(home: &Path, extra_env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_quickcell"));
    command
        .args(["exec", "--code", "return 6 * 7"])
        .env("HOME", home)
        .env_remove("XDG_CACHE_HOME")
        .env_remove("XDG_STATE_HOME")
        .env_remove("QUICKCELL_CACHE_DIR")
        .env_remove("QUICKCELL_IGNORE_PRECOMPILED")
        .env("RUST_LOG", "quickcell=debug")
        .current_dir(home);
    for (key, value) in extra_env {
        command.env(key, value);
    }
    command.output().unwrap()
}

/// The names of the module cache entries of `home`, sorted.
fn cached_modules(home: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(home.join(".cache/quickcell"))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Obeyed: the first cell on a fresh machine loads the embedded guest and
/// compiles nothing: the module cache gets only the embedded artifact's
/// copy (`embedded-*.cwasm`, mapped from there by later processes), and
/// the next process uses it. Violated: where the artifact does not fit
/// (simulated with QUICKCELL_IGNORE_PRECOMPILED), the guest is compiled,
/// cached (`guest-*.cwasm`), and the reason is logged at debug level.
#[test]
fn the_first_cell_on_a_fresh_machine_compiles_nothing() {
    if !HAS_ARTIFACT {
        return;
    }
    let home = std::env::temp_dir().join(format!("quickcell-fresh-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&home).unwrap();

    let out = exec_on_a_fresh_machine(&home, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["value"], 42);
    assert!(
        stderr.contains("loaded the precompiled guest embedded in the binary"),
        "{stderr}"
    );
    let cached = cached_modules(&home);
    assert!(
        cached.len() == 1 && cached[0].starts_with("embedded-"),
        "nothing was compiled: {cached:?}"
    );
    let copy = home.join(".cache/quickcell").join(&cached[0]);
    let embedded = quickcell::testing::precompiled_guest();
    assert_eq!(
        std::fs::read(&copy).unwrap(),
        embedded[8 + 32..],
        "the copy is the embedded module"
    );
    let out = exec_on_a_fresh_machine(&home, &[]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        cached_modules(&home),
        cached,
        "the next process maps the copy"
    );

    let out = exec_on_a_fresh_machine(&home, &[("QUICKCELL_IGNORE_PRECOMPILED", "1")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["value"], 42);
    assert!(
        stderr.contains("the precompiled guest does not fit")
            && stderr.contains("QUICKCELL_IGNORE_PRECOMPILED is set"),
        "{stderr}"
    );
    let cached = cached_modules(&home);
    assert!(
        cached.len() == 2 && cached[1].starts_with("guest-"),
        "the compiled guest was cached: {cached:?}"
    );
    let _ = std::fs::remove_dir_all(&home);
}
