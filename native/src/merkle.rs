//! RFC 9162 Merkle arithmetic, as `ledger/merkle.py`: the writer's right edge (compact
//! range), the root from perfect-subtree hashes and the inclusion and consistency checks.

use crate::hash::{node_hash, sha256, Hash};

/// An interior node an append completed: `(level, index, hash)`, level >= 1.
pub type NewNode = (u32, u64, Hash);

/// The root of the empty tree, `SHA-256("")`.
#[must_use]
pub fn empty_root() -> Hash {
    sha256(b"")
}

/// The right edge of a growing tree: the hashes of its perfect subtrees, largest first.
#[derive(Debug, Clone, Default)]
pub struct CompactRange {
    pub size: u64,
    pub hashes: Vec<Hash>,
}

impl CompactRange {
    /// Fold one leaf in; push the interior nodes it completed, lowest first, onto `out`.
    pub fn append(&mut self, leaf: Hash, out: &mut Vec<NewNode>) {
        let mut h = leaf;
        let mut level = 0u32;
        let mut m = self.size;
        while m & 1 == 1 {
            // size has a one bit per stored hash, so a trailing one bit has a hash to pop.
            let Some(left) = self.hashes.pop() else { break };
            h = node_hash(&left, &h);
            level += 1;
            m >>= 1;
            out.push((level, m, h));
        }
        self.hashes.push(h);
        self.size += 1;
    }

    /// The RFC 9162 root of the leaves appended so far.
    #[must_use]
    pub fn root(&self) -> Hash {
        root_from_subtrees(&self.hashes)
    }
}

/// The lowest level of the store's `nodes` rows (`store.NODE_MIN_LEVEL`): a node below it
/// is folded from its leaves (`fold_perfect`).
pub const NODE_MIN_LEVEL: u32 = 2;

/// The `nodes.k` of the complete subtree `(level, index)` on branch `branch_no`, as
/// `Store.node_key` computes it (FORMAT.md 4). `by_end` (layout version 3): keyed by the
/// tree size that completes it, `branch_no << 48 | (index + 1) << level << 6 | level`, so
/// the nodes an append completes all sort after every stored one; otherwise (versions 1-2
/// and PostgreSQL) by level, `branch_no << 48 | level << 42 | index`. None out of range (a
/// branch number of 15 bits, a level of 6, a tree of `2**40` leaves for `by_end`).
#[must_use]
pub fn node_key(branch_no: u64, level: u64, index: u64, by_end: bool) -> Option<u64> {
    if branch_no >= 1 << 15 || level >= 1 << 6 || index >= 1 << 42 {
        return None;
    }
    if !by_end {
        return Some(branch_no << 48 | level << 42 | index);
    }
    if level > 40 || index + 1 > (1 << 40) >> level {
        return None;
    }
    Some(branch_no << 48 | (index + 1) << level << 6 | level)
}

/// The hash of the perfect subtree over `leaves` (a power of two of them, at least one),
/// folded pairwise level by level as RFC 9162 section 2.1.1 splits a perfect tree.
#[must_use]
pub fn fold_perfect(leaves: &[Hash]) -> Hash {
    let mut level: Vec<Hash> = leaves.to_vec();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|p| node_hash(&p[0], &p[p.len() - 1]))
            .collect();
    }
    level.first().copied().unwrap_or_else(empty_root)
}

/// The RFC 9162 `MTH` folded right to left from the perfect-subtree hashes.
#[must_use]
pub fn root_from_subtrees(hashes: &[Hash]) -> Hash {
    let Some((last, rest)) = hashes.split_last() else {
        return empty_root();
    };
    let mut h = *last;
    for left in rest.iter().rev() {
        h = node_hash(left, &h);
    }
    h
}

/// A complete subtree `(level, index)`: leaves `[index << level, (index + 1) << level)`.
pub type NodeId = (u32, u64);

/// The complete subtrees covering `[start, start + count)`, largest first (`_subtrees_from`;
/// `start` is a multiple of a power of two above `count`).
#[must_use]
pub fn subtrees_from(mut start: u64, mut count: u64) -> Vec<NodeId> {
    let mut out = Vec::new();
    while count != 0 {
        let level = 63 - count.leading_zeros();
        out.push((level, start >> level));
        start += 1 << level;
        count ^= 1 << level;
    }
    out
}

/// The audit path of leaf `index` in a tree of `size` leaves, as `merkle._path_plan` plans
/// it: the siblings up to the fork, the complete subtrees left of the fork (lowest first)
/// and those right of it (largest first), whose fold is one proof hash.
#[must_use]
pub fn path_plan(index: u64, size: u64) -> (Vec<NodeId>, Vec<NodeId>, Vec<NodeId>) {
    let x = index ^ size;
    let inner = 63 - x.leading_zeros();
    let siblings = (0..inner).map(|i| (i, (index >> i) ^ 1)).collect();
    let begin = (index >> inner) << inner;
    let end = begin + (1 << inner);
    let mut left = subtrees_from(0, begin);
    left.reverse();
    (siblings, left, subtrees_from(end, size - end))
}

/// The known leaves of `leaves_plan` and `leaves_root`: their positions (sorted, distinct)
/// and whether they are one contiguous run.
struct Known<'a> {
    positions: &'a [u64],
    run: Option<(u64, u64)>,
}

impl<'a> Known<'a> {
    fn new(positions: &'a [u64]) -> Self {
        let run = match (positions.first(), positions.last()) {
            (Some(&first), Some(&last)) if last - first + 1 == positions.len() as u64 => {
                Some((first, last + 1))
            }
            _ => None,
        };
        Self { positions, run }
    }

    /// Whether a known position lies in `[lo, hi)`.
    fn holds(&self, lo: u64, hi: u64) -> bool {
        let i = self.positions.partition_point(|&p| p < lo);
        i < self.positions.len() && self.positions[i] < hi
    }

    /// Whether `[lo, hi)` lies inside the contiguous run (its root folded from its leaves).
    fn inside(&self, lo: u64, hi: u64) -> bool {
        self.run
            .is_some_and(|(first, end)| first <= lo && hi <= end)
    }

    fn plan(&self, level: u32, index: u64, need: &mut Vec<NodeId>) {
        let lo = index << level;
        let hi = lo + (1 << level);
        if !self.holds(lo, hi) {
            need.push((level, index));
        } else if level > 0 && !self.inside(lo, hi) {
            self.plan(level - 1, 2 * index, need);
            self.plan(level - 1, 2 * index + 1, need);
        }
    }
}

/// The complete subtrees `leaves_root` takes from the stored nodes for a tree of `size`
/// leaves of which those at `positions` (sorted, distinct) are known, in the order it uses
/// them (`strict.leaves_root`'s plan): every complete subtree holding no known position,
/// highest first, and none inside a contiguous run of them.
#[must_use]
pub fn leaves_plan(size: u64, positions: &[u64]) -> Vec<NodeId> {
    let known = Known::new(positions);
    let mut need = Vec::new();
    for (level, index) in subtrees_from(0, size) {
        known.plan(level, index, &mut need);
    }
    need
}

/// The RFC 9162 root of `size` leaves from the leaves `leaves` at `positions` (sorted,
/// distinct) and the hashes `got` of `leaves_plan(size, positions)`, in its order: a
/// multi-leaf inclusion proof (`strict.leaves_root`). None when `got` or `leaves` is not as
/// long as they must be.
#[must_use]
pub fn leaves_root(size: u64, positions: &[u64], leaves: &[Hash], got: &[Hash]) -> Option<Hash> {
    struct Walk<'a> {
        known: Known<'a>,
        leaves: &'a [Hash],
        got: std::slice::Iter<'a, Hash>,
    }
    impl Walk<'_> {
        fn node(&mut self, level: u32, index: u64) -> Option<Hash> {
            let lo = index << level;
            let hi = lo + (1 << level);
            if !self.known.holds(lo, hi) {
                return self.got.next().copied();
            }
            if level == 0 {
                let i = self.known.positions.partition_point(|&p| p < lo);
                return self.leaves.get(i).copied();
            }
            if self.known.inside(lo, hi) {
                let i = self.known.positions.partition_point(|&p| p < lo);
                return Some(fold_perfect(self.leaves.get(i..i + (1 << level))?));
            }
            let l = self.node(level - 1, 2 * index)?;
            let r = self.node(level - 1, 2 * index + 1)?;
            Some(node_hash(&l, &r))
        }
    }
    if leaves.len() != positions.len() {
        return None;
    }
    let mut walk = Walk {
        known: Known::new(positions),
        leaves,
        got: got.iter(),
    };
    let mut tops = Vec::new();
    for (level, index) in subtrees_from(0, size) {
        tops.push(walk.node(level, index)?);
    }
    walk.got.next().is_none().then(|| root_from_subtrees(&tops))
}

/// Why a proof does not verify; Python reports the reference module's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProofFail {
    IndexOutOfRange,
    WrongLength,
}

/// The root an inclusion proof gives leaf `index` of a tree of `size` leaves
/// (RFC 9162 section 2.1.3.2 steps 1-4 and the `sn == 0` half of step 5).
///
/// # Errors
/// `ProofFail` when the index is not in the tree or the proof has the wrong length.
pub fn root_from_inclusion_proof(
    leaf: &Hash,
    index: u64,
    size: u64,
    proof: &[Hash],
) -> Result<Hash, ProofFail> {
    if index >= size {
        return Err(ProofFail::IndexOutOfRange);
    }
    let (mut fn_, mut sn) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if sn == 0 {
            return Err(ProofFail::WrongLength);
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            while fn_ != 0 && fn_ & 1 == 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(ProofFail::WrongLength);
    }
    Ok(r)
}

/// The two roots a consistency proof gives for `0 < size1 < size2` (RFC 9162 section
/// 2.1.4.2 steps 1-7 but the final comparisons, which the caller makes).
///
/// # Errors
/// `ProofFail::WrongLength` when the proof is empty or of the wrong length.
pub fn roots_from_consistency_proof(
    size1: u64,
    size2: u64,
    proof: &[Hash],
    root1: &Hash,
) -> Result<(Hash, Hash), ProofFail> {
    if proof.is_empty() || size1 == 0 || size1 >= size2 {
        return Err(ProofFail::WrongLength);
    }
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if size1 & (size1 - 1) == 0 {
        path.push(*root1);
    }
    path.extend_from_slice(proof);
    let (mut fn_, mut sn) = (size1 - 1, size2 - 1);
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    let mut fr = path[0];
    let mut sr = path[0];
    for c in &path[1..] {
        if sn == 0 {
            return Err(ProofFail::WrongLength);
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while fn_ != 0 && fn_ & 1 == 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(ProofFail::WrongLength);
    }
    Ok((fr, sr))
}

#[cfg(test)]
mod plan_tests {
    use super::*;

    #[test]
    fn the_path_of_a_leaf() {
        assert_eq!(subtrees_from(0, 6), vec![(2, 0), (1, 2)]);
        // size 7, leaf 4: sibling leaf 5, then the fold of [6, 7), then the subtree [0, 4).
        assert_eq!(path_plan(4, 7), (vec![(0, 5)], vec![(2, 0)], vec![(0, 6)]));
        assert_eq!(path_plan(0, 1), (vec![], vec![], vec![]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::leaf_hash;

    #[test]
    fn node_keys_by_end_sort_in_append_order() {
        assert_eq!(node_key(1, 2, 0, false), Some(1 << 48 | 2 << 42));
        assert_eq!(node_key(1, 2, 0, true), Some(1 << 48 | 4 << 6 | 2));
        assert_eq!(node_key(1, 3, 0, true), Some(1 << 48 | 8 << 6 | 3));
        // (2, 1) ends at 8 too, below (3, 0); both after (2, 0) and before anything of 9..
        assert!(node_key(1, 2, 1, true) < node_key(1, 3, 0, true));
        assert!(node_key(1, 2, 0, true) < node_key(1, 2, 1, true));
        assert_eq!(node_key(1, 40, 0, true), Some(1 << 48 | 1 << 46 | 40));
        assert_eq!(node_key(1, 40, 1, true), None); // past 2**40 leaves
        assert_eq!(node_key(1 << 15, 2, 0, false), None);
    }

    /// The RFC's recursive MTH, for checking the folds.
    fn mth(leaves: &[Hash]) -> Hash {
        match leaves.len() {
            0 => empty_root(),
            1 => leaves[0],
            n => {
                let k = 1usize << (usize::BITS - (n - 1).leading_zeros() - 1);
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    #[test]
    fn leaves_root_is_the_mth_from_any_known_leaves() {
        let all: Vec<Hash> = (0u8..19).map(|i| leaf_hash(&[i])).collect();
        for size in 0..all.len() {
            let leaves = &all[..size];
            let subsets: Vec<Vec<u64>> = vec![
                vec![],
                (0..size as u64).collect(),
                (0..size as u64).filter(|p| p % 3 == 1).collect(),
                (size as u64 / 2..size as u64).collect(),
                (1..size as u64 / 2 + 1).collect(),
            ];
            for positions in subsets {
                let need = leaves_plan(size as u64, &positions);
                let got: Vec<Hash> = need
                    .iter()
                    .map(|&(l, i)| mth(&leaves[(i << l) as usize..((i + 1) << l) as usize]))
                    .collect();
                let known: Vec<Hash> = positions.iter().map(|&p| leaves[p as usize]).collect();
                let want = mth(leaves);
                assert_eq!(
                    leaves_root(size as u64, &positions, &known, &got),
                    Some(want)
                );
                if let Some(first) = known.first() {
                    let mut wrong = known.clone();
                    wrong[0] = node_hash(first, first);
                    assert_ne!(
                        leaves_root(size as u64, &positions, &wrong, &got),
                        Some(want)
                    );
                }
                let short = &got[..got.len().saturating_sub(1)];
                if !got.is_empty() {
                    assert_eq!(leaves_root(size as u64, &positions, &known, short), None);
                }
            }
        }
    }

    #[test]
    fn fold_perfect_is_the_mth_of_a_power_of_two() {
        let leaves: Vec<Hash> = (0u8..8).map(|i| leaf_hash(&[i])).collect();
        for n in [1usize, 2, 4, 8] {
            assert_eq!(fold_perfect(&leaves[..n]), mth(&leaves[..n]));
        }
    }

    fn path(m: usize, leaves: &[Hash]) -> Vec<Hash> {
        let n = leaves.len();
        if n <= 1 {
            return vec![];
        }
        let k = 1usize << (usize::BITS - (n - 1).leading_zeros() - 1);
        if m < k {
            let mut p = path(m, &leaves[..k]);
            p.push(mth(&leaves[k..]));
            p
        } else {
            let mut p = path(m - k, &leaves[k..]);
            p.push(mth(&leaves[..k]));
            p
        }
    }

    #[test]
    fn compact_range_matches_mth_and_proofs_verify() {
        let leaves: Vec<Hash> = (0u32..70).map(|i| leaf_hash(&i.to_be_bytes())).collect();
        let mut cr = CompactRange::default();
        let mut nodes = Vec::new();
        assert_eq!(cr.root(), empty_root());
        for (i, leaf) in leaves.iter().enumerate() {
            cr.append(*leaf, &mut nodes);
            assert_eq!(cr.root(), mth(&leaves[..=i]));
        }
        assert_eq!(nodes.len(), 70 - 3); // n - popcount(n) interior nodes
        for size in 1..=leaves.len() {
            for index in 0..size {
                let p = path(index, &leaves[..size]);
                let got = root_from_inclusion_proof(&leaves[index], index as u64, size as u64, &p);
                assert_eq!(got, Ok(mth(&leaves[..size])));
            }
        }
        let p = path(3, &leaves[..10]);
        assert_eq!(
            root_from_inclusion_proof(&leaves[3], 3, 10, &p[..p.len() - 1]),
            Err(ProofFail::WrongLength)
        );
        assert_eq!(
            root_from_inclusion_proof(&leaves[3], 10, 10, &p),
            Err(ProofFail::IndexOutOfRange)
        );
    }
}
