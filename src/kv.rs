//! The KV pool: one context's cache cells, shared by its sequences.
//!
//! A cell holds one position's K and V in every layer. Each sequence is the list of its cells
//! in position order (positions `0..len`, no gaps), and a cell belongs to every sequence that
//! lists it, counted: forking a sequence copies its first `n` cell indices, never their bytes,
//! and a cell returns to the free set when the last sequence holding it lets go.
//!
//! Cells rather than fixed-size pages: a fork may share any prefix, to the token, with no
//! copy-on-write of a half-filled page; attention already reads each sequence through its
//! index list (`backend::Step`), so nothing is gained by grouping cells, and nothing is wasted
//! at the end of a sequence. The backends' storage starts small and grows (doubling, up to
//! `n_ctx`) as cells are taken; lowest cells are taken first, so storage stays compact.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::{Error, Result};

/// A sequence of a session: its own positions, sharing the pool's cells.
pub type SeqId = u32;

#[derive(Clone, Debug)]
pub struct KvPool {
    n_ctx: usize,
    /// Cells the backend's storage has room for (`n_ctx` at most).
    capacity: usize,
    /// Sequences holding each cell below `capacity`.
    refs: Vec<u32>,
    /// Cells below `capacity` that no sequence holds.
    free: BTreeSet<u32>,
    seqs: BTreeMap<SeqId, Vec<u32>>,
    next_id: SeqId,
}

impl KvPool {
    /// A pool of at most `n_ctx` cells whose storage holds `capacity` now.
    pub fn new(n_ctx: usize, capacity: usize) -> KvPool {
        let capacity = capacity.min(n_ctx);
        KvPool {
            n_ctx,
            capacity,
            refs: vec![0; capacity],
            free: (0..capacity as u32).collect(),
            seqs: BTreeMap::new(),
            next_id: 0,
        }
    }

    /// Most cells the pool may hold.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Cells the storage holds now.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Distinct cells held by some sequence.
    pub fn used(&self) -> usize {
        self.capacity - self.free.len()
    }

    /// Cells still to be had, growth included.
    pub fn available(&self) -> usize {
        self.n_ctx - self.used()
    }

    /// The live sequences, lowest id first.
    pub fn seqs(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.seqs.keys().copied()
    }

    pub fn contains(&self, seq: SeqId) -> bool {
        self.seqs.contains_key(&seq)
    }

    /// A new empty sequence.
    pub fn add(&mut self) -> SeqId {
        let id = self.next_id;
        self.next_id += 1;
        self.seqs.insert(id, Vec::new());
        id
    }

    fn seq(&self, seq: SeqId) -> Result<&Vec<u32>> {
        self.seqs
            .get(&seq)
            .ok_or_else(|| Error::InvalidArgument(format!("sequence {seq} does not exist")))
    }

    /// Tokens (cells) of `seq`.
    pub fn len(&self, seq: SeqId) -> Result<usize> {
        Ok(self.seq(seq)?.len())
    }

    /// The cells of `seq`, position by position.
    pub fn cells(&self, seq: SeqId) -> Result<&[u32]> {
        Ok(self.seq(seq)?)
    }

    /// A new sequence sharing the first `n` positions of `src` (their cells, not copies).
    pub fn fork(&mut self, src: SeqId, n: usize) -> Result<SeqId> {
        let have = self.len(src)?;
        if n > have {
            return Err(Error::InvalidArgument(format!(
                "fork of {n} positions from sequence {src}, which holds {have}"
            )));
        }
        let cells = self.seqs[&src][..n].to_vec();
        for &c in &cells {
            self.refs[c as usize] += 1;
        }
        let id = self.add();
        self.seqs.insert(id, cells);
        Ok(id)
    }

    /// Drops `seq` and lets go of its cells.
    pub fn remove(&mut self, seq: SeqId) -> Result<()> {
        self.truncate(seq, 0)?;
        self.seqs.remove(&seq);
        Ok(())
    }

    /// Keeps the first `n` positions of `seq` (a no-op when it holds no more).
    pub fn truncate(&mut self, seq: SeqId, n: usize) -> Result<()> {
        self.seq(seq)?;
        let cells = self
            .seqs
            .get_mut(&seq)
            .map(|v| v.split_off(n.min(v.len())))
            .unwrap_or_default();
        for c in cells {
            let r = &mut self.refs[c as usize];
            *r -= 1;
            if *r == 0 {
                self.free.insert(c);
            }
        }
        Ok(())
    }

    /// The storage `need` more cells call for: `None` if they fit the capacity now, else the
    /// capacity to grow to (doubling, at most `n_ctx`); an error naming the sizes when the
    /// pool cannot hold them at all.
    pub fn room(&self, need: usize) -> Result<Option<usize>> {
        if need > self.available() {
            return Err(Error::KvFull {
                need,
                free: self.available(),
                n_ctx: self.n_ctx,
            });
        }
        if need <= self.free.len() {
            return Ok(None);
        }
        let want = self.used() + need;
        Ok(Some((self.capacity * 2).max(want).min(self.n_ctx)))
    }

    /// Records that the storage now holds `capacity` cells.
    pub fn grow(&mut self, capacity: usize) {
        let capacity = capacity.min(self.n_ctx);
        if capacity <= self.capacity {
            return;
        }
        self.free.extend(self.capacity as u32..capacity as u32);
        self.refs.resize(capacity, 0);
        self.capacity = capacity;
    }

    /// Appends `n` cells to `seq` (lowest free first); `room` must have said they fit.
    pub fn append(&mut self, seq: SeqId, n: usize) -> Result<()> {
        self.seq(seq)?;
        if n > self.free.len() {
            return Err(Error::KvFull {
                need: n,
                free: self.free.len(),
                n_ctx: self.capacity,
            });
        }
        let v = self.seqs.get_mut(&seq).expect("checked above");
        for _ in 0..n {
            let c = self.free.pop_first().expect("counted above");
            self.refs[c as usize] = 1;
            v.push(c);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_shares_cells_and_frees_them_with_the_last_holder() {
        let mut p = KvPool::new(16, 4);
        let a = p.add();
        assert_eq!(p.room(6).unwrap(), Some(8));
        p.grow(8);
        p.append(a, 6).unwrap();
        let b = p.fork(a, 4).unwrap();
        assert_eq!(p.cells(b).unwrap(), &p.cells(a).unwrap()[..4]);
        assert_eq!(p.used(), 6);
        p.append(b, 1).unwrap();
        assert_eq!(p.used(), 7);
        p.remove(a).unwrap();
        // b still holds the shared four and its own one.
        assert_eq!(p.used(), 5);
        p.truncate(b, 2).unwrap();
        assert_eq!(p.used(), 2);
        assert_eq!(p.cells(b).unwrap(), &[0, 1]);
        assert!(p.cells(a).is_err());
    }

    #[test]
    fn a_full_pool_names_the_sizes() {
        let mut p = KvPool::new(8, 8);
        let a = p.add();
        p.append(a, 6).unwrap();
        let e = p.room(3).unwrap_err().to_string();
        assert!(e.contains('3') && e.contains('2') && e.contains('8'), "{e}");
        assert_eq!(p.room(2).unwrap(), None);
        assert!(p.fork(a, 7).is_err());
    }

    #[test]
    fn freed_cells_are_taken_lowest_first() {
        let mut p = KvPool::new(8, 8);
        let (a, b) = (p.add(), p.add());
        p.append(a, 3).unwrap();
        p.append(b, 3).unwrap();
        p.remove(a).unwrap();
        p.append(b, 2).unwrap();
        assert_eq!(p.cells(b).unwrap(), &[3, 4, 5, 0, 1]);
    }
}
