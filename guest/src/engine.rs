//! The QuickJS engine as the guest configures it, in one place: the
//! runtime over the guest allocator, the context with the intrinsics cells
//! get, the collection threshold, `Math.random` and the text codecs.
//!
//! The guest is built on rquickjs directly. javy (8.1.0, the newest
//! published) pins rquickjs 0.12 = QuickJS-ng 0.15.1; rquickjs 0.14 bundles
//! QuickJS-ng 0.16.2, whose small-block arena allocator and faster
//! interpreter are the reason for the change. What javy did for this guest
//! was configuration — which intrinsics, `Math.random` over `fastrand`, a
//! `TextEncoder`/`TextDecoder` — and it is here now (`docs/decisions.md`,
//! "The guest engine").

use crate::text_encoding;
use core::cell::Cell;
use rquickjs::context::intrinsic::{
    Date, Eval, Json, MapSet, Performance, Promise, Proxy, RegExp, RegExpCompiler, TypedArrays,
};
use rquickjs::{prelude::Func, qjs, Context, Object, Runtime};

/// How far the QuickJS heap may grow past what it holds at a cell's start
/// before QuickJS runs its cycle collector on its own, in bytes as QuickJS
/// counts them (a small block counts its arena slot plus 8 bytes, a large
/// block 8 bytes: see [`GuestAllocator::usable_size`]): a quarter of the
/// heap limit, at least 256 KiB and at most [`GC_HEADROOM_MAX`]. Reference
/// counting frees most garbage; this bounds cyclic garbage. A collection
/// rewrites the marks of every object, the pre-initialized runtime's too,
/// so a small cell that collects parks with a much larger snapshot.
pub(crate) fn gc_headroom(heap_limit: usize) -> usize {
    (heap_limit / 4).clamp(256 * 1024, GC_HEADROOM_MAX)
}

/// Most of [`gc_headroom`], in bytes.
const GC_HEADROOM_MAX: usize = 4 * 1024 * 1024;

/// What QuickJS counts the pre-initialized heap as, in bytes: measured
/// once, at the end of pre-initialization ([`measure_initial_heap`]), so
/// that a cell start does not walk the heap for it.
static INITIAL_HEAP: HeapCell = HeapCell(Cell::new(0));

struct HeapCell(Cell<usize>);

// SAFETY: the guest is single-threaded.
unsafe impl Sync for HeapCell {}

/// Records [`INITIAL_HEAP`]; run at the end of pre-initialization.
pub(crate) fn measure_initial_heap(rt: *mut qjs::JSRuntime) {
    let mut usage = core::mem::MaybeUninit::<qjs::JSMemoryUsage>::zeroed();
    // SAFETY: the runtime is live; the guest is single-threaded.
    let held = unsafe {
        qjs::JS_ComputeMemoryUsage(rt, usage.as_mut_ptr());
        usage.assume_init().malloc_size as usize
    };
    INITIAL_HEAP.0.set(held);
}

/// Points QuickJS's next automatic collection [`gc_headroom`] past the
/// pre-initialized heap (at a cell's start, when the heap limit is known).
pub(crate) fn set_gc_headroom(rt: *mut qjs::JSRuntime) {
    let threshold = INITIAL_HEAP
        .0
        .get()
        .saturating_add(gc_headroom(HEAP.limit.get()));
    // SAFETY: the runtime is live; the guest is single-threaded.
    unsafe { qjs::JS_SetGCThreshold(rt, threshold as _) };
}

/// The intrinsics a cell's context has besides QuickJS's base objects:
/// the set javy 8.1's default configuration gave the guest (with
/// `performance`), so cells see the same globals as before.
type CellIntrinsics = (
    Date,
    Eval,
    RegExpCompiler,
    RegExp,
    Json,
    Proxy,
    MapSet,
    TypedArrays,
    Promise,
    Performance,
);

/// The one context cells run in; it keeps its runtime alive. Never
/// dropped: the guest's state lives until the instance does.
pub(crate) struct Engine {
    pub(crate) context: Context,
}

/// Builds the engine. Fails only in a wrongly built guest.
pub(crate) fn build() -> Result<Engine, String> {
    let runtime = Runtime::new_with_alloc(GuestAllocator).map_err(|e| e.to_string())?;
    let context = Context::custom::<CellIntrinsics>(&runtime).map_err(|e| e.to_string())?;
    context.with(|ctx| -> Result<(), String> {
        // A generator over [`RANDOM_STATE`], seeded by the host for every
        // cell and at every resume: QuickJS's own generator is seeded once
        // per context, so every instance made from the pre-initialized image
        // would repeat its sequence.
        let math: Object = ctx.globals().get("Math").map_err(|e| e.to_string())?;
        math.set("random", Func::from(random))
            .map_err(|e| e.to_string())?;
        text_encoding::register(&ctx)
    })?;
    Ok(Engine { context })
}

/// `Math.random`'s generator state: fastrand's WyRand over a word of our
/// own, at an address the module exports as the immutable global
/// `quickcell_random_state` (`.cargo/config.toml`). The host seeds it by
/// writing a fresh `u64` there (little-endian) when it restores a snapshot,
/// before the guest runs again: no guest call, so a resumed cell spends the
/// fuel a cell kept in memory spends. `start` seeds it from its options.
#[export_name = "quickcell_random_state"]
static RANDOM_STATE: RandomState = RandomState(Cell::new(0));

struct RandomState(Cell<u64>);

// SAFETY: the guest is single-threaded.
unsafe impl Sync for RandomState {}

/// Seeds `Math.random`.
pub(crate) fn seed_random(seed: u64) {
    RANDOM_STATE.0.set(seed);
}

/// `Math.random`: the next `f64` in `0..1` from [`RANDOM_STATE`].
fn random() -> f64 {
    let mut rng = fastrand::Rng::with_seed(RANDOM_STATE.0.get());
    let value = rng.f64();
    RANDOM_STATE.0.set(rng.get_seed());
    value
}

/// The cell's heap limit (`memoryLimitBytes`), held by the allocator hooks
/// rather than by QuickJS: QuickJS-ng 0.16 counts small blocks at their
/// arena slot, and at its own limit it cannot allocate the `InternalError`
/// it throws (it throws `null`). The hooks count what QuickJS really holds
/// (arenas and large blocks, at their usable size) and refuse past the
/// limit; after a refusal [`OOM_RESERVE`] more is granted, so QuickJS can
/// build its `out of memory` error and the prelude can report it, until the
/// heap is back under the limit. The host's linear-memory cap (limit + a
/// quarter) stays the hard bound.
struct HeapLimit {
    limit: Cell<usize>,
    used: Cell<usize>,
    reserve_open: Cell<bool>,
    /// An allocation was refused since the cell started ([`heap_refused`]).
    refused: Cell<bool>,
}

/// Bytes granted past the heap limit after a refusal (see [`HeapLimit`]).
const OOM_RESERVE: usize = 256 * 1024;

// SAFETY: the guest is single-threaded.
unsafe impl Sync for HeapLimit {}

static HEAP: HeapLimit = HeapLimit {
    limit: Cell::new(usize::MAX),
    used: Cell::new(0),
    reserve_open: Cell::new(false),
    refused: Cell::new(false),
};

/// Sets the heap limit in bytes (`usize::MAX`: none).
pub(crate) fn set_heap_limit(limit: usize) {
    HEAP.limit.set(limit);
}

/// The heap limit in bytes.
pub(crate) fn heap_limit() -> usize {
    HEAP.limit.get()
}

/// Whether the heap limit refused an allocation since the cell started
/// ([`clear_heap_refused`]). QuickJS turns a refusal inside a promise
/// reaction into a rejection nobody may observe (an endless
/// `Promise.resolve().then(loop)` chain just stops), so a cell left
/// pending with nothing to wait for after one has run out of memory; the
/// status says so (`lib.rs`, `status_json`).
pub(crate) fn heap_refused() -> bool {
    HEAP.refused.get()
}

/// Forgets earlier refusals (at a cell's start).
pub(crate) fn clear_heap_refused() {
    HEAP.refused.set(false);
}

/// Whether `extra` more bytes may be handed to QuickJS.
fn admit(extra: usize) -> bool {
    let wanted = HEAP.used.get().saturating_add(extra);
    let limit = HEAP.limit.get();
    if wanted <= limit {
        return true;
    }
    if HEAP.reserve_open.get() {
        return wanted <= limit.saturating_add(OOM_RESERVE);
    }
    HEAP.reserve_open.set(true);
    HEAP.refused.set(true);
    false
}

fn account(freed: usize, taken: usize) {
    let used = HEAP.used.get().saturating_sub(freed).saturating_add(taken);
    HEAP.used.set(used);
    if used <= HEAP.limit.get() {
        HEAP.reserve_open.set(false);
    }
}

/// QuickJS's allocator hooks over the guest allocator ([`crate::alloc`]).
/// QuickJS-ng 0.16 serves blocks up to 512 bytes from its own 4 KiB arenas,
/// so the hooks see arena refills and large blocks, not every object.
struct GuestAllocator;

fn usable(block: *mut u8) -> usize {
    if block.is_null() {
        0
    } else {
        unsafe { crate::alloc::malloc_usable_size(block.cast()) }
    }
}

// SAFETY: the functions are the guest's `malloc` family, which returns
// null or blocks aligned to 16 bytes of at least the size asked for.
unsafe impl rquickjs::allocator::Allocator for GuestAllocator {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if !admit(size) {
            return core::ptr::null_mut();
        }
        let block = unsafe { crate::alloc::alloc(size) };
        account(0, usable(block));
        block
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        if !admit(count.saturating_mul(size)) {
            return core::ptr::null_mut();
        }
        let block: *mut u8 = unsafe { crate::alloc::calloc(count, size).cast() };
        account(0, usable(block));
        block
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        account(usable(ptr), 0);
        unsafe { crate::alloc::release(ptr) }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        let old = usable(ptr);
        if new_size > old && !admit(new_size - old) {
            return core::ptr::null_mut();
        }
        let block = unsafe { crate::alloc::resize(ptr, new_size) };
        if !block.is_null() {
            account(old, usable(block));
        }
        block
    }

    /// 0, as QuickJS's default hook answers on WASI (it knows no
    /// `malloc_usable_size` there): QuickJS then counts a large block as 8
    /// bytes (its `MALLOC_OVERHEAD`) towards its heap size and collection
    /// threshold, and a small block as its arena slot. The heap limit is
    /// the hooks' own ([`HeapLimit`]).
    unsafe fn usable_size(_ptr: *mut u8) -> usize {
        0
    }
}
