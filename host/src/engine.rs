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
//! only an instantiation.
//!
//! Where the module comes from ([`GuestOrigin`]), in order:
//!
//! 1. **Embedded**: the binary carries the guest pre-initialized and
//!    precompiled for this engine configuration ([`PRECOMPILED_GUEST`],
//!    x86-64 Linux, CPU baseline [`ARTIFACT_CPU`]); it is deserialized from
//!    the binary's own bytes, so the first cell on a fresh machine compiles
//!    nothing.
//! 2. **Cache**: when that does not fit (another architecture, a CPU below
//!    the baseline, another guest), a module compiled earlier on this machine
//!    from the on-disk cache (see [`module_cache_dir`]), keyed by the
//!    guest's SHA-256 and Wasmtime's engine-compatibility hash.
//! 3. **Compiled**: else the guest is pre-initialized and compiled for this
//!    CPU (~2.7 s) and written to the cache. Builds without the `compiler`
//!    feature cannot do this and fail with [`NO_COMPILER`].

use crate::guest_abi::{self, CellState};
use anyhow::{anyhow, bail, Context as _, Result};
#[cfg(quickcell_compiler)]
use sha2::{Digest, Sha256};
#[cfg(quickcell_compiler)]
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module,
    PoolingAllocationConfig, Store,
};

/// The guest module (`prebuilt/quickcell_guest.wasm`, or the module given
/// with `QUICKCELL_GUEST_WASM` at build time). Only a build that can compile
/// carries it.
#[cfg(quickcell_compiler)]
pub(crate) const GUEST_WASM: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/quickcell_guest.wasm"));

/// The guest pre-initialized and precompiled for [`engine_config`] with the
/// CPU baseline [`ARTIFACT_CPU`]
/// (`prebuilt/quickcell_guest.x86_64-linux.cwasm`): [`ARTIFACT_MAGIC`], the
/// SHA-256 of the guest it was made from, then the module as
/// [`Engine::precompile_module`] wrote it. Empty on targets other than
/// x86-64 Linux. `scripts/refresh-guest` makes it; a test checks that it is
/// what this Wasmtime makes of [`GUEST_WASM`].
pub(crate) const PRECOMPILED_GUEST: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/quickcell_guest.cwasm"));

/// SHA-256 of [`PRECOMPILED_GUEST`], hex encoded: names its copy in the
/// module cache.
const PRECOMPILED_SHA256: &str = env!("QUICKCELL_PRECOMPILED_SHA256");

/// First bytes of [`PRECOMPILED_GUEST`] (format version 1).
pub(crate) const ARTIFACT_MAGIC: &[u8; 8] = b"qcpre\0v1";

/// The target the precompiled guest is compiled for.
#[cfg_attr(not(quickcell_compiler), allow(dead_code))]
pub(crate) const ARTIFACT_TARGET: &str = "x86_64-unknown-linux-gnu";

/// The CPU features the precompiled guest may use: Cranelift's
/// `x86-64-v2` preset (SSE4.2, POPCNT, CMPXCHG16B), which every x86-64 CPU
/// since 2009 has. On an older CPU it does not fit and the guest is
/// compiled for that CPU instead.
#[cfg_attr(not(quickcell_compiler), allow(dead_code))]
pub(crate) const ARTIFACT_CPU: &str = "x86-64-v2";

/// The error of a build without the `compiler` feature on a machine the
/// embedded precompiled guest does not fit.
#[cfg_attr(quickcell_compiler, allow(dead_code))]
pub(crate) const NO_COMPILER: &str = "this quickcell was built without the `compiler` feature and \
     can run only the precompiled guest embedded in it, which does not fit this machine";

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

/// Instances cells may hold at once: the pool's, less the one the standby
/// holds. A cell past them waits for one ([`SharedEngine::instance`]).
pub(crate) const CELL_INSTANCES: usize = POOL_INSTANCES as usize - 1;

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

/// Bytes of a released instance's function table that stay resident in its
/// pool slot, as [`KEEP_RESIDENT_BYTES`] for its memory: the table pages an
/// instance wrote (its funcref elements, set as the guest first calls
/// through them) are zeroed with `memset` instead of released with
/// `madvise`, so the next instance in the slot takes no page faults and the
/// release no TLB shootdown across cores. The guest's one table is
/// smaller than this; per slot that has been used, at most
/// [`POOL_INSTANCES`] × this in all (16 MiB).
pub(crate) const TABLE_KEEP_RESIDENT_BYTES: usize = 64 << 10;

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
    /// The address of `Math.random`'s 8-byte state in linear memory (the
    /// module's `quickcell_random_state` global), which a restore seeds;
    /// checked to lie in the image, outside the stack.
    pub random_state: usize,
    /// What snapshots are keyed by ([`SharedEngine::image_key`]), made at
    /// the first checkpoint or restore.
    image_key: std::sync::OnceLock<[u8; 32]>,
    /// Where the pre-initialized module came from.
    pub origin: GuestOrigin,
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
    /// Instances cells may hold at once: the pool's, less the standby's.
    cell_instances: Arc<tokio::sync::Semaphore>,
    /// What restores learned of the pages each pool slot keeps written, by
    /// the address of the slot's memory ([`SharedEngine::restore_pages`]): at
    /// most [`POOL_INSTANCES`] sets of [`KEEP_RESIDENT_BYTES`] / 4 KiB
    /// bits; `None` where slots keep nothing ([`slots_keep_pages`]).
    slot_pages: Option<Mutex<std::collections::HashMap<usize, quickcell_snapshot::WrittenPages>>>,
}

/// Where the process's pre-initialized guest module came from
/// ([`crate::Runtime::guest_origin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GuestOrigin {
    /// The precompiled guest embedded in the binary: nothing was compiled.
    Embedded,
    /// The on-disk module cache ([`module_cache_dir`]): compiled by an
    /// earlier process on this machine.
    Cache,
    /// Pre-initialized and compiled by this process (and then cached).
    Compiled,
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
    ///
    /// At most [`CELL_INSTANCES`] cells hold an instance at once (the pool
    /// less the standby); a cell that finds them all held waits its turn,
    /// for at most `wait` (its time left), then fails with a message
    /// saying the host is at capacity (`runtime_unavailable`): it never
    /// meets the pool's own limit.
    pub(crate) async fn instance(
        self: &Arc<Self>,
        wait: std::time::Duration,
    ) -> Result<FreshInstance> {
        let permit = match tokio::time::timeout(wait, self.cell_instances.clone().acquire_owned())
            .await
        {
            Ok(Ok(permit)) => permit,
            _ => bail!(
                "the host is at capacity: all {CELL_INSTANCES} cell instances are in use and none was freed within the call's time; try again shortly"
            ),
        };
        let mut fresh = self.unclaimed_instance().await?;
        fresh.store.data_mut().pool_permit = Some(permit);
        Ok(fresh)
    }

    /// The standby if ready, else a fresh instance (the caller holds a
    /// permit of [`SharedEngine::cell_instances`]).
    async fn unclaimed_instance(self: &Arc<Self>) -> Result<FreshInstance> {
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

    /// The key snapshots are taken and restored under: SHA-256 over the
    /// guest's hash, the initial stack pointer and the pre-initialized
    /// memory image ([`image_digest`]). Snapshots are deltas against that
    /// image, so a process whose image differs (another guest, or the same
    /// guest pre-initialized otherwise: another host version) must refuse
    /// them, whichever way (embedded artifact, cache, compiler) each process
    /// got its module. Computed once per process, at its first checkpoint
    /// or restore (~0.7 ms for the 5.9 MB image), not at start.
    pub(crate) fn image_key(&self) -> [u8; 32] {
        *self
            .image_key
            .get_or_init(|| image_digest(&guest_hash(), self.stack.end, &self.memory_image))
    }

    /// Restores `snapshot` into the memory at `memory` (a fresh instance's)
    /// with what earlier restores learned of the pages its pool slot keeps
    /// written (`quickcell_snapshot::WrittenPages`), and learns the pages
    /// it writes: a one-tool restore into a slot that held the cell before
    /// reads no page map and pre-faults nothing (~6 µs of its ~52 µs).
    pub(crate) fn restore_pages(
        &self,
        snapshot: quickcell_snapshot::Snapshot<'_>,
        memory: &mut [u8],
    ) -> Result<(), quickcell_snapshot::SnapshotError> {
        let image_bytes = self.memory_image.len();
        let Some(slots) = &self.slot_pages else {
            return snapshot.apply(memory, image_bytes);
        };
        let base = memory.as_ptr() as usize;
        let lock = || {
            slots
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        };
        let mut known = lock()
            .remove(&base)
            .unwrap_or_else(|| quickcell_snapshot::WrittenPages::new(KEEP_RESIDENT_BYTES));
        let applied = snapshot.apply_known(memory, image_bytes, &mut known);
        let mut slots = lock();
        if slots.len() < POOL_INSTANCES as usize {
            slots.insert(base, known);
        }
        applied
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

/// Whether instances are made in the pooling allocator's slots (not with
/// `QUICKCELL_NO_POOL`).
fn pooled() -> bool {
    std::env::var_os("QUICKCELL_NO_POOL").is_none()
}

/// Whether a released instance's slot keeps the pages it wrote resident
/// and private ([`KEEP_RESIDENT_BYTES`]; needs the pool and Linux's
/// `PAGEMAP_SCAN`).
fn slots_keep_pages() -> bool {
    pooled() && PoolingAllocationConfig::is_pagemap_scan_available()
}

fn engine_config() -> Config {
    let mut config = Config::new();
    config.consume_fuel(true);
    // Everything that decides whether a precompiled module fits is set
    // here, not left to which Wasmtime features a build happens to unify:
    // builds with and without the `compiler` feature (whose wasmtime-wizer
    // brings `threads`) must accept the same artifact.
    config.wasm_features(wasmtime::WasmFeatures::THREADS, false);
    config.collector(wasmtime::Collector::Null);
    config.max_wasm_stack(MAX_WASM_STACK);
    config.async_stack_size(MAX_WASM_STACK + (1 << 20));
    config.memory_init_cow(true);
    #[cfg(quickcell_compiler)]
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
    if !pooled() {
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
    if slots_keep_pages() {
        pool.pagemap_scan(wasmtime::Enabled::Yes)
            .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
            .table_keep_resident(TABLE_KEEP_RESIDENT_BYTES);
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
/// and neither is writable by group or others (see `cache_trusted` in the source).
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
        // Diagnostic aid: with `QUICKCELL_IGNORE_PRECOMPILED` set, the
        // embedded artifact is not used (the module cache or the compiler
        // is), as on a machine it does not fit.
        let precompiled = match std::env::var_os("QUICKCELL_IGNORE_PRECOMPILED") {
            Some(_) => None,
            None => Some(PRECOMPILED_GUEST),
        };
        Self::create_from(precompiled).await
    }

    /// The engine, with the module from `precompiled` (an artifact in the
    /// format of [`PRECOMPILED_GUEST`]) if it is given and fits, else from
    /// the cache or compiled.
    async fn create_from(precompiled: Option<&[u8]>) -> Result<Self> {
        let engine = Engine::new(&engine_config())
            .map_err(|e| anyhow!("cannot create the Wasmtime engine: {e}"))?;
        let mut linker: Linker<CellState> = Linker::new(&engine);
        guest_abi::add_to_linker(&mut linker)?;

        let embedded = match precompiled {
            Some(artifact) => load_precompiled(&engine, artifact, Some(PRECOMPILED_SHA256)),
            None => Err(anyhow!("QUICKCELL_IGNORE_PRECOMPILED is set")),
        };
        let (module, origin) = match embedded {
            Ok(module) => {
                tracing::debug!("loaded the precompiled guest embedded in the binary");
                (module, GuestOrigin::Embedded)
            }
            Err(why) => {
                tracing::debug!(reason = %why, "the precompiled guest does not fit; using the module cache or compiling");
                compiled_module(&engine, &linker, why).await?
            }
        };
        let initial_memory_bytes = module
            .exports()
            .find_map(|e| e.ty().memory().map(|m| m.minimum() as usize * 65536))
            .ok_or_else(|| anyhow!("the guest module exports no memory"))?;
        let instance_pre = linker
            .instantiate_pre(&module)
            .map_err(|e| anyhow!("cannot link the guest module: {e}"))?;
        let (memory_image, initial_sp, random_state) =
            read_memory_image(&engine, &instance_pre).await?;
        let stack = initial_sp.saturating_sub(GUEST_STACK_BYTES)..initial_sp;
        let state_end = random_state.saturating_add(8);
        if state_end > memory_image.len() || (random_state < stack.end && state_end > stack.start) {
            bail!("the guest's random state ({random_state:#x}) is not in its data");
        }
        Ok(Self {
            engine,
            instance_pre,
            initial_memory_bytes,
            memory_image,
            stack,
            random_state,
            image_key: std::sync::OnceLock::new(),
            origin,
            hot_pages: std::sync::OnceLock::new(),
            standby: Mutex::new(None),
            standby_pending: AtomicBool::new(false),
            cell_instances: Arc::new(tokio::sync::Semaphore::new(CELL_INSTANCES)),
            slot_pages: slots_keep_pages().then(Default::default),
        })
    }
}

/// A store with placeholder [`CellState`] (no deadline) and unlimited
/// fuel, yielding every [`YIELD_FUEL`].
fn unlimited_store(engine: &Engine) -> Result<Store<CellState>> {
    store_with(engine, CellState::placeholder())
}

/// A store with `state`, unlimited fuel, yielding every [`YIELD_FUEL`].
fn store_with(engine: &Engine, state: CellState) -> Result<Store<CellState>> {
    let mut store = Store::new(engine, state);
    store.fuel_async_yield_interval(Some(YIELD_FUEL))?;
    store.set_fuel(u64::MAX)?;
    Ok(store)
}

/// SHA-256 over `guest`, `stack_end`, the length of `image` and each of
/// its 4 KiB pages that holds a non-zero byte, after the page's index (so
/// that the digest names the image exactly). The zero pages — the 4 MiB
/// shadow stack and the heap's untouched reserve, 1,329 of the image's
/// 1,456 pages — are skipped: testing a page for zero costs a tenth of
/// hashing it (measured: 4.2 ms for the whole image, 0.7 ms so).
fn image_digest(guest: &[u8], stack_end: usize, image: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    let mut digest = sha2::Sha256::new();
    digest.update(guest);
    digest.update((stack_end as u64).to_le_bytes());
    digest.update((image.len() as u64).to_le_bytes());
    for (index, page) in image.chunks(quickcell_snapshot::PAGE_BYTES).enumerate() {
        // OR-folded 64 bytes at a time, which the compiler vectorizes.
        let zero = page
            .chunks(64)
            .all(|bytes| bytes.iter().fold(0, |acc, &b| acc | b) == 0);
        if !zero {
            digest.update((index as u64).to_le_bytes());
            digest.update(page);
        }
    }
    digest.finalize().into()
}

/// Instantiates the module once; returns a copy of its initial linear
/// memory, the initial value of its stack pointer and the address of its
/// random state.
async fn read_memory_image(
    engine: &Engine,
    pre: &InstancePre<CellState>,
) -> Result<(Vec<u8>, usize, usize)> {
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
    let random_state = instance
        .get_global(&mut store, "quickcell_random_state")
        .and_then(|g| g.get(&mut store).i32())
        .ok_or_else(|| anyhow!("the guest module exports no `quickcell_random_state`"))?;
    Ok((
        memory.data(&store).to_vec(),
        sp as u32 as usize,
        random_state as u32 as usize,
    ))
}

/// The module in `artifact` (the format of [`PRECOMPILED_GUEST`]) if it was
/// made from this build's guest and fits `engine` and this CPU; else why not.
///
/// With `cache_name` (the artifact's SHA-256), the module is mapped from
/// its copy in the module cache, written there on first use: Wasmtime backs
/// the memory image of a module mapped from a file with the file itself,
/// while one deserialized from bytes gets its image copied into fresh
/// memory in every process (measured: a warm `quickcell exec` took ~25 ms
/// from the bytes, ~14 ms from the file). Where the cache cannot be
/// written, the bytes are used.
fn load_precompiled(engine: &Engine, artifact: &[u8], cache_name: Option<&str>) -> Result<Module> {
    if artifact.is_empty() {
        bail!("this build embeds no precompiled guest for its target");
    }
    let Some(rest) = artifact.strip_prefix(ARTIFACT_MAGIC.as_slice()) else {
        bail!("the embedded artifact does not start with {ARTIFACT_MAGIC:?}");
    };
    let (made_from, module) = rest
        .split_at_checked(32)
        .context("the embedded artifact is truncated")?;
    if made_from != guest_hash() {
        bail!("the embedded artifact was made from another guest than the one this build carries");
    }
    if let Some(name) = cache_name {
        let path =
            module_cache_dir().join(format!("embedded-{}.cwasm", &name[..24.min(name.len())]));
        if let Some(module) = load_cached(engine, &path) {
            return Ok(module);
        }
        match write_cache_entry(&path, module) {
            Ok(()) => {
                if let Some(module) = load_cached(engine, &path) {
                    return Ok(module);
                }
            }
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "cannot copy the precompiled guest into the module cache; loading it from memory")
            }
        }
    }
    // SAFETY: the bytes are part of this binary: `Engine::precompile_module`
    // output for this engine configuration and guest (checked by the test
    // `guest::the_embedded_artifact_is_the_committed_guest_precompiled`).
    // Wasmtime checks the header, its major version (the exact version is
    // pinned in Cargo.toml, and the test fails on any other output), the
    // configuration, and that this CPU has every feature the code uses,
    // before running any of it.
    unsafe { Module::deserialize(engine, module) }
        .map_err(|e| anyhow!("Wasmtime refuses the embedded artifact: {e:#}"))
}

/// The module from the on-disk cache, else pre-initialized and compiled now
/// (and cached).
#[cfg(quickcell_compiler)]
async fn compiled_module(
    engine: &Engine,
    linker: &Linker<CellState>,
    _why: anyhow::Error,
) -> Result<(Module, GuestOrigin)> {
    let cache_path = module_cache_dir().join(format!("guest-{}.cwasm", cache_key(engine)));
    if let Some(module) = load_cached(engine, &cache_path) {
        return Ok((module, GuestOrigin::Cache));
    }
    let wasm = preinitialize(engine, linker).await?;
    let module = Module::new(engine, &wasm)
        .map_err(|e| anyhow!("compiling the pre-initialized guest failed: {e}"))?;
    store_cached(&module, &cache_path);
    Ok((module, GuestOrigin::Compiled))
}

#[cfg(not(quickcell_compiler))]
async fn compiled_module(
    _engine: &Engine,
    _linker: &Linker<CellState>,
    why: anyhow::Error,
) -> Result<(Module, GuestOrigin)> {
    bail!("{NO_COMPILER}: {why:#}")
}

/// [`PRECOMPILED_GUEST`] made afresh: [`GUEST_WASM`] pre-initialized and
/// precompiled for [`ARTIFACT_TARGET`] / [`ARTIFACT_CPU`] with
/// [`engine_config`]. Deterministic: the same guest and Wasmtime give the
/// same bytes on any machine that can run the pre-initialization.
#[cfg(quickcell_compiler)]
pub(crate) async fn make_precompiled_guest() -> Result<Vec<u8>> {
    let mut config = engine_config();
    config
        .target(ARTIFACT_TARGET)
        .map_err(|e| anyhow!("cannot target {ARTIFACT_TARGET}: {e}"))?;
    // SAFETY: a Cranelift preset of the target's own ISA; Wasmtime records
    // the features in the artifact and checks them against the CPU that
    // loads it.
    unsafe {
        config.cranelift_flag_enable(ARTIFACT_CPU);
    }
    let engine = Engine::new(&config)
        .map_err(|e| anyhow!("cannot create the Wasmtime engine for the artifact: {e}"))?;
    let mut linker: Linker<CellState> = Linker::new(&engine);
    guest_abi::add_to_linker(&mut linker)?;
    let wasm = preinitialize(&engine, &linker).await?;
    let module = engine
        .precompile_module(&wasm)
        .map_err(|e| anyhow!("precompiling the guest failed: {e}"))?;
    let mut artifact = Vec::with_capacity(ARTIFACT_MAGIC.len() + 32 + module.len());
    artifact.extend_from_slice(ARTIFACT_MAGIC);
    artifact.extend_from_slice(&guest_hash());
    artifact.extend_from_slice(&module);
    Ok(artifact)
}

#[cfg(quickcell_compiler)]
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

#[cfg(quickcell_compiler)]
fn store_cached(module: &Module, path: &Path) {
    let written = module
        .serialize()
        .map_err(|e| anyhow!("{e}"))
        .and_then(|bytes| write_cache_entry(path, &bytes));
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "cannot write the module cache");
    }
}

/// Writes a module cache entry: 0600 in a trusted directory made 0700,
/// whole or not at all (written aside, then renamed).
fn write_cache_entry(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    let write = || -> Result<()> {
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
        let written = file.write_all(bytes);
        drop(file);
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e.into());
        }
        std::fs::rename(&tmp, path)?;
        prune_cache(dir, path, MAX_MODULE_CACHE_BYTES);
        Ok(())
    };
    write()
}

/// Most bytes of compiled modules the module cache keeps: a cache entry is
/// about 8 MB (one per Wasmtime build and engine configuration, and one
/// copy of each embedded artifact), so this holds the last eight; older
/// entries are deleted, oldest (by modification time) first, whenever an
/// entry is written. Unit: bytes; scope: the cache directory.
pub(crate) const MAX_MODULE_CACHE_BYTES: u64 = 64 << 20;

/// Most directory entries one prune looks at (the directory is the
/// user's; this bounds the work a crowded one costs).
const MAX_CACHE_ENTRIES_SCANNED: usize = 4_096;

/// A writer's temporary file older than this was left by a process that
/// died mid-write, and is deleted.
const STALE_CACHE_TMP: std::time::Duration = std::time::Duration::from_secs(3_600);

/// Deletes the oldest module cache entries (`guest-*.cwasm`,
/// `embedded-*.cwasm`) of `dir` until they take at most `cap` bytes, never
/// `keep` (the entry just written); and temporary files older than
/// [`STALE_CACHE_TMP`]. Files of other names are left alone. Best effort:
/// what cannot be read or deleted is skipped.
fn prune_cache(dir: &Path, keep: &Path, cap: u64) {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    let mut entries = Vec::new();
    for entry in listing.flatten().take(MAX_CACHE_ENTRIES_SCANNED) {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let modified = meta.modified().unwrap_or(now);
        if name.starts_with(".tmp-") {
            if now.duration_since(modified).unwrap_or_default() > STALE_CACHE_TMP {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        let is_entry = name.ends_with(".cwasm")
            && (name.starts_with("guest-") || name.starts_with("embedded-"));
        if is_entry {
            entries.push((modified, path, meta.len()));
        }
    }
    let mut total: u64 = entries.iter().map(|(_, _, len)| len).sum();
    entries.sort_by_key(|(modified, _, _)| *modified);
    for (_, path, len) in entries {
        if total <= cap {
            break;
        }
        if path == keep {
            continue;
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {
                tracing::debug!(path = %path.display(), "pruned an old module cache entry");
                total -= len;
            }
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "cannot prune a module cache entry")
            }
        }
    }
}

/// Runs the guest's initialization once under wasmtime-wizer; returns the
/// pre-initialized module's bytes.
#[cfg(quickcell_compiler)]
async fn preinitialize(engine: &Engine, linker: &Linker<CellState>) -> Result<Vec<u8>> {
    let mut store = store_with(engine, CellState::for_preinit())?;
    let wizer = wasmtime_wizer::Wizer::new();
    let initialized = wizer
        .run(&mut store, GUEST_WASM, async |store, module| {
            linker.instantiate_async(store, module).await
        })
        .await
        .map_err(|e| anyhow!("pre-initializing the guest failed: {e:?}"))?;
    Ok(initialized)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The image digest skips zero pages but still names the image
    /// exactly: a byte anywhere, a zero page more, another stack end or
    /// another guest each give another key.
    #[test]
    fn the_image_digest_names_every_byte_and_the_length() {
        let page = quickcell_snapshot::PAGE_BYTES;
        let mut image = vec![0u8; 8 * page];
        image[3 * page + 17] = 9;
        let key = image_digest(b"guest", 4 * page, &image);
        assert_eq!(key, image_digest(b"guest", 4 * page, &image.clone()));
        let mut moved = vec![0u8; 8 * page];
        moved[2 * page + 17] = 9;
        let mut in_zero_page = image.clone();
        in_zero_page[6 * page + page - 1] = 1;
        let mut longer = image.clone();
        longer.resize(9 * page, 0);
        let mut shorter = image.clone();
        shorter.truncate(7 * page + 100);
        for (other, why) in [
            (
                image_digest(b"guest", 4 * page, &moved),
                "the byte moved a page",
            ),
            (
                image_digest(b"guest", 4 * page, &in_zero_page),
                "a byte in a zero page",
            ),
            (
                image_digest(b"guest", 4 * page, &longer),
                "a zero page more",
            ),
            (
                image_digest(b"guest", 4 * page, &shorter),
                "a shorter zero tail",
            ),
            (
                image_digest(b"guest", 5 * page, &image),
                "another stack end",
            ),
            (image_digest(b"other", 4 * page, &image), "another guest"),
        ] {
            assert_ne!(key, other, "{why}");
        }
    }

    /// A cache directory with entries of `len` bytes written `age` seconds
    /// ago, by name.
    fn cache_with(entries: &[(&str, u64, u64)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("quickcell-prune-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let now = std::time::SystemTime::now();
        for (name, len, age) in entries {
            let file = std::fs::File::create(dir.join(name)).unwrap();
            file.set_len(*len).unwrap();
            file.set_modified(now - std::time::Duration::from_secs(*age))
                .unwrap();
        }
        dir
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    /// Within the cap (obeyed) nothing is deleted; over it (violated) the
    /// oldest entries go first until the rest fit, never the entry just
    /// written (even when it is the oldest) and never a file of another
    /// name; a stale temporary file goes, a fresh one stays.
    #[test]
    fn the_module_cache_is_pruned_oldest_first_to_its_cap() {
        let dir = cache_with(&[
            ("guest-a.cwasm", 40, 400),
            ("embedded-b.cwasm", 40, 300),
            ("guest-c.cwasm", 40, 200),
            ("guest-d.cwasm", 40, 100),
            ("notes.txt", 1000, 500),
            (".tmp-1-old", 10, 7_200),
            (".tmp-2-new", 10, 10),
        ]);
        prune_cache(&dir, &dir.join("guest-d.cwasm"), 160);
        // 160 bytes of entries fit 160; only the stale temporary file goes.
        assert_eq!(
            names(&dir),
            [
                ".tmp-2-new",
                "embedded-b.cwasm",
                "guest-a.cwasm",
                "guest-c.cwasm",
                "guest-d.cwasm",
                "notes.txt"
            ]
        );
        prune_cache(&dir, &dir.join("guest-a.cwasm"), 80);
        assert_eq!(
            names(&dir),
            [".tmp-2-new", "guest-a.cwasm", "guest-d.cwasm", "notes.txt"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The embedded artifact with its header replaced by `header`.
    fn with_header(header: &[u8]) -> Vec<u8> {
        let module = &PRECOMPILED_GUEST[ARTIFACT_MAGIC.len() + 32..];
        let mut artifact = header.to_vec();
        artifact.extend_from_slice(module);
        artifact
    }

    fn refusal(engine: &Engine, artifact: &[u8]) -> String {
        match load_precompiled(engine, artifact, None) {
            Ok(_) => panic!("an unfit artifact was loaded"),
            Err(e) => format!("{e:#}"),
        }
    }

    /// Obeyed: the embedded artifact loads into the engine of this build.
    /// Violated: an artifact that is missing, has another header, was made
    /// from another guest, is cut short or is damaged is refused with a
    /// reason (and the engine falls back to the cache or the compiler).
    #[test]
    fn only_an_artifact_of_this_guest_and_engine_is_loaded() {
        if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
            return;
        }
        let engine = Engine::new(&engine_config()).unwrap();
        load_precompiled(&engine, PRECOMPILED_GUEST, None).expect("the embedded artifact fits");

        assert!(refusal(&engine, &[]).contains("embeds no precompiled guest"));
        assert!(refusal(&engine, &with_header(b"qcpre\0v0")).contains("does not start with"));
        let mut other_guest = ARTIFACT_MAGIC.to_vec();
        other_guest.extend_from_slice(&[7; 32]);
        assert!(refusal(&engine, &with_header(&other_guest)).contains("another guest"));
        assert!(refusal(&engine, &PRECOMPILED_GUEST[..20]).contains("truncated"));
        let mut damaged = PRECOMPILED_GUEST.to_vec();
        let module_start = ARTIFACT_MAGIC.len() + 32;
        damaged[module_start..module_start + 16].fill(0);
        assert!(refusal(&engine, &damaged).contains("Wasmtime refuses"));
    }
}
