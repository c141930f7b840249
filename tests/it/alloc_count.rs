//! A global allocator that counts the allocations made on chosen threads
//! (the test binary's allocator): a test gives its own counter to the
//! threads it marks, so tests running side by side do not mix their counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting on marked threads.
pub struct Counting;

thread_local! {
    /// The counter of the calling thread, if a test marked it.
    static COUNTER: Cell<Option<&'static AtomicUsize>> = const { Cell::new(None) };
}

fn note() {
    if let Ok(Some(counter)) = COUNTER.try_with(Cell::get) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call goes to `System` unchanged; counting touches only an
// atomic and a const-initialized thread-local without a destructor.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

/// A rayon pool of `threads` workers whose allocations (and reallocations)
/// add to `counter`; work given to it with `install` runs on its workers.
pub fn counted_pool(threads: usize, counter: &'static AtomicUsize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .start_handler(move |_| COUNTER.with(|c| c.set(Some(counter))))
        .build()
        .unwrap()
}
