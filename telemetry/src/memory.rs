//! Keeping a long-running process's resident memory close to what it holds.
//!
//! glibc's allocator keeps up to eight arenas per core and returns freed memory to the system
//! only from the top of each heap: after a burst (a watch's first list of thousands of objects,
//! thousands of status writes), RSS stays at the burst's peak although the memory is free. Two
//! arenas are enough for a few tasks, large blocks kept out of the heap go back when freed, and
//! trimming after a burst gives the rest back. Other C libraries (the images are built with
//! musl) need none of this: these are no-ops there.

/// Limits glibc to two arenas, and fixes the size from which an allocation gets pages of its
/// own at 128 KiB. glibc raises that size each time such a block is freed (up to 32 MiB), so
/// after a burst a list page's body or a growing table lands in the heap, where what is freed
/// around it stays resident; fixed, such blocks go back to the system when freed. The
/// speaker at 10,000 LoadBalancer and 50,000 other Services, three runs each of its `scale`
/// bench: 53.7-53.9 MiB resident (peak 57.0-57.5) against 55.6-57.5 MiB (peak 60.1-63.0).
/// Call it first thing in `main`, before any thread starts (a `#[tokio::main]` body is too
/// late: the runtime's threads exist by then).
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets allocator parameters; M_ARENA_MAX takes a count,
        // M_MMAP_THRESHOLD a size in bytes.
        #[allow(unsafe_code)]
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
            libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
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
