//! A global allocator that counts allocations, for tests that pin how many
//! a path makes (deterministic, unlike a timing). Each thread counts its
//! own, so the test harness or another thread allocating meanwhile cannot
//! move a count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts every allocation of the calling thread, then forwards it to the
/// system allocator.
pub struct Counting;

thread_local! {
    // Const-initialised: reading it never allocates.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // A thread being torn down has no counter left; it is not counted.
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations so far, on this thread.
pub fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

/// Allocations this thread made while `f` runs.
#[allow(dead_code)]
pub fn allocations_during(f: impl FnOnce()) -> usize {
    let before = allocations();
    f();
    allocations() - before
}
