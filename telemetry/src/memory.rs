//! Keeping a long-running process's resident memory close to what it holds.
//!
//! glibc's allocator keeps up to eight arenas per core and returns freed memory to the system
//! only from the top of each heap: after a burst (a watch's first list of thousands of objects,
//! thousands of status writes), RSS stays at the burst's peak although the memory is free. Two
//! arenas are enough for a few tasks, and trimming after a burst gives the pages back. Other C
//! libraries (the images are built with musl) need neither: these are no-ops there.

/// Limits glibc to two arenas. Call it first thing in `main`, before any thread starts (a
/// `#[tokio::main]` body is too late: the runtime's threads exist by then).
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets an allocator parameter; M_ARENA_MAX takes a count.
        #[allow(unsafe_code)]
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// Returns free memory of every arena to the system (glibc's `malloc_trim`). Costs a walk of
/// the free lists: call it after a burst, or every minute or so, not per request.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes a pad size and only releases free pages.
        #[allow(unsafe_code)]
        unsafe {
            libc::malloc_trim(0);
        }
    }
}
