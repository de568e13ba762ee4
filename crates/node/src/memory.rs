//! Giving memory back to the operating system after load.
//!
//! glibc's allocator keeps freed memory in its arenas (one per worker
//! thread) and only returns the top of each heap. After a flood of
//! connections is closed the relay's buffers are freed but the resident
//! size stays where the flood left it. [`release_free_memory`] asks the
//! allocator to return every free page (`malloc_trim(0)`);
//! [`trim_loop`] does so periodically while the process lives.

use std::time::Duration;

/// How often [`trim_loop`] trims.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(10);

/// Return free heap pages to the operating system (glibc only; a no-op
/// elsewhere). Cheap when there is nothing to return.
#[allow(unsafe_code)]
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim only walks the allocator's own free lists; it
        // takes no pointers from us and is safe to call from any thread.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Resident set size of this process in bytes, if the platform says.
pub fn resident_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    pages.checked_mul(4096)
}

/// Under steady load, trim once every this many intervals anyway.
pub const STEADY_TRIM_EVERY: u32 = 6;

/// Whether to trim now: the load went down since the last look, or it
/// stayed up (not idle) for [`STEADY_TRIM_EVERY`] looks. A process under
/// steady load frees and allocates all the time; without a periodic trim
/// the freed pages of every arena stay resident and the resident size
/// creeps up (seen in a 30-minute soak on middle relays).
pub fn should_trim(last: usize, now: usize, looks_since_trim: u32) -> bool {
    now < last || (now > 0 && looks_since_trim >= STEADY_TRIM_EVERY)
}

/// Look at `load` every [`TRIM_INTERVAL`] and trim when [`should_trim`]
/// says so (an idle process does not trim for nothing).
pub async fn trim_loop(load: impl Fn() -> usize) {
    let mut last = load();
    let mut looks = 0u32;
    loop {
        tokio::time::sleep(TRIM_INTERVAL).await;
        let now = load();
        looks = looks.saturating_add(1);
        if should_trim(last, now, looks) {
            release_free_memory();
            looks = 0;
        }
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_after_load_falls_and_periodically_under_load() {
        assert!(should_trim(10, 9, 1));
        assert!(!should_trim(10, 10, 1));
        assert!(!should_trim(10, 12, STEADY_TRIM_EVERY - 1));
        assert!(should_trim(10, 12, STEADY_TRIM_EVERY));
        // Idle: nothing to give back.
        assert!(!should_trim(0, 0, 100));
    }

    #[test]
    fn trimming_returns_freed_memory() {
        release_free_memory();
        let Some(before) = resident_bytes() else {
            return;
        };
        // Many small blocks (below the mmap threshold, so they come from
        // the heap), touched, then freed.
        let mut v: Vec<Vec<u8>> = (0..20_000).map(|_| vec![1u8; 8 * 1024]).collect();
        let peak = resident_bytes().unwrap_or(0);
        assert!(peak > before + 100 * 1024 * 1024, "{before} -> {peak}");
        // Keep one block near the end so the heap top cannot shrink by
        // itself; only trimming returns the middle.
        let keep = v.pop();
        drop(v);
        release_free_memory();
        let after = resident_bytes().unwrap_or(u64::MAX);
        drop(keep);
        // Other tests in this process allocate too: ask only that most of
        // the 160 MB came back.
        assert!(
            after + 100 * 1024 * 1024 < peak,
            "resident {before} before, {peak} at peak, {after} after trim"
        );
    }
}
