//! The free-block index: best fit by (stream, size, address).
//!
//! Keys pack stream, size and address into a `u128` whose order is PyTorch's
//! `BlockComparatorSize` order. Keys live in 192 size bins (four per power of
//! two), with a bitmap of non-empty bins. A best-fit lookup searches the
//! request's bin and then takes the smallest entry of the same stream from the
//! next non-empty bins, so it returns exactly what an ordered set's
//! `lower_bound` would.
//!
//! A bin is a sorted vector while it is small and a B-tree once it holds more
//! than [`TREE_AT`] entries. The vector is the hot path: one 4 KiB cached
//! alloc+free pair costs 931 instructions with vector bins and 1,218 with
//! B-tree bins (valgrind, `examples/pair.rs`). But a step of many layers frees
//! many blocks of one size into one bin (thousands for 1,024+ layers of
//! Qwen3-0.6B), and a vector's insert and remove move the whole bin, which
//! made the replay quadratic in the layers; past the bound a bin is a tree.

use std::collections::BTreeMap;

const NBINS: usize = 256;

/// A bin becomes a B-tree when an insert would take it past this many entries,
/// and a vector again when a remove leaves it below a quarter of it (so a bin
/// near the bound does not convert back and forth). At 64 entries of 32 bytes
/// a vector insert or remove moves at most 2 KiB (a few dozen vector
/// instructions), about what a B-tree's descent and node shuffling cost, while
/// a bin of thousands moves tens of KiB per operation.
const TREE_AT: usize = 64;
const VEC_BELOW: usize = TREE_AT / 4;

pub(crate) type Key = u128;

pub(crate) const SIZE_MASK: u64 = (1 << 48) - 1;

#[inline]
pub(crate) fn mk_key(stream: u32, size: u64, addr: u64) -> Key {
    (u128::from(stream) << 112) | (u128::from(size & SIZE_MASK) << 64) | u128::from(addr)
}

#[inline]
pub(crate) fn key_stream(k: Key) -> u32 {
    (k >> 112) as u32
}

#[inline]
pub(crate) fn key_size(k: Key) -> u64 {
    ((k >> 64) as u64) & SIZE_MASK
}

/// Monotone size -> bin map: four bins per power of two.
#[inline]
fn bin_of(size: u64) -> usize {
    if size < 8 {
        return size as usize;
    }
    let lz = 63 - size.leading_zeros() as usize;
    let sub = ((size >> (lz - 2)) & 3) as usize;
    (lz * 4 + sub).min(NBINS - 1)
}

/// One size bin: sorted by key while small, a B-tree past [`TREE_AT`].
#[derive(Debug, Clone)]
enum Bin {
    Small(Vec<(Key, u32)>),
    Large(BTreeMap<Key, u32>),
}

impl Bin {
    /// Inserts `k`; false if it was already there (its value is replaced).
    #[inline]
    fn insert(&mut self, k: Key, idx: u32) -> bool {
        match self {
            Bin::Small(v) => {
                let i = v.partition_point(|e| e.0 < k);
                if i < v.len() && v[i].0 == k {
                    v[i].1 = idx;
                    return false;
                }
                if v.len() < TREE_AT {
                    v.insert(i, (k, idx));
                    return true;
                }
                let mut t: BTreeMap<Key, u32> = v.drain(..).collect();
                t.insert(k, idx);
                *self = Bin::Large(t);
                true
            }
            Bin::Large(t) => t.insert(k, idx).is_none(),
        }
    }

    #[inline]
    fn remove(&mut self, k: Key) -> Option<u32> {
        match self {
            Bin::Small(v) => {
                let i = v.partition_point(|e| e.0 < k);
                (i < v.len() && v[i].0 == k).then(|| v.remove(i).1)
            }
            Bin::Large(t) => {
                let idx = t.remove(&k)?;
                if t.len() < VEC_BELOW {
                    let v: Vec<(Key, u32)> = std::mem::take(t).into_iter().collect();
                    *self = Bin::Small(v);
                }
                Some(idx)
            }
        }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        match self {
            Bin::Small(v) => v.is_empty(),
            Bin::Large(t) => t.is_empty(),
        }
    }

    fn get(&self, k: Key) -> Option<u32> {
        match self {
            Bin::Small(v) => {
                let i = v.partition_point(|e| e.0 < k);
                (i < v.len() && v[i].0 == k).then(|| v[i].1)
            }
            Bin::Large(t) => t.get(&k).copied(),
        }
    }

    /// The first entry at or after `from`.
    #[inline]
    fn first_from(&self, from: Key) -> Option<(Key, u32)> {
        match self {
            Bin::Small(v) => v.get(v.partition_point(|e| e.0 < from)).copied(),
            Bin::Large(t) => t.range(from..).next().map(|(k, i)| (*k, *i)),
        }
    }

    /// Every entry, in key order, appended to `out`.
    fn extend_into(&self, out: &mut Vec<(Key, u32)>, keep: impl Fn(Key) -> bool) {
        match self {
            Bin::Small(v) => out.extend(v.iter().filter(|e| keep(e.0)).copied()),
            Bin::Large(t) => out.extend(t.iter().filter(|e| keep(*e.0)).map(|(k, i)| (*k, *i))),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct FreeIndex {
    bins: Vec<Bin>,
    nonempty: [u64; NBINS / 64],
    len: usize,
}

impl Default for FreeIndex {
    fn default() -> Self {
        FreeIndex {
            bins: vec![Bin::Small(Vec::new()); NBINS],
            nonempty: [0; NBINS / 64],
            len: 0,
        }
    }
}

impl FreeIndex {
    #[inline]
    pub(crate) fn insert(&mut self, k: Key, idx: u32) {
        let b = bin_of(key_size(k));
        if self.bins[b].insert(k, idx) {
            self.len += 1;
        }
        self.nonempty[b / 64] |= 1 << (b % 64);
    }

    #[inline]
    pub(crate) fn remove(&mut self, k: Key) -> Option<u32> {
        let b = bin_of(key_size(k));
        let v = &mut self.bins[b];
        let idx = v.remove(k)?;
        if v.is_empty() {
            self.nonempty[b / 64] &= !(1 << (b % 64));
        }
        self.len -= 1;
        Some(idx)
    }

    /// The block index stored under `k`.
    pub(crate) fn get(&self, k: Key) -> Option<u32> {
        self.bins[bin_of(key_size(k))].get(k)
    }

    /// The smallest entry of `stream` with size at least `size`
    /// (lowest address among equal sizes).
    #[inline]
    pub(crate) fn lower_bound(&self, stream: u32, size: u64) -> Option<(Key, u32)> {
        let first = |b: usize, from: Key| {
            self.bins[b]
                .first_from(from)
                .filter(|(k, _)| key_stream(*k) == stream)
        };
        let b0 = bin_of(size);
        if let Some(e) = first(b0, mk_key(stream, size, 0)) {
            return Some(e);
        }
        let start = mk_key(stream, 0, 0);
        let mut b = b0 + 1;
        while b < NBINS {
            let word = self.nonempty[b / 64] >> (b % 64);
            if word == 0 {
                b = (b / 64 + 1) * 64;
                continue;
            }
            b += word.trailing_zeros() as usize;
            if let Some(e) = first(b, start) {
                return Some(e);
            }
            b += 1;
        }
        None
    }

    /// Entries of `stream` with size at least `size`, largest first.
    pub(crate) fn at_least_desc(&self, stream: u32, size: u64) -> Vec<(Key, u32)> {
        let mut out: Vec<(Key, u32)> = Vec::new();
        for bin in &self.bins[bin_of(size)..] {
            bin.extend_into(&mut out, |k| key_stream(k) == stream && key_size(k) >= size);
        }
        out.sort_unstable_by_key(|e| std::cmp::Reverse(e.0));
        out
    }

    /// All block indices, in key order (the bins are in size order, and each in key order
    /// within; a key's stream bits sort above its size, so the bins are merged by a sort).
    pub(crate) fn values(&self) -> Vec<u32> {
        let mut all: Vec<(Key, u32)> = Vec::with_capacity(self.len);
        for bin in &self.bins {
            bin.extend_into(&mut all, |_| true);
        }
        all.sort_unstable_by_key(|e| e.0);
        all.into_iter().map(|e| e.1).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn bins_are_monotone() {
        let mut last = 0;
        for s in 1..100_000u64 {
            let b = bin_of(s);
            assert!(b >= last, "size {s}");
            last = b;
        }
        for p in 3..48 {
            assert!(bin_of(1u64 << p) > bin_of((1u64 << p) - 1));
        }
        assert!(bin_of(SIZE_MASK) < NBINS);
        assert!(bin_of(1 << 20) < bin_of((1 << 20) + (1 << 18)));
    }

    #[test]
    fn lower_bound_matches_an_ordered_map() {
        let mut idx = FreeIndex::default();
        let mut reference = BTreeMap::new();
        let mut x = 0x1234_5678_9abc_def0u64;
        for i in 0..2000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = mk_key(
                (x % 3) as u32,
                512 * (1 + (x >> 8) % 50_000),
                (x >> 20) % (1 << 40),
            );
            if i % 3 == 2 {
                if let Some((&k0, _)) = reference.iter().nth((x as usize) % reference.len().max(1))
                {
                    assert_eq!(idx.remove(k0), reference.remove(&k0));
                }
            } else if let std::collections::btree_map::Entry::Vacant(e) = reference.entry(k) {
                e.insert(i);
                idx.insert(k, i);
            }
            let (st, sz) = ((x >> 3) % 3, 512 * ((x >> 30) % 60_000));
            let want = reference
                .range(mk_key(st as u32, sz, 0)..)
                .next()
                .filter(|(k, _)| key_stream(**k) == st as u32)
                .map(|(k, v)| (*k, *v));
            assert_eq!(idx.lower_bound(st as u32, sz), want);
            assert_eq!(idx.len(), reference.len());
        }
    }

    #[test]
    fn a_bin_past_the_bound_is_a_tree_and_back() {
        let mut idx = FreeIndex::default();
        let mut reference = BTreeMap::new();
        // Every key one size, so one bin: grow past TREE_AT, then shrink below VEC_BELOW.
        let n = 4 * TREE_AT as u64;
        for a in (0..n).rev() {
            let k = mk_key(0, 4096, a * 512);
            idx.insert(k, a as u32);
            reference.insert(k, a as u32);
        }
        let b = bin_of(4096);
        assert!(matches!(idx.bins[b], Bin::Large(_)));
        assert_eq!(idx.len(), reference.len());
        assert_eq!(
            idx.values(),
            reference.values().copied().collect::<Vec<_>>()
        );
        for a in (0..n).step_by(2).chain((1..n).step_by(2)) {
            let k = mk_key(0, 4096, a * 512);
            assert_eq!(idx.remove(k), reference.remove(&k));
            let want = reference.iter().next().map(|(k, v)| (*k, *v));
            assert_eq!(idx.lower_bound(0, 4000), want);
            assert_eq!(idx.len(), reference.len());
            if reference.len() + 1 < VEC_BELOW {
                assert!(matches!(idx.bins[b], Bin::Small(_)));
            }
        }
        assert!(idx.lower_bound(0, 1).is_none());
    }
}
