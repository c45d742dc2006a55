//! Which pages of a live mapping have been written, from Linux's
//! `/proc/self/pagemap`.

use crate::format::PAGE_BYTES;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

/// The page is mapped.
const PRESENT: u64 = 1 << 63;
/// The page is in swap.
const SWAPPED: u64 = 1 << 62;
/// The mapped page is a page of a file (or shared anonymous memory).
const FILE_PAGE: u64 = 1 << 61;

/// This process's pagemap, with the id of the process that opened it:
/// after a `fork`, the inherited file would describe the parent. `None`
/// when it cannot be opened or fails [`behaves`].
static PAGEMAP: Mutex<Option<(u32, Option<File>)>> = Mutex::new(None);

/// Whether page `entry` may have been written: the page is mapped to a
/// page of its own (copied on write, or anonymous), or swapped out.
fn written(entry: u64) -> bool {
    entry & SWAPPED != 0 || (entry & PRESENT != 0 && entry & FILE_PAGE == 0)
}

/// The entries of `pages` pages from `addr`.
fn entries(file: &File, addr: usize, pages: usize) -> Option<Vec<u64>> {
    let mut raw = vec![0u8; pages * 8];
    let offset = (addr / PAGE_BYTES * 8) as u64;
    file.read_exact_at(&mut raw, offset).ok()?;
    Some(
        raw.chunks_exact(8)
            .map(|e| u64::from_le_bytes(e.try_into().expect("8 bytes")))
            .collect(),
    )
}

/// Checks once per process that the file tells a written page from an
/// untouched one (a sandbox may serve a pagemap of zeros, which would
/// make every page look untouched): in two fresh anonymous pages, the
/// written one must read as written and the other must not.
fn behaves(file: &File) -> bool {
    use rustix::mm::{mmap_anonymous, munmap, MapFlags, ProtFlags};
    let len = 2 * PAGE_BYTES;
    // SAFETY: a fresh private mapping, written and unmapped here only.
    unsafe {
        let Ok(base) = mmap_anonymous(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        ) else {
            return false;
        };
        std::ptr::write_volatile(base.cast::<u8>(), 1);
        let seen = entries(file, base as usize, 2);
        let _ = munmap(base, len);
        matches!(seen.as_deref(), Some(&[a, b]) if written(a) && !written(b))
    }
}

/// For each 4 KiB page of `region`, whether it may have been written
/// ([`written`]). A page that is not mapped, or is mapped to a page of
/// its backing file, reads as that mapping's initial content. `None`
/// when the kernel's page size is not 4 KiB or the file cannot be read
/// or does not behave.
pub(crate) fn written_pages(region: &[u8]) -> Option<Vec<bool>> {
    if rustix::param::page_size() != PAGE_BYTES
        || !(region.as_ptr() as usize).is_multiple_of(PAGE_BYTES)
    {
        return None;
    }
    let pid = std::process::id();
    let mut slot = PAGEMAP.lock().unwrap_or_else(|e| e.into_inner());
    if slot.as_ref().is_none_or(|(opener, _)| *opener != pid) {
        let file = File::open("/proc/self/pagemap").ok().filter(behaves);
        *slot = Some((pid, file));
    }
    let file = slot.as_ref()?.1.as_ref()?;
    let found = entries(file, region.as_ptr() as usize, region.len() / PAGE_BYTES)?;
    drop(slot);
    Some(found.into_iter().map(written).collect())
}
