//! The process-wide Wasmtime engine and the pre-initialized guest module.
//!
//! Compile once, instantiate many: one [`wasmtime::Engine`] per process
//! (fuel metering, pooling allocator with copy-on-write memory images, async
//! support), one pre-initialized guest module, and an
//! [`InstancePre`] from which every cell gets a fresh instance in its own
//! `Store`. One such instance, the standby, is made in the background ahead
//! of the next cell ([`SharedEngine::instance`]).
//!
//! Pre-initialization runs the guest's `wizer-initialize` export (QuickJS
//! runtime creation and prelude evaluation) once, under wasmtime-wizer, and
//! bakes the result into the module's data segments. A fresh cell is then
//! only an instantiation. The compiled, pre-initialized module is cached on
//! disk (see [`module_cache_dir`]), keyed by the guest's SHA-256 and
//! Wasmtime's engine-compatibility hash, so later processes load it in well
//! under a millisecond instead of compiling it again.

use crate::guest_abi::{self, CellState};
use anyhow::{anyhow, bail, Context as _, Result};
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module,
    PoolingAllocationConfig, Store,
};

/// The guest module as built by `host/build.rs`.
pub(crate) const GUEST_WASM: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/quickcell_guest.wasm"));

/// SHA-256 of [`GUEST_WASM`], hex encoded. Snapshots and the module cache are
/// keyed by it.
pub(crate) const GUEST_SHA256: &str = env!("QUICKCELL_GUEST_SHA256");

/// [`GUEST_SHA256`] as raw bytes.
pub(crate) fn guest_hash() -> [u8; 32] {
    static HASH: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    *HASH.get_or_init(|| {
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&GUEST_SHA256[2 * i..2 * i + 2], 16).unwrap_or(0);
        }
        out
    })
}

/// Fuel a cell's guest code consumes between two yields to the host
/// ([`Store::fuel_async_yield_interval`]): the points at which a running
/// cell's deadline is checked ([`crate::guest_abi`]), so this bounds how late a
/// timeout is noticed while guest code runs. One million fuel is ~0.15 ms
/// of guest code on the 2-core machine the benchmarks run on; a yield
/// costs ~1 µs. The yields do not change how much fuel a cell uses.
///
/// Deadlines used to be Wasmtime's epoch interruption (a ticker thread
/// every 2 ms), which puts a check of the epoch counter into every function
/// prologue and loop header of the guest: 11% of the comparison cell's
/// guest instructions. Fuel is metered anyway, so its yields are free.
pub(crate) const YIELD_FUEL: u64 = 1_000_000;

/// Maximum native (Cranelift) stack a cell may use, in bytes. QuickJS's own
/// stack guard (in the guest) raises a catchable `RangeError` long before
/// deep JavaScript recursion gets here.
pub(crate) const MAX_WASM_STACK: usize = 8 << 20;

/// Size of the guest's shadow stack in bytes: the `-zstack-size` the guest
/// is linked with (`guest/.cargo/config.toml`). The stack occupies the
/// bytes just below the stack pointer's initial value.
pub(crate) const GUEST_STACK_BYTES: usize = 4 << 20;

/// Instances the pooling allocator can hold at once (running and
/// instantiating cells; parked cells hold none).
pub(crate) const POOL_INSTANCES: u32 = 256;

/// Largest linear memory a cell can reach: the 1 GiB ceiling of
/// `memoryLimitBytes` plus the runtime image and allocator overhead.
pub(crate) const POOL_MAX_MEMORY_BYTES: usize = 1536 << 20;

/// Bytes of a released instance's linear memory that stay resident in its
/// pool slot: the pages the cell dirtied (found with Linux's `PAGEMAP_SCAN`)
/// are copied back from the image instead of being released with `madvise`,
/// so the next cell in the slot takes no page faults on them. Per slot that
/// has been used; at most [`POOL_INSTANCES`] × this in all. Above it, the
/// rest of the dirtied memory is released as usual. Only where the ioctl
/// exists (Linux 6.7 and later); elsewhere every page is released.
pub(crate) const KEEP_RESIDENT_BYTES: usize = 8 << 20;

/// Most image pages a fresh cell pre-faults ([`SharedEngine::hot_pages`]):
/// 1 MiB. A first cell that dirtied more teaches nothing.
pub(crate) const MAX_HOT_PAGES: usize = 256;

/// The engine, the pre-initialized module, and the linker shared by all
/// runtimes of the process.
pub(crate) struct SharedEngine {
    pub engine: Engine,
    pub instance_pre: InstancePre<CellState>,
    /// Size of the pre-initialized linear memory, in bytes.
    pub initial_memory_bytes: usize,
    /// The pre-initialized linear memory: snapshots hold only the pages
    /// that differ from it.
    pub memory_image: Vec<u8>,
    /// The guest's shadow stack: `[initial SP − GUEST_STACK_BYTES, initial
    /// SP)`. Below the stack pointer, between calls, it holds nothing live.
    pub stack: std::ops::Range<usize>,
    /// Whether the module was loaded from the on-disk cache.
    pub from_cache: bool,
    /// The image pages a cell writes on its way from start to end, learned
    /// from the process's first cell that completes without parking (at
    /// most [`MAX_HOT_PAGES`]; empty if it wrote more). Every fresh cell
    /// pre-faults them in one system call per run instead of taking a
    /// copy-on-write fault per page: ~10% off a trivial cell. A hint only;
    /// nothing depends on it for correctness.
    pub hot_pages: std::sync::OnceLock<Vec<std::ops::Range<usize>>>,
    /// The standby: one fresh instance made in the background, ahead of the
    /// next cell that needs one (see [`SharedEngine::instance`]).
    standby: Mutex<Option<FreshInstance>>,
    /// Whether a background task is making the standby.
    standby_pending: AtomicBool,
}

/// An instance of the pre-initialized module that has run no cell, in its
/// own store. Its store has no fuel limit, no deadline and placeholder
/// [`CellState`]: [`crate::cell`] sets all three before the first call.
pub(crate) struct FreshInstance {
    pub store: Store<CellState>,
    pub exports: guest_abi::GuestExports,
}

impl SharedEngine {
    /// A fresh instance for a cell: the standby if one is ready, else one
    /// made now. Either way a background task then makes the next standby,
    /// so a stream of cells finds one ready. Instantiation (~35 µs) and
    /// pre-faulting the hot pages are then off the cell's path: about half
    /// of a trivial cell's time. The standby holds one pooling-allocator
    /// slot of [`POOL_INSTANCES`] and has never run guest code, so a cell
    /// cannot tell it from an instance made on demand.
    ///
    /// Earlier cells' instances are released, and the standby is made, by
    /// background tasks. On a current-thread Tokio runtime those run only
    /// while the caller's task waits, and a cell that never waits on
    /// anything (no slow tool, no timer) would never let them: back-to-back
    /// cells would keep every instance they used until the pool ran out.
    /// So on such a runtime this first yields once, which runs them.
    pub(crate) async fn instance(self: &Arc<Self>) -> Result<FreshInstance> {
        if tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::CurrentThread
        {
            tokio::task::yield_now().await;
        }
        let ready = self
            .standby
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        self.make_standby();
        match ready {
            Some(ready) => Ok(ready),
            None => self.fresh_instance().await,
        }
    }

    /// Whether the standby is ready.
    pub(crate) fn has_standby(&self) -> bool {
        self.standby
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_some()
    }

    /// Makes the standby in a background task, unless one is being made.
    pub(crate) fn make_standby(self: &Arc<Self>) {
        if self.standby_pending.swap(true, Ordering::AcqRel) {
            return;
        }
        /// Clears `standby_pending` however the task ends: also when its
        /// Tokio runtime shuts down and drops it mid-way.
        struct Pending(Arc<SharedEngine>);
        impl Drop for Pending {
            fn drop(&mut self) {
                self.0.standby_pending.store(false, Ordering::Release);
            }
        }
        let pending = Pending(self.clone());
        tokio::spawn(async move {
            let shared = &pending.0;
            match shared.fresh_instance().await {
                Ok(ready) => {
                    *shared
                        .standby
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(ready);
                }
                Err(e) => tracing::warn!(error = %e, "cannot make a standby instance"),
            }
        });
    }

    /// Instantiates the module in a new store and pre-faults the hot pages.
    async fn fresh_instance(&self) -> Result<FreshInstance> {
        let mut store = unlimited_store(&self.engine)?;
        store.limiter(|s| s as &mut dyn wasmtime::ResourceLimiter);
        let instance = self
            .instance_pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| anyhow!("cannot instantiate the guest: {e}"))?;
        let exports = guest_abi::GuestExports::new(&mut store, &instance)?;
        if let Some(runs) = self.hot_pages.get() {
            let memory = exports.memory.data_mut(&mut store);
            for run in runs {
                if let Some(region) = memory.get_mut(run.clone()) {
                    quickcell_snapshot::prefault(region);
                }
            }
        }
        Ok(FreshInstance { store, exports })
    }

    /// Learns [`SharedEngine::hot_pages`] from the memory of a fresh cell
    /// that completed, unless already learned.
    pub(crate) fn learn_hot_pages(&self, memory: &[u8]) {
        if self.hot_pages.get().is_some() {
            return;
        }
        let runs = quickcell_snapshot::changed_image_runs(memory, &self.memory_image);
        let pages: usize = runs
            .iter()
            .map(|r| r.len() / quickcell_snapshot::PAGE_BYTES)
            .sum();
        let _ = self.hot_pages.set(if pages <= MAX_HOT_PAGES {
            runs
        } else {
            Vec::new()
        });
    }
}

static SHARED: tokio::sync::OnceCell<Arc<SharedEngine>> = tokio::sync::OnceCell::const_new();

/// Returns the process-wide engine, creating it (and loading or building the
/// pre-initialized module) on first use.
pub(crate) async fn shared() -> Result<Arc<SharedEngine>> {
    SHARED
        .get_or_try_init(|| async { SharedEngine::create().await.map(Arc::new) })
        .await
        .cloned()
}

fn engine_config() -> Config {
    let mut config = Config::new();
    config.consume_fuel(true);
    config.max_wasm_stack(MAX_WASM_STACK);
    config.async_stack_size(MAX_WASM_STACK + (1 << 20));
    config.memory_init_cow(true);
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    // Profiling aid: with `QUICKCELL_PERFMAP` set, Wasmtime writes
    // `/tmp/perf-<pid>.map`, so `perf report` names the guest's functions.
    if std::env::var_os("QUICKCELL_PERFMAP").is_some() {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    // Profiling aid: with `QUICKCELL_NO_POOL` set, instances are made on
    // demand instead of in the pooling allocator's reserved slots (~1.5
    // TiB of address space), which valgrind cannot map; `valgrind
    // --tool=callgrind` then counts the guest's instructions exactly.
    if std::env::var_os("QUICKCELL_NO_POOL").is_some() {
        return config;
    }
    let mut pool = PoolingAllocationConfig::default();
    pool.total_core_instances(POOL_INSTANCES)
        .total_memories(POOL_INSTANCES)
        .total_tables(POOL_INSTANCES)
        .total_stacks(POOL_INSTANCES)
        .max_memory_size(POOL_MAX_MEMORY_BYTES);
    // Without the ioctl (Linux < 6.7) the kept bytes would be the lowest
    // addresses, copied back whether dirtied or not: slower than `madvise`.
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        pool.pagemap_scan(wasmtime::Enabled::Yes)
            .linear_memory_keep_resident(KEEP_RESIDENT_BYTES);
    }
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
}

/// Directory of the compiled-module cache: `$QUICKCELL_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/quickcell`, else `$HOME/.cache/quickcell`, else a
/// `quickcell-cache-<uid>` directory under the system temp dir.
///
/// The cache holds native code that is loaded without further checks, so
/// it is trusted only when it cannot have been written by anyone else:
/// directories quickcell creates are mode 0700 and entries 0600, and an
/// entry is used only if it and its directory belong to the current user
/// and neither is writable by group or others (see [`cache_trusted`]).
/// Anything else is ignored: the module is compiled afresh, and not written
/// into an untrusted directory.
pub fn module_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("QUICKCELL_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("quickcell");
    }
    if let Some(home) = std::env::var_os("HOME") {
        return PathBuf::from(home).join(".cache/quickcell");
    }
    std::env::temp_dir().join(format!(
        "quickcell-cache-{}",
        rustix::process::geteuid().as_raw()
    ))
}

/// Whether `meta` (of the cache directory or an entry, not following
/// symbolic links) could only have been written by the current user: owned
/// by them, no write bit for group or others, and not a symbolic link.
fn cache_trusted(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    !meta.file_type().is_symlink()
        && meta.uid() == rustix::process::geteuid().as_raw()
        && meta.mode() & 0o022 == 0
}

/// Whether the cache directory `dir` exists and is trusted
/// ([`cache_trusted`]). A directory of the current user that group or
/// others may write (a `umask 002` leaves it so) is made 0700 first: files
/// others put there are not theirs to pass off as ours, since every entry
/// is checked for its owner and mode too.
fn cache_dir_trusted(dir: &Path) -> bool {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return false;
    };
    let ours = meta.is_dir() && meta.uid() == rustix::process::geteuid().as_raw();
    if ours && meta.mode() & 0o022 != 0 {
        tracing::info!(dir = %dir.display(), "making the module cache directory private (0700)");
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        return std::fs::symlink_metadata(dir).is_ok_and(|meta| cache_trusted(&meta));
    }
    meta.is_dir() && cache_trusted(&meta)
}

impl SharedEngine {
    async fn create() -> Result<Self> {
        let engine = Engine::new(&engine_config())
            .map_err(|e| anyhow!("cannot create the Wasmtime engine: {e}"))?;
        let mut linker: Linker<CellState> = Linker::new(&engine);
        guest_abi::add_to_linker(&mut linker)?;

        let cache_path = module_cache_dir().join(format!("guest-{}.cwasm", cache_key(&engine)));
        let (module, from_cache) = match load_cached(&engine, &cache_path) {
            Some(module) => (module, true),
            None => {
                let module = preinitialize(&engine, &linker).await?;
                store_cached(&module, &cache_path);
                (module, false)
            }
        };
        let initial_memory_bytes = module
            .exports()
            .find_map(|e| e.ty().memory().map(|m| m.minimum() as usize * 65536))
            .ok_or_else(|| anyhow!("the guest module exports no memory"))?;
        let instance_pre = linker
            .instantiate_pre(&module)
            .map_err(|e| anyhow!("cannot link the guest module: {e}"))?;
        let (memory_image, initial_sp) = read_memory_image(&engine, &instance_pre).await?;
        let stack = initial_sp.saturating_sub(GUEST_STACK_BYTES)..initial_sp;
        Ok(Self {
            engine,
            instance_pre,
            initial_memory_bytes,
            memory_image,
            stack,
            from_cache,
            hot_pages: std::sync::OnceLock::new(),
            standby: Mutex::new(None),
            standby_pending: AtomicBool::new(false),
        })
    }
}

/// A store with placeholder [`CellState`] (no deadline) and unlimited
/// fuel, yielding every [`YIELD_FUEL`].
fn unlimited_store(engine: &Engine) -> Result<Store<CellState>> {
    let mut store = Store::new(engine, CellState::for_preinit());
    store.fuel_async_yield_interval(Some(YIELD_FUEL))?;
    store.set_fuel(u64::MAX)?;
    Ok(store)
}

/// Instantiates the module once; returns a copy of its initial linear
/// memory and the initial value of its stack pointer.
async fn read_memory_image(
    engine: &Engine,
    pre: &InstancePre<CellState>,
) -> Result<(Vec<u8>, usize)> {
    let mut store = unlimited_store(engine)?;
    let instance = pre
        .instantiate_async(&mut store)
        .await
        .map_err(|e| anyhow!("cannot instantiate the guest: {e}"))?;
    let memory = instance
        .get_memory(&mut store, "memory")
        .ok_or_else(|| anyhow!("the guest module exports no memory"))?;
    let sp = instance
        .get_global(&mut store, "__stack_pointer")
        .and_then(|g| g.get(&mut store).i32())
        .ok_or_else(|| anyhow!("the guest module exports no `__stack_pointer`"))?;
    Ok((memory.data(&store).to_vec(), sp as u32 as usize))
}

fn cache_key(engine: &Engine) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let engine_hash = hasher.finish();
    let mut digest = Sha256::new();
    digest.update(GUEST_SHA256.as_bytes());
    digest.update(engine_hash.to_le_bytes());
    digest.update(b"preinit-v1");
    digest.finalize()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn load_cached(engine: &Engine, path: &Path) -> Option<Module> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = path.parent()?;
    if !cache_dir_trusted(dir) {
        if dir.exists() {
            tracing::warn!(dir = %dir.display(), "ignoring the module cache: its directory is not owned by this user or is writable by others");
        }
        return None;
    }
    // `O_NOFOLLOW`: the entry itself must not be a link; its metadata is
    // read from the open file, so it cannot be swapped after the check.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || !cache_trusted(&meta) {
        tracing::warn!(path = %path.display(), "ignoring a module cache entry that is not a regular file owned by this user and writable only by them");
        return None;
    }
    // SAFETY: the file was written by `store_cached` from `Module::serialize`
    // of this very engine configuration (the key includes Wasmtime's
    // compatibility hash); Wasmtime re-checks the header and version. It
    // and its directory belong to this user and nobody else can write them
    // (checked above on the open file).
    match unsafe { Module::deserialize_open_file(engine, file) } {
        Ok(module) => Some(module),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "discarding unusable module cache entry");
            let _ = std::fs::remove_file(path);
            None
        }
    }
}

fn store_cached(module: &Module, path: &Path) {
    use std::io::Write as _;
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    let write = || -> Result<()> {
        let bytes = module.serialize()?;
        let dir = path.parent().context("cache path has no parent")?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        if !cache_dir_trusted(dir) {
            bail!("the directory is not owned by this user or is writable by others");
        }
        let tmp = dir.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&bytes)?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        Ok(())
    };
    if let Err(e) = write() {
        tracing::warn!(path = %path.display(), error = %e, "cannot write the module cache");
    }
}

/// Runs the guest's initialization once under wasmtime-wizer and compiles
/// the resulting pre-initialized module.
async fn preinitialize(engine: &Engine, linker: &Linker<CellState>) -> Result<Module> {
    let mut store = unlimited_store(engine)?;
    let wizer = wasmtime_wizer::Wizer::new();
    let initialized = wizer
        .run(&mut store, GUEST_WASM, async |store, module| {
            linker.instantiate_async(store, module).await
        })
        .await
        .map_err(|e| anyhow!("pre-initializing the guest failed: {e:?}"))?;
    Module::new(engine, &initialized)
        .map_err(|e| anyhow!("compiling the pre-initialized guest failed: {e}"))
}
