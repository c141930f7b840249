//! A growable buffer whose first element sits on a 64-byte boundary.
//!
//! The AVX-512 kernels load 64 bytes at a time from the activations and the
//! packed weights. `Vec`'s large buffers come from `mmap` through malloc,
//! 16 bytes past a page boundary, so every such load crossed a cache line
//! (two loads); measured on one Q4_K tile of 16 × 1,536 values and 8 tokens
//! (`kquant_tile_throughput`), 81 G multiply-adds/s with the activations at
//! 48 bytes past a line and 111 at a line.

use std::ops::{Deref, DerefMut};

/// One cache line of storage.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Plain values that may be zero-initialized and viewed through bytes.
///
/// # Safety
/// Every bit pattern of `size_of::<T>()` zero bytes must be a valid `T`
/// equal to `T::default()`, and `T`'s alignment must divide 64.
pub unsafe trait Plain: Copy + Default {}
// SAFETY: integers and floats: zero bytes are 0, alignment at most 8.
unsafe impl Plain for i8 {}
unsafe impl Plain for u8 {}
unsafe impl Plain for i16 {}
unsafe impl Plain for f32 {}

/// `len` values of `T` in whole cache lines (see the module).
#[derive(Clone, Default)]
pub struct Aligned<T: Plain> {
    lines: Vec<Line>,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<T: Plain> Aligned<T> {
    /// `len` zeros.
    pub fn zeroed(len: usize) -> Aligned<T> {
        let mut a = Aligned::default();
        a.refill(len);
        a
    }

    /// Make this `len` zeros, reusing the storage when it is large enough.
    pub fn refill(&mut self, len: usize) {
        let lines = (len * std::mem::size_of::<T>()).div_ceil(64);
        self.lines.clear();
        self.lines.resize(lines, Line([0; 64]));
        self.len = len;
    }

    /// Make this at least `len` values long, keeping the values it holds
    /// (new ones are zeros); storage is kept when it is large enough.
    pub fn grow(&mut self, len: usize) {
        if len > self.len {
            let lines = (len * std::mem::size_of::<T>()).div_ceil(64);
            if lines > self.lines.len() {
                self.lines.resize(lines, Line([0; 64]));
            }
            // Values past the old length may hold old bytes: zero them.
            let old = self.len;
            self.len = len;
            self[old..].fill(T::default());
        }
    }
}

impl<T: Plain> Deref for Aligned<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the lines hold at least `len` values' bytes, all
        // initialized, aligned to 64 (see `Plain`).
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr() as *const T, self.len) }
    }
}

impl<T: Plain> DerefMut for Aligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `self` is borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr() as *mut T, self.len) }
    }
}

impl<T: Plain + std::fmt::Debug> std::fmt::Debug for Aligned<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aligned").field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::Aligned;

    #[test]
    fn buffers_start_on_a_cache_line_and_hold_zeros() {
        for len in [0usize, 1, 63, 64, 65, 100_000, 3] {
            let mut a = Aligned::<f32>::zeroed(len);
            assert_eq!(a.len(), len);
            assert!(a.iter().all(|&v| v == 0.0));
            assert_eq!(a.as_ptr() as usize % 64, 0);
            a.iter_mut().for_each(|v| *v = 1.0);
            a.refill(len / 2);
            assert!(a.iter().all(|&v| v == 0.0) && a.len() == len / 2);
            assert_eq!(a.as_ptr() as usize % 64, 0);
        }
    }
}
