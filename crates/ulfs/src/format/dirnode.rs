//! Directory index nodes: the blocks of a directory's B+tree keyed by name
//! hash. Leaves are slotted pages of variable-length entries sorted by key;
//! inner nodes are sorted arrays of (key, child). Pure byte manipulation, no
//! I/O; every offset read from a node is checked before use.
//! Layout: docs/FORMAT.md, "Directories".

use super::*;

pub const NODE_OWNER: usize = 8; // u64 inode number of the directory
const NODE_COUNT: usize = 16; // u16
const LEAF_HEAP: usize = 18; // u16 lowest record offset
const LEAF_NEXT: usize = 20; // u32 next leaf in key order
const INNER_LEVEL: usize = 18; // u16 height above the leaves (>= 1)
pub const NODE_HDR: usize = 32;

pub(crate) const REC_KEY: usize = 0;
pub(crate) const REC_INO: usize = 8;
pub(crate) const REC_TYPE: usize = 16;
pub(crate) const REC_NLEN: usize = 17;
pub(crate) const REC_NAME: usize = 18;

const INNER_ENTRY: usize = 12;
pub const INNER_CAP: usize = (BLOCK_SIZE - NODE_HDR) / INNER_ENTRY;

/// Why a node is not well formed.
pub type NodeError = &'static str;

/// One directory entry as stored in a leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rec<'a> {
    pub key: u64,
    pub ino: u64,
    pub dtype: u8,
    pub name: &'a [u8],
}

impl Rec<'_> {
    /// Bytes the record takes in the heap, plus its slot.
    pub fn footprint(&self) -> usize {
        rec_len(self.name.len()) + 2
    }
}

fn rec_len(name_len: usize) -> usize {
    (REC_NAME + name_len + 1) & !1
}

pub fn node_count(b: &Block) -> usize {
    get_u16(b, NODE_COUNT) as usize
}

// ---------- leaves ----------

pub fn leaf_init(b: &mut Block, owner: u64) {
    init_block(b, MAGIC_DIR_LEAF);
    put_u64(b, NODE_OWNER, owner);
    put_u16(b, LEAF_HEAP, BLOCK_SIZE as u16);
}

pub fn leaf_next(b: &Block) -> Bid {
    get_u32(b, LEAF_NEXT)
}

pub fn leaf_set_next(b: &mut Block, next: Bid) {
    put_u32(b, LEAF_NEXT, next);
}

/// Checks the header of a leaf so that `leaf_rec` can trust slot positions.
pub fn leaf_check(b: &Block) -> Result<(), NodeError> {
    if magic(b) != MAGIC_DIR_LEAF {
        return Err("not a directory leaf");
    }
    let count = node_count(b);
    let heap = get_u16(b, LEAF_HEAP) as usize;
    if NODE_HDR + 2 * count > heap || heap > BLOCK_SIZE {
        return Err("leaf slot array overlaps its heap");
    }
    Ok(())
}

/// Entry `i` of a checked leaf.
pub fn leaf_rec(b: &Block, i: usize) -> Result<Rec<'_>, NodeError> {
    if NODE_HDR + 2 * i + 2 > BLOCK_SIZE {
        return Err("leaf slot index past the block");
    }
    let off = get_u16(b, NODE_HDR + 2 * i) as usize;
    let heap = get_u16(b, LEAF_HEAP) as usize;
    if off < heap || off + REC_NAME > BLOCK_SIZE {
        return Err("leaf slot points outside the heap");
    }
    let nlen = b[off + REC_NLEN] as usize;
    if nlen == 0 || off + REC_NAME + nlen > BLOCK_SIZE {
        return Err("leaf entry name out of bounds");
    }
    Ok(Rec {
        key: get_u64(b, off + REC_KEY),
        ino: get_u64(b, off + REC_INO),
        dtype: b[off + REC_TYPE],
        name: &b[off + REC_NAME..off + REC_NAME + nlen],
    })
}

/// Key of entry `i` without bounds on the name (cheap, for binary search).
fn leaf_key(b: &Block, i: usize) -> Result<u64, NodeError> {
    if NODE_HDR + 2 * i + 2 > BLOCK_SIZE {
        return Err("leaf slot index past the block");
    }
    let off = get_u16(b, NODE_HDR + 2 * i) as usize;
    if off + 8 > BLOCK_SIZE || off < NODE_HDR {
        return Err("leaf slot points outside the block");
    }
    Ok(get_u64(b, off))
}

/// Index of the first entry with key >= `key`.
pub fn leaf_lower_bound(b: &Block, key: u64) -> Result<usize, NodeError> {
    let (mut lo, mut hi) = (0, node_count(b));
    while lo < hi {
        let mid = (lo + hi) / 2;
        if leaf_key(b, mid)? < key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// Bytes used by live records and slots.
pub fn leaf_used(b: &Block) -> Result<usize, NodeError> {
    let mut used = 0;
    for i in 0..node_count(b) {
        used += leaf_rec(b, i)?.footprint();
    }
    Ok(used)
}

/// Room left for records and slots once the heap is compacted.
pub const LEAF_ROOM: usize = BLOCK_SIZE - NODE_HDR;

/// Inserts `rec` at slot `i` if it fits in the unfragmented free space.
/// Returns false when the caller must compact or split.
pub fn leaf_insert(b: &mut Block, i: usize, rec: &Rec) -> bool {
    let count = node_count(b);
    let heap = get_u16(b, LEAF_HEAP) as usize;
    let need = rec_len(rec.name.len());
    if NODE_HDR + 2 * (count + 1) + need > heap {
        return false;
    }
    let off = heap - need;
    put_u64(b, off + REC_KEY, rec.key);
    put_u64(b, off + REC_INO, rec.ino);
    b[off + REC_TYPE] = rec.dtype;
    b[off + REC_NLEN] = rec.name.len() as u8;
    b[off + REC_NAME..off + REC_NAME + rec.name.len()].copy_from_slice(rec.name);
    let slots = NODE_HDR + 2 * i;
    b.copy_within(slots..NODE_HDR + 2 * count, slots + 2);
    put_u16(b, slots, off as u16);
    put_u16(b, NODE_COUNT, (count + 1) as u16);
    put_u16(b, LEAF_HEAP, off as u16);
    true
}

/// Removes slot `i` (its record becomes garbage until the next compaction).
pub fn leaf_remove(b: &mut Block, i: usize) {
    let count = node_count(b);
    let slots = NODE_HDR + 2 * i;
    b.copy_within(slots + 2..NODE_HDR + 2 * count, slots);
    put_u16(b, NODE_COUNT, (count - 1) as u16);
    if count == 1 {
        put_u16(b, LEAF_HEAP, BLOCK_SIZE as u16);
    }
}

/// Rewrites the entry at slot `i` in place to point at another inode.
pub fn leaf_set_ino(b: &mut Block, i: usize, ino: u64, dtype: u8) {
    let off = get_u16(b, NODE_HDR + 2 * i) as usize;
    put_u64(b, off + REC_INO, ino);
    b[off + REC_TYPE] = dtype;
}

/// Rewrites a leaf to hold exactly `recs` (sorted), keeping owner and next.
pub fn leaf_rebuild(b: &mut Block, recs: &[Rec]) {
    let owner = get_u64(b, NODE_OWNER);
    let next = leaf_next(b);
    leaf_init(b, owner);
    leaf_set_next(b, next);
    for (i, r) in recs.iter().enumerate() {
        let fitted = leaf_insert(b, i, r);
        debug_assert!(fitted, "leaf_rebuild given more than a block");
    }
}

// ---------- inner nodes ----------

pub fn inner_init(b: &mut Block, owner: u64, level: u16) {
    init_block(b, MAGIC_DIR_INNER);
    put_u64(b, NODE_OWNER, owner);
    put_u16(b, INNER_LEVEL, level);
}

pub fn inner_level(b: &Block) -> u16 {
    get_u16(b, INNER_LEVEL)
}

pub fn inner_check(b: &Block) -> Result<(), NodeError> {
    if magic(b) != MAGIC_DIR_INNER {
        return Err("not a directory index node");
    }
    let n = node_count(b);
    if n == 0 || n > INNER_CAP {
        return Err("index node entry count out of range");
    }
    if inner_level(b) == 0 || inner_level(b) > 8 {
        return Err("index node level out of range");
    }
    Ok(())
}

pub fn inner_entry(b: &Block, i: usize) -> (u64, Bid) {
    let o = NODE_HDR + INNER_ENTRY * i;
    (get_u64(b, o), get_u32(b, o + 8))
}

/// Index of the child whose range holds `key`: the last entry with
/// entry key <= key (entry 0 covers everything below entry 1).
pub fn inner_child_for(b: &Block, key: u64) -> usize {
    let (mut lo, mut hi) = (1, node_count(b));
    while lo < hi {
        let mid = (lo + hi) / 2;
        if inner_entry(b, mid).0 <= key {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo - 1
}

/// Inserts (key, child) at position `i`; false when the node is full.
pub fn inner_insert(b: &mut Block, i: usize, key: u64, child: Bid) -> bool {
    let n = node_count(b);
    if n >= INNER_CAP {
        return false;
    }
    let o = NODE_HDR + INNER_ENTRY * i;
    b.copy_within(o..NODE_HDR + INNER_ENTRY * n, o + INNER_ENTRY);
    put_u64(b, o, key);
    put_u32(b, o + 8, child);
    put_u16(b, NODE_COUNT, (n + 1) as u16);
    true
}

/// Keeps entries `[0, keep)` and returns the rest, for a split.
pub fn inner_truncate(b: &mut Block, keep: usize) -> Vec<(u64, Bid)> {
    let n = node_count(b);
    let tail = (keep..n).map(|i| inner_entry(b, i)).collect();
    put_u16(b, NODE_COUNT, keep as u16);
    tail
}

pub fn inner_push(b: &mut Block, key: u64, child: Bid) -> bool {
    let n = node_count(b);
    inner_insert(b, n, key, child)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(key: u64, name: &[u8]) -> Rec<'_> {
        Rec {
            key,
            ino: key * 10,
            dtype: 8,
            name,
        }
    }

    #[test]
    fn leaf_insert_find_remove() {
        let mut b = [0u8; BLOCK_SIZE];
        leaf_init(&mut b, 42);
        for (k, n) in [(30u64, &b"c"[..]), (10, b"a"), (20, b"bb")] {
            let i = leaf_lower_bound(&b, k).unwrap();
            assert!(leaf_insert(&mut b, i, &rec(k, n)));
        }
        leaf_check(&b).unwrap();
        let keys: Vec<u64> = (0..3).map(|i| leaf_rec(&b, i).unwrap().key).collect();
        assert_eq!(keys, [10, 20, 30]);
        assert_eq!(leaf_rec(&b, 1).unwrap().name, b"bb");
        leaf_remove(&mut b, 0);
        assert_eq!(leaf_rec(&b, 0).unwrap().key, 20);
        assert_eq!(leaf_lower_bound(&b, 25).unwrap(), 1);
    }

    #[test]
    fn leaf_fills_then_refuses() {
        let mut b = [0u8; BLOCK_SIZE];
        leaf_init(&mut b, 1);
        let name = [b'x'; 255];
        let mut n = 0;
        while leaf_insert(&mut b, n, &rec(n as u64, &name)) {
            n += 1;
        }
        assert_eq!(n, LEAF_ROOM / rec(0, &name).footprint());
        assert_eq!(leaf_used(&b).unwrap(), n * rec(0, &name).footprint());
    }

    #[test]
    fn corrupt_leaf_is_reported_not_trusted() {
        let mut b = [0u8; BLOCK_SIZE];
        leaf_init(&mut b, 1);
        assert!(leaf_insert(&mut b, 0, &rec(1, b"n")));
        put_u16(&mut b, NODE_HDR, 4095); // slot points past the end
        assert!(leaf_rec(&b, 0).is_err());
        put_u16(&mut b, NODE_COUNT, 3000);
        assert!(leaf_check(&b).is_err());
    }

    #[test]
    fn inner_routing() {
        let mut b = [0u8; BLOCK_SIZE];
        inner_init(&mut b, 1, 1);
        assert!(inner_push(&mut b, 0, 100));
        assert!(inner_push(&mut b, 50, 200));
        assert!(inner_insert(&mut b, 1, 20, 150));
        inner_check(&b).unwrap();
        assert_eq!(inner_child_for(&b, 5), 0);
        assert_eq!(inner_child_for(&b, 20), 1);
        assert_eq!(inner_child_for(&b, 49), 1);
        assert_eq!(inner_child_for(&b, 1000), 2);
        let tail = inner_truncate(&mut b, 1);
        assert_eq!(tail, vec![(20, 150), (50, 200)]);
    }
}
