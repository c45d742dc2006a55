//! The codec pool: the threads that compress and restore large snapshots.

/// Threads of the pool that encodes and restores large snapshots (fewer on
/// machines with fewer cores), shared by all of the process's snapshots.
/// Snapshots with fewer than [`PARALLEL_PAYLOAD_BYTES`] of pages
/// are handled on the calling thread.
pub const MAX_CODEC_THREADS: usize = 4;

/// Page payloads from this size up are compressed and decompressed on
/// several threads.
pub const PARALLEL_PAYLOAD_BYTES: usize = 4 << 20;

/// Runs `work` over `jobs`, on the codec pool when `page_bytes` of page
/// deltas reach [`PARALLEL_PAYLOAD_BYTES`], else on the calling thread;
/// results keep the jobs' order.
///
/// The pool (rayon, one thread per core, at most [`MAX_CODEC_THREADS`]) is
/// made on first use and lives on, so its threads' compression contexts
/// ([`with_compressor`]) are made once, not once per snapshot, and idle threads
/// take the next frame (a frame of mostly zeros is quick). A process forked
/// from the one that made it has none of its threads: there, and wherever
/// no thread can be started, the calling thread does all the work.
///
/// [`with_compressor`]: crate::frames::with_compressor
pub(crate) fn run_parallel<J: Send, R: Send>(
    jobs: Vec<J>,
    page_bytes: usize,
    work: impl Fn(J) -> R + Sync + Send,
) -> Vec<R> {
    if page_bytes < PARALLEL_PAYLOAD_BYTES || jobs.len() < 2 {
        return jobs.into_iter().map(work).collect();
    }
    use rayon::iter::{IntoParallelIterator, ParallelIterator};
    /// The pool and the process it was made in.
    static POOL: std::sync::OnceLock<(u32, Option<rayon::ThreadPool>)> = std::sync::OnceLock::new();
    let (owner, pool) = POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(cores.min(MAX_CODEC_THREADS))
            .thread_name(|i| format!("quickcell-codec-{i}"))
            .build()
            .ok();
        (std::process::id(), pool)
    });
    match pool {
        Some(pool) if *owner == std::process::id() => {
            pool.install(|| jobs.into_par_iter().map(work).collect())
        }
        _ => jobs.into_iter().map(work).collect(),
    }
}
