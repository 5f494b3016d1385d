//! A record behind its operation lock, with the last finished state readable without it.
//!
//! Every RPC that changes a sandbox or container holds its record's lock for the whole
//! change (RunPodSandbox's CNI ADD, CreateContainer, StopPodSandbox's kill and CNI DEL,
//! RemoveContainer's teardown): hundreds of milliseconds on a loaded node. The kubelet
//! relists (ListPodSandbox, ListContainers, then the statuses of the pods that
//! changed) every second, one pod after another; when each read waited for whatever
//! operation held a record, one relist took seconds and the pods' lifecycles (a
//! finished pod's termination, its phase) slowed down with it. containerd answers
//! reads from its store without waiting on operations in flight; so does this: each
//! guard publishes the record when it is dropped, and [`Record::view`] returns it: the
//! state as the last finished step left it.
//!
//! The record and its view share one allocation while nothing changes: a change
//! copies the record first (copy on write, [`Arc::make_mut`]), and the guard's drop
//! publishes that copy. A node with 250 pods keeps one copy of each record, not two,
//! and a guard that only read copies nothing.

use parking_lot::Mutex;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

pub struct Record<T: Clone> {
    lock: tokio::sync::Mutex<Arc<T>>,
    view: Mutex<Arc<T>>,
}

impl<T: Clone> Record<T> {
    pub fn new(t: T) -> Self {
        let t = Arc::new(t);
        Record {
            view: Mutex::new(t.clone()),
            lock: tokio::sync::Mutex::new(t),
        }
    }

    /// The record for a change: waits for the operation holding it.
    pub async fn lock(&self) -> Guard<'_, T> {
        Guard {
            inner: self.lock.lock().await,
            view: &self.view,
        }
    }

    /// The record for a change if no operation holds it.
    pub fn try_lock(&self) -> Option<Guard<'_, T>> {
        self.lock.try_lock().ok().map(|inner| Guard {
            inner,
            view: &self.view,
        })
    }

    /// The record as the last change left it; never waits.
    pub fn view(&self) -> Arc<T> {
        self.view.lock().clone()
    }
}

pub struct Guard<'a, T: Clone> {
    inner: tokio::sync::MutexGuard<'a, Arc<T>>,
    view: &'a Mutex<Arc<T>>,
}

impl<T: Clone> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: Clone> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(&mut self.inner)
    }
}

impl<T: Clone> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        let now = Arc::clone(&self.inner);
        *self.view.lock() = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_view_is_the_last_finished_state_and_never_waits() {
        let r = Record::new(1);
        let mut g = r.lock().await;
        *g = 2;
        // Held: the view is still what was there before the change.
        assert_eq!(*r.view(), 1);
        assert!(r.try_lock().is_none());
        drop(g);
        assert_eq!(*r.view(), 2);
        *r.try_lock().unwrap() = 3;
        assert_eq!(*r.view(), 3);
    }

    #[tokio::test]
    async fn one_copy_at_rest_and_a_read_copies_nothing() {
        let r = Record::new(vec![1]);
        let before = r.view();
        drop(r.lock().await);
        // A guard that only read publishes the same allocation.
        assert!(Arc::ptr_eq(&before, &r.view()));
        r.lock().await.push(2);
        let after = r.view();
        assert!(!Arc::ptr_eq(&before, &after));
        assert_eq!(*before, [1]);
        // The lock and the view share the record again.
        let g = r.lock().await;
        assert!(std::ptr::eq(&*g, &*after));
    }
}
