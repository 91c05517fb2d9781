//! A readers–writer gate: many readers or one writer, and a waiting writer goes before new
//! readers so it never starves. Readers enter and leave without blocking when no writer holds or
//! waits for the gate, which is nearly always: every read and write of a store passes it, and a
//! writer (growing a memory map, swapping derived columns) is rare.

use std::sync::{Condvar, Mutex, MutexGuard};

#[derive(Default)]
struct State {
    readers: usize,
    writer: bool,
    waiting: usize,
}

/// See the module documentation.
#[derive(Default)]
pub struct Gate {
    state: Mutex<State>,
    cond: Condvar,
}

impl Gate {
    /// An open gate.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a few counters changed in single steps: a panic elsewhere leaves it whole.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Enters as a reader if that needs no wait; false when a writer holds or waits for the gate.
    pub fn try_read(&self) -> bool {
        let mut s = self.lock();
        if s.writer || s.waiting > 0 {
            return false;
        }
        s.readers += 1;
        true
    }

    /// Enters as a reader, waiting while a writer holds or waits for the gate.
    pub fn read(&self) {
        let mut s = self.lock();
        while s.writer || s.waiting > 0 {
            s = self.cond.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        s.readers += 1;
    }

    /// Leaves as a reader; false when no reader was inside (nothing changes).
    pub fn end_read(&self) -> bool {
        let mut s = self.lock();
        if s.readers == 0 {
            return false;
        }
        s.readers -= 1;
        if s.readers == 0 && s.waiting > 0 {
            self.cond.notify_all();
        }
        true
    }

    /// Enters as the writer, once no reader or writer is inside.
    pub fn write(&self) {
        let mut s = self.lock();
        s.waiting += 1;
        while s.writer || s.readers > 0 {
            s = self.cond.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        s.waiting -= 1;
        s.writer = true;
    }

    /// Leaves as the writer; false when no writer was inside (nothing changes).
    pub fn end_write(&self) -> bool {
        let mut s = self.lock();
        if !s.writer {
            return false;
        }
        s.writer = false;
        self.cond.notify_all();
        true
    }

    /// Readers inside, whether a writer is, and writers waiting.
    pub fn held(&self) -> (usize, bool, usize) {
        let s = self.lock();
        (s.readers, s.writer, s.waiting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn readers_share_and_a_waiting_writer_goes_first() {
        let g = Arc::new(Gate::new());
        assert!(g.try_read() && g.try_read());
        let w = {
            let g = Arc::clone(&g);
            std::thread::spawn(move || {
                g.write();
                g.end_write()
            })
        };
        while g.held().2 == 0 {
            std::thread::yield_now();
        }
        assert!(!g.try_read(), "a new reader waits behind the waiting writer");
        assert!(g.end_read() && g.end_read());
        assert!(w.join().unwrap());
        assert!(g.try_read() && g.end_read());
        assert!(!g.end_read() && !g.end_write(), "leaving what was not entered changes nothing");
    }

    #[test]
    fn a_writer_is_alone() {
        let g = Arc::new(Gate::new());
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (g, inside) = (Arc::clone(&g), Arc::clone(&inside));
                std::thread::spawn(move || {
                    for _ in 0..2000 {
                        if i % 4 == 0 {
                            g.write();
                            assert_eq!(inside.fetch_add(1000, Ordering::SeqCst), 0);
                            inside.fetch_sub(1000, Ordering::SeqCst);
                            g.end_write();
                        } else {
                            g.read();
                            assert!(inside.fetch_add(1, Ordering::SeqCst) < 1000);
                            inside.fetch_sub(1, Ordering::SeqCst);
                            g.end_read();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(g.held(), (0, false, 0));
    }
}
