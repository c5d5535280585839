//! CPU-bound work off the thread that answers requests.
//!
//! A worker answers on one thread, which also renews its leases: whatever
//! takes milliseconds (a restore's inserts, a snapshot's encoding, a sum of
//! usage records, a query's pass over them) runs on tokio's blocking
//! threads instead. Those threads sit idle between jobs, and mimalloc gives
//! the pages a thread freed back to the kernel only once that thread calls
//! the allocator again: after a fill of 1M keys the worker's RSS read
//! 133-155 MiB with 113-119 MiB live (docs/BENCHMARKS-HISTORY.md, "1M keys"). So
//! each job ends by having mimalloc collect what its thread freed. A
//! takeover's restores do not: they run back to back, and each would fault
//! in again what the one before gave back.

/// Runs `f` on a blocking thread, then returns that thread's freed memory.
pub async fn run<R, F>(f: F) -> Result<R, tokio::task::JoinError>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let out = f();
        // SAFETY: mi_collect has no preconditions; it frees only pages
        // mimalloc holds and no live allocation is in them.
        unsafe { libmimalloc_sys::mi_collect(true) };
        out
    })
    .await
}
