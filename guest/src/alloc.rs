//! The guest's `malloc` family: size classes in front of dlmalloc.
//!
//! QuickJS allocates and frees small blocks at a furious rate (an object,
//! its property array, a string: three blocks for `{s: "x" + i}`), and
//! under wasi-libc's dlmalloc the allocator was about a fifth of all guest
//! time. These definitions replace wasi-libc's (every symbol its
//! `dlmalloc.o` exports is defined here, so the linker never pulls it in)
//! for QuickJS, Rust and libc alike:
//!
//! - **Small blocks** (up to [`SMALL_MAX`] bytes) are served from size
//!   classes in steps of [`CLASS_STEP`] bytes. Each class carves blocks
//!   from its own spans — whole Wasm pages from the page pool — and keeps
//!   freed blocks on a singly linked free list: `malloc` and `free` are a
//!   few loads and stores. What each page is (a class's span, part of a
//!   huge block, free) is recorded in [`PAGE_CLASS`], so `free` and
//!   `malloc_usable_size` need no header for small blocks.
//! - **Large blocks** (up to [`HUGE_MIN`]) come from the `dlmalloc` crate
//!   (the same algorithm as wasi-libc's), behind a 16-byte header that
//!   records the block's size and where dlmalloc's allocation starts.
//!   Growing one past its size moves it (QuickJS grows buffers
//!   geometrically, so this is amortized).
//! - **Huge blocks** (from [`HUGE_MIN`] bytes) take a run of whole pages
//!   from the page pool behind a 16-byte header that records the run's
//!   length; freeing one gives its pages back.
//! - **The page pool.** Spans and huge blocks take the lowest free run
//!   that fits before the memory grows (`memory.grow`).
//!   [`release_free_pages`] (run when the cell goes idle, after a
//!   garbage collection) counts the free blocks of every span page by walking the
//!   free lists, gives the span pages whose blocks are all free back to the
//!   pool and zeroes every free page; the fast paths count nothing. A
//!   zeroed page beyond the module's image equals fresh memory, so a
//!   snapshot does not store it: it holds the live heap, not its
//!   high-water mark.
//!
//! - **Free memory is zero** where a snapshot would otherwise store it:
//!   large blocks are zeroed as they are freed, free small blocks (all but
//!   their link word) at pre-initialization and at each checkpoint
//!   ([`zero_free_blocks`]), and free pages after a collection and at each
//!   checkpoint. A snapshot then differs from the image in what is live
//!   (and in the free lists' links), not in what was.
//!
//! Trade-off, written down: between checkpoints, memory given to a size
//! class stays with that class. A cell that fills the heap with blocks of
//! one size, frees them and then allocates blocks of another size needs
//! memory for both. Linear memory never shrinks, and the cell's
//! `memoryLimitBytes` still bounds the total. Free memory inside the large
//! blocks' dlmalloc heap is not given back. A free run at the end of the
//! memory that is too short for a huge block is not extended: the block
//! takes new pages.
//!
//! Everything lives in linear memory (statics and the heap), so a snapshot
//! carries the allocator's state like any other guest state. The guest is
//! single-threaded: the statics are never touched concurrently.

use core::arch::wasm32;
use core::ffi::c_void;
use core::ptr;

/// Granularity of the small size classes, in bytes; also the alignment of
/// every block (C's `max_align_t` on wasm32).
const CLASS_STEP: usize = 16;

/// Largest block served from a size class, in bytes.
const SMALL_MAX: usize = 512;

/// Number of small classes; class `c` holds blocks of `c * CLASS_STEP`
/// bytes (class 0 is unused: it marks pages that hold no class).
const CLASSES: usize = SMALL_MAX / CLASS_STEP + 1;

/// A Wasm page: the unit of `memory.grow` and of a size class's span.
const WASM_PAGE: usize = 65536;

/// Smallest block that takes a run of whole pages (half a page: a run
/// wastes less than half of itself).
const HUGE_MIN: usize = WASM_PAGE / 2;

/// When the page pool has no run that fits, the memory grows by at least
/// this fraction of its size (and the spare pages join the pool): each
/// `memory.grow` costs the host an `mprotect`, and in a VM a TLB shootdown
/// across cores. A cell that builds 20 MB grows ~25 times instead of ~300.
const GROW_FRACTION: usize = 8;

/// Most pages one growth takes beyond what is needed (4 MiB).
const GROW_MAX_PAGES: usize = 64;

/// Bytes in front of a huge block: the run's length in pages (a `u32`,
/// padded to the block alignment).
const HUGE_HEADER: usize = 16;

/// [`PAGE_CLASS`] of a page of a huge block's run.
const HUGE: u8 = 254;

/// [`PAGE_CLASS`] of a span of arena blocks ([`ARENA_BLOCK`] bytes each).
const ARENA: u8 = 252;

/// Size of an arena block: QuickJS-ng 0.16 takes its small blocks from
/// arenas of at most 4 KiB (its `JS_ARENA_SIZE`), one allocation each.
/// Served from whole-page spans like a size class, an arena's page is
/// released and zeroed at a checkpoint once all its arenas are free,
/// instead of staying dirty in the large blocks' dlmalloc heap.
const ARENA_BLOCK: usize = 4096;

/// Blocks above this size, up to [`ARENA_BLOCK`], are arena blocks.
const ARENA_MIN: usize = ARENA_BLOCK - 512;

/// Arena blocks in a span page.
const ARENA_BLOCKS_PER_PAGE: usize = WASM_PAGE / ARENA_BLOCK;

/// [`PAGE_CLASS`] of a free page that may hold old data.
const FREE_DIRTY: u8 = 253;

/// [`PAGE_CLASS`] of a free page that is all zeros.
const FREE_CLEAN: u8 = 255;

/// Bytes in front of a large block: where its dlmalloc allocation starts
/// and its usable size (two `u32`s, padded to the block alignment).
const LARGE_HEADER: usize = 16;

/// Alignment of dlmalloc's own allocations (two words).
const DLMALLOC_ALIGN: usize = 2 * core::mem::size_of::<usize>();

/// Mutable allocator state. Single-threaded guest: see the module docs.
struct State {
    /// Head of each class's free list (0 = empty). A free block's first
    /// word holds the next block's address.
    free: [usize; CLASSES],
    /// Next uncarved byte of each class's current span, and its end.
    carve: [(usize, usize); CLASSES],
    /// How many pages are free ([`FREE_DIRTY`] or [`FREE_CLEAN`]).
    free_pages: usize,
    /// No page below this one is free.
    lowest_free: usize,
    /// Bytes of new spans, huge blocks and large blocks handed out since
    /// [`reset_allocated_bytes`] (counted off the fast paths: a small block
    /// taken from a free list or the current span is not counted).
    allocated: u64,
    /// Head of the arena blocks' free list, and their carve like `carve`.
    arena_free: usize,
    arena_carve: (usize, usize),
    large: dlmalloc::Dlmalloc,
}

struct Global(core::cell::UnsafeCell<State>);

// SAFETY: the guest is a single-threaded Wasm module.
unsafe impl Sync for Global {}

static STATE: Global = Global(core::cell::UnsafeCell::new(State {
    free: [0; CLASSES],
    carve: [(0, 0); CLASSES],
    free_pages: 0,
    lowest_free: usize::MAX,
    allocated: 0,
    arena_free: 0,
    arena_carve: (0, 0),
    large: dlmalloc::Dlmalloc::new(),
}));

/// What every Wasm page of the 4 GiB address space is: 0 = not the pool's
/// (statics, dlmalloc), `1..CLASSES` = a span of that size class, [`HUGE`],
/// [`FREE_DIRTY`] or [`FREE_CLEAN`].
struct PageClasses(core::cell::UnsafeCell<[u8; 65536]>);

// SAFETY: as for `Global`.
unsafe impl Sync for PageClasses {}

static PAGE_CLASS: PageClasses = PageClasses(core::cell::UnsafeCell::new([0; 65536]));

/// A `u16` per Wasm page of the address space.
struct PageTable(core::cell::UnsafeCell<[u16; 65536]>);

// SAFETY: as for `Global`.
unsafe impl Sync for PageTable {}

/// Scratch for [`release_free_pages`]: free blocks per span page.
static FREE_BLOCKS: PageTable = PageTable(core::cell::UnsafeCell::new([0; 65536]));

#[inline(always)]
fn state() -> *mut State {
    STATE.0.get()
}

#[inline(always)]
fn class_of_page(addr: usize) -> usize {
    // SAFETY: single-threaded; the index is below 65536 for any wasm32
    // address.
    unsafe { (*PAGE_CLASS.0.get())[addr / WASM_PAGE] as usize }
}

/// Whether a [`PAGE_CLASS`] entry is a size class (one comparison: the
/// hot paths test this first).
#[inline(always)]
fn is_class(kind: usize) -> bool {
    kind.wrapping_sub(1) < CLASSES - 1
}

fn is_free(kind: u8) -> bool {
    kind == FREE_DIRTY || kind == FREE_CLEAN
}

/// Takes `n` consecutive pages: the lowest free run that fits, else new
/// pages ([`GROW_FRACTION`]). The caller records what they become in
/// [`PAGE_CLASS`].
unsafe fn take_pages(n: usize) -> Option<usize> {
    let s = state();
    if (*s).free_pages >= n {
        let kinds = &*PAGE_CLASS.0.get();
        let pages = wasm32::memory_size(0);
        let mut first_free = None;
        let mut run = 0;
        for (page, &kind) in kinds.iter().enumerate().take(pages).skip((*s).lowest_free) {
            if !is_free(kind) {
                run = 0;
                continue;
            }
            first_free.get_or_insert(page);
            run += 1;
            if run == n {
                let start = page + 1 - n;
                (*s).free_pages -= n;
                (*s).lowest_free = match first_free {
                    Some(f) if f < start => f,
                    _ => page + 1,
                };
                return Some(start);
            }
        }
        (*s).lowest_free = first_free.unwrap_or(pages);
    }
    // Grow by a batch; the pages beyond `n` go to the pool, clean (fresh
    // memory is zeros). A batch the host refuses is retried with just `n`.
    let batch = n.max((wasm32::memory_size(0) / GROW_FRACTION).clamp(1, GROW_MAX_PAGES));
    let mut grown = batch;
    let mut previous = wasm32::memory_grow(0, batch);
    if previous == usize::MAX && batch > n {
        grown = n;
        previous = wasm32::memory_grow(0, n);
    }
    if previous == usize::MAX {
        return None;
    }
    if grown > n {
        (&mut *PAGE_CLASS.0.get())[previous + n..previous + grown].fill(FREE_CLEAN);
        (*s).free_pages += grown - n;
        (*s).lowest_free = (*s).lowest_free.min(previous + n);
    }
    Some(previous)
}

/// Gives the pages `first..first + n` back to the pool (to be zeroed by
/// the next [`release_free_pages`]).
unsafe fn give_pages(first: usize, n: usize) {
    let s = state();
    (&mut *PAGE_CLASS.0.get())[first..first + n].fill(FREE_DIRTY);
    (*s).free_pages += n;
    (*s).lowest_free = (*s).lowest_free.min(first);
}

/// Takes a span for `class` and carves the first block from it.
#[cold]
#[inline(never)]
unsafe fn refill(class: usize) -> *mut u8 {
    let s = state();
    let Some(page) = take_pages(1) else {
        return ptr::null_mut();
    };
    (*s).allocated += WASM_PAGE as u64;
    let base = page * WASM_PAGE;
    // A page a huge block gave back still holds its data: zeroed here, so
    // that the span's uncarved blocks are zero as fresh ones are (a
    // snapshot would store the old data until they are carved).
    if (*PAGE_CLASS.0.get())[page] == FREE_DIRTY {
        ptr::write_bytes(base as *mut u8, 0, WASM_PAGE);
    }
    (*PAGE_CLASS.0.get())[page] = class as u8;
    let size = class * CLASS_STEP;
    (*s).carve[class] = (base + size, base + WASM_PAGE - WASM_PAGE % size);
    base as *mut u8
}

/// A block of `class` from its free list or its current span, if either
/// has one.
#[inline(always)]
unsafe fn take_block(class: usize) -> Option<*mut u8> {
    let s = state();
    let head = (*s).free[class];
    if head != 0 {
        (*s).free[class] = *(head as *const usize);
        return Some(head as *mut u8);
    }
    let (next, end) = (*s).carve[class];
    if next < end {
        (*s).carve[class].0 = next + class * CLASS_STEP;
        return Some(next as *mut u8);
    }
    None
}

/// Whether span page `page` of `class` can be released, once
/// [`FREE_BLOCKS`] holds its free-block count: every block it holds is
/// free, and it is not the span its class is carving (whose uncarved
/// blocks are on no list).
unsafe fn releasable(page: usize, class: usize) -> bool {
    let (_, end) = (*state()).carve[class];
    let blocks = WASM_PAGE / (class * CLASS_STEP);
    (*FREE_BLOCKS.0.get())[page] as usize == blocks && !(end != 0 && (end - 1) / WASM_PAGE == page)
}

/// Releases every span page whose blocks are all free (its blocks leave
/// their free list and the page joins the pool), then zeroes every free
/// page that is not zero yet. Cost: two passes over the memory's pages and two over the free lists,
/// plus the zeroing.
pub(crate) fn release_free_pages() {
    // SAFETY: single-threaded (module docs); every address walked is a
    // block on a free list or a page below the memory's size.
    unsafe {
        let s = state();
        let classes = &mut *PAGE_CLASS.0.get();
        let free_blocks = &mut *FREE_BLOCKS.0.get();
        let pages = wasm32::memory_size(0);
        free_blocks[..pages].fill(0);
        for class in 1..CLASSES {
            let mut block = (*s).free[class];
            while block != 0 {
                free_blocks[block / WASM_PAGE] += 1;
                block = *(block as *const usize);
            }
        }
        let mut block = (*s).arena_free;
        while block != 0 {
            free_blocks[block / WASM_PAGE] += 1;
            block = *(block as *const usize);
        }
        let arena_carving = match (*s).arena_carve {
            (_, 0) => usize::MAX,
            (_, end) => (end - 1) / WASM_PAGE,
        };
        let arena_releasable = |page: usize| {
            free_blocks[page] as usize == ARENA_BLOCKS_PER_PAGE && page != arena_carving
        };
        let mut link: *mut usize = &mut (*s).arena_free;
        while *link != 0 {
            let block = *link;
            if arena_releasable(block / WASM_PAGE) {
                *link = *(block as *const usize);
            } else {
                link = block as *mut usize;
            }
        }
        // Unlink the blocks of the pages about to go; their link words are
        // read before the pages are zeroed.
        for class in 1..CLASSES {
            let mut link: *mut usize = &mut (*s).free[class];
            while *link != 0 {
                let block = *link;
                if releasable(block / WASM_PAGE, class) {
                    *link = *(block as *const usize);
                } else {
                    link = block as *mut usize;
                }
            }
        }
        for (page, kind) in classes.iter_mut().enumerate().take(pages) {
            let released = (is_class(*kind as usize) && releasable(page, *kind as usize))
                || (*kind == ARENA && arena_releasable(page));
            if released {
                (*s).free_pages += 1;
                (*s).lowest_free = (*s).lowest_free.min(page);
            }
            if released || *kind == FREE_DIRTY {
                ptr::write_bytes((page * WASM_PAGE) as *mut u8, 0, WASM_PAGE);
                *kind = FREE_CLEAN;
            }
        }
    }
}

/// Zeroes the free pages that may hold old data, and the free small
/// blocks (all but their first word, the free list's link), so that a
/// snapshot stores no garbage for them (large blocks are zeroed as they
/// are freed, in `release_slow`): a free
/// block of a pre-initialized image is zero, and one freed by a cell and
/// zeroed again at its checkpoint equals it (its page then differs at most
/// in link words). With `all_blocks` every list is walked (at
/// pre-initialization); otherwise each list only up to its first block
/// that is zero already. The lists are last in, first out, so the blocks
/// a cell freed since the last zeroing come first and the untouched ones
/// after: the walk costs the blocks freed since, plus one per class. (A
/// block freed with a zero body stops the walk early: blocks behind it keep
/// their garbage, which costs bytes, never correctness.)
pub(crate) fn zero_free_blocks(all_blocks: bool) {
    zero_dirty_pages();
    // SAFETY: single-threaded (module docs); every block walked is on a
    // free list, owned by the allocator, `class * CLASS_STEP` bytes long
    // and aligned to `CLASS_STEP`: its link is the `u32` at 0, its body a
    // `u32` at 4 and `u64`s from 8.
    unsafe {
        let s = state();
        for class in 1..CLASSES {
            let longs = (class * CLASS_STEP - 8) / 8;
            let mut block = (*s).free[class];
            while block != 0 {
                let second = *((block + 4) as *const u32);
                let rest = core::slice::from_raw_parts((block + 8) as *const u64, longs);
                if second == 0 && rest.iter().all(|&w| w == 0) {
                    if !all_blocks {
                        break;
                    }
                } else {
                    ptr::write_bytes((block + 4) as *mut u8, 0, class * CLASS_STEP - 4);
                }
                block = *(block as *const usize);
            }
        }
    }
}

/// Zeroes the free pages that may hold old data (huge blocks' runs given
/// back since the last [`release_free_pages`]): one pass over the page
/// kinds of the memory's pages, plus the zeroing.
fn zero_dirty_pages() {
    // SAFETY: single-threaded (module docs); every page zeroed is free and
    // below the memory's size.
    unsafe {
        let classes = &mut *PAGE_CLASS.0.get();
        for (page, kind) in classes.iter_mut().enumerate().take(wasm32::memory_size(0)) {
            if *kind == FREE_DIRTY {
                ptr::write_bytes((page * WASM_PAGE) as *mut u8, 0, WASM_PAGE);
                *kind = FREE_CLEAN;
            }
        }
    }
}

/// Where the page kinds lie in linear memory ([`PAGE_CLASS`]: one byte per
/// Wasm page, `1..CLASSES` for a span of blocks of that many
/// [`CLASS_STEP`]s): the host's snapshot codec stores such a page as the
/// differences between neighbouring blocks.
pub(crate) fn page_kinds() -> *const u8 {
    PAGE_CLASS.0.get().cast()
}

/// Bytes of spans, huge blocks and large blocks handed out since the last
/// [`reset_allocated_bytes`], freed or not: how much the heap can have
/// grown (and garbage built up) since, up to the space free lists reuse.
pub(crate) fn allocated_bytes() -> u64 {
    // SAFETY: single-threaded (module docs).
    unsafe { (*state()).allocated }
}

/// Starts [`allocated_bytes`] from zero.
pub(crate) fn reset_allocated_bytes() {
    // SAFETY: single-threaded (module docs).
    unsafe { (*state()).allocated = 0 }
}

/// A huge block: a run of whole pages behind [`HUGE_HEADER`].
unsafe fn huge_alloc(size: usize) -> *mut u8 {
    let Some(total) = size.checked_add(HUGE_HEADER) else {
        return ptr::null_mut();
    };
    let n = total.div_ceil(WASM_PAGE);
    let Some(first) = take_pages(n) else {
        return ptr::null_mut();
    };
    (*state()).allocated += (n * WASM_PAGE) as u64;
    (&mut *PAGE_CLASS.0.get())[first..first + n].fill(HUGE);
    let base = first * WASM_PAGE;
    *(base as *mut u32) = n as u32;
    (base + HUGE_HEADER) as *mut u8
}

/// The first page and length of a huge block's run.
#[inline(always)]
unsafe fn huge_run(block: *mut u8) -> (usize, usize) {
    let base = block as usize - HUGE_HEADER;
    (base / WASM_PAGE, *(base as *const u32) as usize)
}

/// A large block aligned to `align` (a power of two, at least
/// [`CLASS_STEP`]).
unsafe fn large_alloc(size: usize, align: usize) -> *mut u8 {
    let Some(total) = size.checked_add(LARGE_HEADER + align - DLMALLOC_ALIGN) else {
        return ptr::null_mut();
    };
    let Ok(size32) = u32::try_from(size) else {
        return ptr::null_mut();
    };
    let raw = (*state()).large.c_malloc(total);
    if raw.is_null() {
        return raw;
    }
    (*state()).allocated += total as u64;
    // The block starts at the first `align` boundary that leaves room for
    // the header; `total` covers the worst case for `raw`'s alignment.
    let block = (raw as usize + LARGE_HEADER + align - 1) & !(align - 1);
    let header = (block - LARGE_HEADER) as *mut u32;
    *header = raw as u32;
    *header.add(1) = size32;
    block as *mut u8
}

#[inline(always)]
unsafe fn large_header(block: *mut u8) -> (*mut u8, usize) {
    let header = (block as usize - LARGE_HEADER) as *const u32;
    (*header as usize as *mut u8, *header.add(1) as usize)
}

/// `malloc`'s fast path, inlined into every entry point: a block from its
/// class's free list or current span. Everything else (a new span, large
/// and huge blocks) is [`alloc_slow`], out of line, so the fast path takes
/// no shadow-stack frame and saves few registers: QuickJS allocates a few
/// blocks for every object and string it makes.
#[inline(always)]
pub(crate) unsafe fn alloc(size: usize) -> *mut u8 {
    if size <= SMALL_MAX {
        if let Some(block) = take_block(size.max(1).div_ceil(CLASS_STEP)) {
            return block;
        }
    }
    alloc_slow(size)
}

/// `malloc` past the fast path of [`alloc`].
#[cold]
#[inline(never)]
unsafe fn alloc_slow(size: usize) -> *mut u8 {
    if size <= SMALL_MAX {
        refill(size.max(1).div_ceil(CLASS_STEP))
    } else if size > ARENA_MIN && size <= ARENA_BLOCK {
        arena_alloc()
    } else if size < HUGE_MIN {
        large_alloc(size, CLASS_STEP)
    } else {
        huge_alloc(size)
    }
}

/// `free`'s fast path (a small block goes back on its class's free list);
/// large and huge blocks go to [`release_slow`].
#[inline(always)]
pub(crate) unsafe fn release(block: *mut u8) {
    let class = class_of_page(block as usize);
    if is_class(class) {
        let s = state();
        *(block as *mut usize) = (*s).free[class];
        (*s).free[class] = block as usize;
    } else if !block.is_null() {
        release_slow(block, class);
    }
}

/// An arena block: from the free list, the current span, or a new span.
unsafe fn arena_alloc() -> *mut u8 {
    let s = state();
    let head = (*s).arena_free;
    if head != 0 {
        (*s).arena_free = *(head as *const usize);
        return head as *mut u8;
    }
    let (next, end) = (*s).arena_carve;
    if next < end {
        (*s).arena_carve.0 = next + ARENA_BLOCK;
        return next as *mut u8;
    }
    let Some(page) = take_pages(1) else {
        return ptr::null_mut();
    };
    (*s).allocated += WASM_PAGE as u64;
    let base = page * WASM_PAGE;
    // As in `refill`: a page a huge block gave back still holds its data,
    // and QuickJS writes only the block headers of a new arena.
    if (*PAGE_CLASS.0.get())[page] == FREE_DIRTY {
        ptr::write_bytes(base as *mut u8, 0, WASM_PAGE);
    }
    (*PAGE_CLASS.0.get())[page] = ARENA;
    (*s).arena_carve = (base + ARENA_BLOCK, base + WASM_PAGE);
    base as *mut u8
}

/// `free` of an arena, large or huge block.
#[cold]
#[inline(never)]
unsafe fn release_slow(block: *mut u8, class: usize) {
    if class == ARENA as usize {
        // Zeroed as it is freed (all but the link word), as large blocks
        // are: neither a snapshot nor the image stores what it held.
        ptr::write_bytes(block, 0, ARENA_BLOCK);
        let s = state();
        *(block as *mut usize) = (*s).arena_free;
        (*s).arena_free = block as usize;
    } else if class == 0 {
        // Zeroed as it is freed, so that neither the image nor a snapshot
        // stores what it held (see `zero_free_blocks`); a large block is
        // freed at most as often as it was written.
        let (raw, usable) = large_header(block);
        ptr::write_bytes(block, 0, usable);
        (*state()).large.c_free(raw);
    } else {
        let (first, n) = huge_run(block);
        give_pages(first, n);
    }
}

#[inline(always)]
unsafe fn usable_size(block: *mut u8) -> usize {
    if block.is_null() {
        return 0;
    }
    let class = class_of_page(block as usize);
    if is_class(class) {
        class * CLASS_STEP
    } else if class == ARENA as usize {
        ARENA_BLOCK
    } else if class == 0 {
        large_header(block).1
    } else {
        huge_run(block).1 * WASM_PAGE - HUGE_HEADER
    }
}

/// `realloc`. A size that still fits the block keeps it, unless a large
/// block would be left less than half used (QuickJS trims its string
/// buffers with `realloc`: keeping the slack would double their memory).
#[inline(always)]
pub(crate) unsafe fn resize(block: *mut u8, size: usize) -> *mut u8 {
    if !block.is_null() && size != 0 {
        let old = usable_size(block);
        let fits = if old <= SMALL_MAX {
            size <= old
        } else {
            size <= old && size > SMALL_MAX && size >= old / 2
        };
        if fits {
            return block;
        }
    }
    resize_slow(block, size)
}

/// `realloc` past the fast path of [`resize`]: a null block, a zero size,
/// or a block that must move.
#[cold]
#[inline(never)]
unsafe fn resize_slow(block: *mut u8, size: usize) -> *mut u8 {
    if block.is_null() {
        return alloc(size);
    }
    if size == 0 {
        release(block);
        return ptr::null_mut();
    }
    let old = usable_size(block);
    let moved = alloc(size);
    if !moved.is_null() {
        ptr::copy_nonoverlapping(block, moved, old.min(size));
        release(block);
    }
    moved
}

unsafe fn aligned(align: usize, size: usize) -> *mut u8 {
    if !align.is_power_of_two() {
        return ptr::null_mut();
    }
    if align <= CLASS_STEP {
        alloc(size)
    } else {
        large_alloc(size, align)
    }
}

/// C `malloc`.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    alloc(size).cast()
}

/// C `free`.
#[no_mangle]
pub unsafe extern "C" fn free(block: *mut c_void) {
    release(block.cast())
}

/// C `calloc`.
#[no_mangle]
pub unsafe extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    let Some(total) = count.checked_mul(size) else {
        return ptr::null_mut();
    };
    let block = alloc(total);
    if !block.is_null() {
        ptr::write_bytes(block, 0, total);
    }
    block.cast()
}

/// C `realloc` (see [`resize`]).
#[no_mangle]
pub unsafe extern "C" fn realloc(block: *mut c_void, size: usize) -> *mut c_void {
    resize(block.cast(), size).cast()
}

/// C `aligned_alloc`.
#[no_mangle]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    aligned(align, size).cast()
}

/// POSIX `posix_memalign`.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> i32 {
    const EINVAL: i32 = 28; // WASI errno values
    const ENOMEM: i32 = 48;
    if !align.is_power_of_two() || align < core::mem::size_of::<usize>() {
        return EINVAL;
    }
    let block = aligned(align, size);
    if block.is_null() {
        return ENOMEM;
    }
    *out = block.cast();
    0
}

/// `malloc_usable_size`. (QuickJS does not call it: see
/// `GuestAllocator::usable_size` in `engine.rs`.)
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(block: *mut c_void) -> usize {
    usable_size(block.cast())
}

/// wasi-libc's internal name for `malloc` (its locale code calls it).
#[no_mangle]
pub unsafe extern "C" fn __libc_malloc(size: usize) -> *mut c_void {
    malloc(size)
}

/// wasi-libc's internal name for `free`.
#[no_mangle]
pub unsafe extern "C" fn __libc_free(block: *mut c_void) {
    free(block)
}

/// wasi-libc's internal name for `calloc` (its `atexit` calls it).
#[no_mangle]
pub unsafe extern "C" fn __libc_calloc(count: usize, size: usize) -> *mut c_void {
    calloc(count, size)
}
