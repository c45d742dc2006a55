//! Restoring a decoded [`Snapshot`]: each frame decompressed into a fresh
//! instance's memory (changed words written, deltas XORed in), on the
//! codec pool when large.

use crate::decoder::Snapshot;
use crate::format::{corrupt, SnapshotError, IMAGE_PAGE_IN_LANES, PAGE_BYTES, VALUES_DIFFERENCED};
use crate::frames::{fill, finish_frame, reset, with_dctx};
use crate::lanes::{join_page, stride_words, PAGE_WORDS};
use crate::pages::{inside_image, prefault, run_end_where, xor_in_place};
use crate::pool::run_parallel;
use crate::written::WrittenPages;

impl Snapshot<'_> {
    /// Writes the stored pages into `memory`, which must be `memory_bytes`
    /// long and hold a fresh instance's memory: the module's initial image
    /// in its first `image_bytes` (the same image the snapshot was taken
    /// against: the guest hash vouches for it), zeros after. Large
    /// snapshots are
    /// restored on several threads. On an error `memory` is partly written
    /// and must be discarded.
    ///
    /// # Errors
    ///
    /// [`SnapshotError::Corrupt`] when `memory` is shorter than
    /// `memory_bytes` (nothing is written then) or a frame does not
    /// decompress.
    pub fn apply(self, memory: &mut [u8], image_bytes: usize) -> Result<(), SnapshotError> {
        self.apply_known(memory, image_bytes, &mut WrittenPages::new(0))
    }

    /// [`Snapshot::apply`] into a memory of which the pages in `written`
    /// are known to be private already (a reused slot): a frame whose pages
    /// all are is written without pre-faulting and without reading the
    /// page map. The pages written are added to `written`.
    ///
    /// # Errors
    ///
    /// As [`Snapshot::apply`]; `written` is then unchanged.
    pub fn apply_known(
        self,
        memory: &mut [u8],
        image_bytes: usize,
        written: &mut WrittenPages,
    ) -> Result<(), SnapshotError> {
        if memory.len() < self.memory_bytes {
            return Err(SnapshotError::Corrupt("memory is too short".into()));
        }
        let mut jobs = Vec::with_capacity(self.frames.len());
        let mut pages = &self.page_indexes[..];
        let mut units = &self.page_units[..];
        let mut rest = memory;
        let mut base = 0usize;
        for &(frame, count) in &self.frames {
            let (mine, later) = pages.split_at(count);
            pages = later;
            let (my_units, later_units) = units.split_at(count);
            units = later_units;
            // This frame's memory runs from its first page to the next
            // frame's first page (or the end).
            let start = mine[0] as usize * PAGE_BYTES;
            let end = later
                .first()
                .map_or(base + rest.len(), |&p| p as usize * PAGE_BYTES);
            let (_, from_start) = std::mem::take(&mut rest).split_at_mut(start - base);
            let (region, after) = from_start.split_at_mut(end - start);
            rest = after;
            base = end;
            jobs.push(FrameJob {
                frame,
                known_written: mine.iter().all(|&p| written.contains(p)),
                pages: mine,
                units: my_units,
                memory: region,
                base: start,
                sparse: self.sparse,
                image_strides: self.image_strides,
            });
        }
        run_parallel(jobs, self.page_indexes.len() * PAGE_BYTES, |job| {
            job.run(image_bytes)
        })
        .into_iter()
        .collect::<Result<(), SnapshotError>>()?;
        for &page in &self.page_indexes {
            written.insert(page);
        }
        Ok(())
    }
}

thread_local! {
    /// A frame's decompressed lanes, kept per thread (at most one frame,
    /// 2 MiB) so that a restore takes no page faults on fresh buffers.
    static LANES: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// A frame's sparse section, kept likewise (at most
    /// `PAGES_PER_FRAME × MAX_PAGE_DATA_BYTES`, 3 MiB; a one-tool cell's
    /// is ~7 KB).
    static SPARSE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One frame's restore: its compressed bytes, its pages, and the part of
/// memory that starts at its first page.
struct FrameJob<'s, 'm> {
    frame: &'s [u8],
    /// All of `pages` are known to be private ([`WrittenPages`]): nothing
    /// to pre-fault.
    known_written: bool,
    pages: &'s [u32],
    /// The block stride of each of `pages`.
    units: &'s [u8],
    memory: &'m mut [u8],
    base: usize,
    /// [`Snapshot::sparse`].
    sparse: bool,
    /// [`Snapshot::image_strides`].
    image_strides: bool,
}

impl FrameJob<'_, '_> {
    /// Decompresses the frame into memory: the image pages stored as their
    /// changed words written in (format 5: each one's delta through a
    /// 4 KiB scratch, XORed in), then the lanes of the others into this
    /// thread's lane buffer, joined into their pages.
    fn run(mut self, image_bytes: usize) -> Result<(), SnapshotError> {
        if !self.known_written {
            self.prefault();
        }
        let inside = inside_image(self.pages, image_bytes);
        // Image pages of layout 0 are stored as their changed words (format
        // 5: as deltas in place); the others, and the pages beyond the
        // image, are in the lanes. Each group in page order.
        let (deltas, in_lanes): (Vec<usize>, Vec<usize>) =
            (0..self.pages.len()).partition(|&k| k < inside && self.units[k] == 0);
        let deltas: Vec<u32> = deltas.into_iter().map(|k| self.pages[k]).collect();
        with_dctx(|dctx| {
            reset(dctx)?;
            let mut input = zstd::zstd_safe::InBuffer::around(self.frame);
            let mut ended = false;
            if self.sparse && !deltas.is_empty() {
                ended = self.write_changed_words(dctx, &mut input, &deltas)?;
            } else {
                let mut delta = [0u8; PAGE_BYTES];
                for &index in &deltas {
                    ended = fill(dctx, &mut input, &mut delta)?;
                    let at = index as usize * PAGE_BYTES - self.base;
                    xor_in_place(&mut self.memory[at..at + PAGE_BYTES], &delta);
                }
            }
            if !in_lanes.is_empty() {
                LANES.with(|cell| {
                    let mut scratch = cell.borrow_mut();
                    let bytes = in_lanes.len() * PAGE_BYTES;
                    if scratch.len() < bytes {
                        scratch.resize(bytes, 0);
                    }
                    let lanes = &mut scratch[..bytes];
                    ended = fill(dctx, &mut input, lanes)?;
                    for (slot, &k) in in_lanes.iter().enumerate() {
                        let at = self.pages[k] as usize * PAGE_BYTES - self.base;
                        let page = &mut self.memory[at..at + PAGE_BYTES];
                        let layout = self.units[k];
                        if k >= inside {
                            join_page(lanes, slot, page, stride_words(layout));
                        } else if !self.image_strides || layout == IMAGE_PAGE_IN_LANES {
                            // Before format 8 an image page's layout byte
                            // is no stride.
                            join_page(lanes, slot, page, 0);
                        } else {
                            // The stride is of the delta: undone before
                            // the delta is XORed into the image page.
                            let mut delta = [0u8; PAGE_BYTES];
                            let stride = stride_words(layout - IMAGE_PAGE_IN_LANES);
                            join_page(lanes, slot, &mut delta, stride);
                            xor_in_place(page, &delta);
                        }
                    }
                    Ok::<_, SnapshotError>(())
                })?;
            }
            finish_frame(dctx, &mut input, ended, self.frame.len())
        })
    }
}

impl FrameJob<'_, '_> {
    /// Reads the sparse section of the image pages `pages` (see the
    /// encoder's `sparse_section`) and writes each changed word into its
    /// page. Returns whether the frame ended with it.
    fn write_changed_words(
        &mut self,
        dctx: &mut zstd::zstd_safe::DCtx<'static>,
        input: &mut zstd::zstd_safe::InBuffer<'_>,
        pages: &[u32],
    ) -> Result<bool, SnapshotError> {
        SPARSE.with(|cell| {
            let mut scratch = cell.borrow_mut();
            let counts_len = 2 * pages.len();
            if scratch.len() < counts_len {
                scratch.resize(counts_len, 0);
            }
            let mut ended = fill(dctx, input, &mut scratch[..counts_len])?;
            let mut words = 0usize;
            for count in scratch[..counts_len].chunks_exact(2) {
                let count =
                    usize::from(u16::from_le_bytes([count[0], count[1]]) & !VALUES_DIFFERENCED);
                if count > PAGE_WORDS {
                    return Err(corrupt(format!(
                        "a page states {count} changed words; a page has {PAGE_WORDS}"
                    )));
                }
                words += count;
            }
            let section = counts_len + 6 * words;
            if scratch.len() < section {
                scratch.resize(section, 0);
            }
            if words > 0 {
                ended = fill(dctx, input, &mut scratch[counts_len..section])?;
            }
            let (counts, rest) = scratch[..section].split_at(counts_len);
            let (low, rest) = rest.split_at(words);
            let (high, values) = rest.split_at(words);
            let mut k = 0;
            for (&index, count) in pages.iter().zip(counts.chunks_exact(2)) {
                let at = index as usize * PAGE_BYTES - self.base;
                let page = &mut self.memory[at..at + PAGE_BYTES];
                let count = u16::from_le_bytes([count[0], count[1]]);
                let differenced = count & VALUES_DIFFERENCED != 0;
                let mut next = 0usize;
                let mut value = 0u32;
                for _ in 0..count & !VALUES_DIFFERENCED {
                    let word = next + (usize::from(high[k]) << 8 | usize::from(low[k]));
                    if word >= PAGE_WORDS {
                        return Err(corrupt(format!(
                            "a changed word lies past its page (word {word})"
                        )));
                    }
                    let stored = u32::from_le_bytes(values[k * 4..k * 4 + 4].try_into().unwrap());
                    value = if differenced {
                        value.wrapping_add(stored)
                    } else {
                        stored
                    };
                    page[word * 4..word * 4 + 4].copy_from_slice(&value.to_le_bytes());
                    next = word + 1;
                    k += 1;
                }
            }
            Ok(ended)
        })
    }

    /// Makes the frame's pages writable with one [`prefault`] per run of
    /// consecutive pages that are not yet: restores a small snapshot ~35%
    /// faster than a copy-on-write fault per page. A pooled instance's slot
    /// keeps the pages earlier instances wrote resident (quickcell's
    /// `KEEP_RESIDENT_BYTES`), so most of a snapshot's pages are often
    /// writable already; one read of `/proc/self/pagemap` over the frame's
    /// span ([`resident_pages`]) finds them, where a `madvise` per run
    /// would cost a system call each all the same.
    fn prefault(&mut self) {
        let resident = resident_pages(self.pages, self.memory, self.base);
        let needs = |k: usize| {
            resident
                .as_ref()
                .is_none_or(|r| !r[(self.pages[k] - self.pages[0]) as usize])
        };
        let mut i = 0;
        while i < self.pages.len() {
            if !needs(i) {
                i += 1;
                continue;
            }
            let end = run_end_where(self.pages, i, needs);
            let at = self.pages[i] as usize * PAGE_BYTES - self.base;
            prefault(&mut self.memory[at..at + (end - i) * PAGE_BYTES]);
            i = end;
        }
    }
}

/// Most pages of a frame's span (its first page to its last) per page it
/// stores for which [`resident_pages`] reads the pagemap: beyond it the
/// read (8 bytes a page) would outgrow what it saves, and every run is
/// pre-faulted instead.
const RESIDENT_SPAN_PER_PAGE: usize = 8;

/// For each page from `pages[0]` to the last of `pages` (a frame's, in
/// `memory`, which starts at byte `base` of the linear memory), whether it
/// is already written in this mapping (a private page, or swapped):
/// writing it takes no copy-on-write fault. `None` where that cannot be
/// read (not Linux, no pagemap) or the span is sparse
/// ([`RESIDENT_SPAN_PER_PAGE`]): then every page counts as not resident.
fn resident_pages(pages: &[u32], memory: &[u8], base: usize) -> Option<Vec<bool>> {
    let (&first, &last) = (pages.first()?, pages.last()?);
    let span = (last - first) as usize + 1;
    if span > pages.len() * RESIDENT_SPAN_PER_PAGE {
        return None;
    }
    let at = first as usize * PAGE_BYTES - base;
    #[cfg(target_os = "linux")]
    return crate::pagemap::written_pages(&memory[at..at + span * PAGE_BYTES]);
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (at, memory);
        None
    }
}
