//! Prompts built ahead of the runner, in the time the model's threads leave
//! idle.
//!
//! A helper thread in Linux's `SCHED_IDLE` class (it runs only when no
//! other thread wants a core) builds the samples' prompts in order, at most
//! [`LOOKAHEAD`] past the one the runner last took. The runner never waits
//! for it: a sample that is not ready when asked for is built on the
//! runner's own thread, and the helper skips it (or its copy is thrown
//! away). So a machine kept busy by other work cannot stall a run, and the
//! prompts are the same either way: the builder's results do not depend on
//! which thread asks first, and it holds no lock while building
//! ([`crate::prompt::PromptBuilder::build`]).

use super::sample::{self, Prep, SampleContext};
use super::RunError;
use crate::data::samples::Sample;
use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};

/// How far past the runner the helper builds.
pub const LOOKAHEAD: usize = 32;

/// A sample's prompt and decoding settings, or why it has none.
pub type Prepped = Result<Prep, RunError>;

/// The samples of a run and what the helper has built of them.
pub struct Ahead<'c, 'a> {
    ctx: &'c SampleContext<'a>,
    todo: &'c [&'c Sample],
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    /// The first sample no thread has claimed.
    next: usize,
    /// Samples below this one are the runner's.
    taken: usize,
    ready: BTreeMap<usize, Prepped>,
    stop: bool,
}

impl<'c, 'a> Ahead<'c, 'a> {
    pub fn new(ctx: &'c SampleContext<'a>, todo: &'c [&'c Sample]) -> Self {
        // The runner asks for the first sample at once: the helper starts
        // after it.
        let state = State { next: 1, ..State::default() };
        Ahead { ctx, todo, state: Mutex::new(state), wake: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The helper thread's work: claim the next sample, build it, keep it
    /// for the runner; until every sample is claimed or [`Ahead::stop`].
    pub fn help(&self) {
        lower_priority();
        loop {
            let i = {
                let mut st = self.lock();
                loop {
                    if st.stop || st.next >= self.todo.len() {
                        return;
                    }
                    if st.next < st.taken + LOOKAHEAD {
                        break;
                    }
                    st = self.wake.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                st.next += 1;
                st.next - 1
            };
            let built = sample::prepare(self.ctx, self.todo[i]);
            let mut st = self.lock();
            if i >= st.taken {
                st.ready.insert(i, built);
            }
        }
    }

    /// Sample `i`'s prompt, for the runner (which asks in order): the
    /// helper's, or built now on this thread when the helper has not
    /// finished it.
    pub fn take(&self, i: usize) -> Prepped {
        let built = {
            let mut st = self.lock();
            st.taken = st.taken.max(i + 1);
            st.next = st.next.max(i + 1);
            st.ready.remove(&i)
        };
        self.wake.notify_all();
        built.unwrap_or_else(|| sample::prepare(self.ctx, self.todo[i]))
    }

    /// Tell the helper to stop after the sample it is building.
    pub fn stop(&self) {
        self.lock().stop = true;
        self.wake.notify_all();
    }

    /// A guard that calls [`Ahead::stop`] when dropped.
    pub fn stopper(&self) -> Stopper<'_, 'c, 'a> {
        Stopper(self)
    }
}

/// See [`Ahead::stopper`].
pub struct Stopper<'s, 'c, 'a>(&'s Ahead<'c, 'a>);

impl Drop for Stopper<'_, '_, '_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Put the calling thread in Linux's `SCHED_IDLE` class; elsewhere, or
/// when refused, leave it as it is.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: a system call on the calling thread (pid 0) with a valid
        // parameter; a failure only leaves the priority as it was.
        unsafe {
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
        }
    }
}
