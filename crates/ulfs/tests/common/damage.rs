//! Crafted damage that keeps checksums valid: a field of a metadata
//! structure (superblock, inode or inode-block header, indirect block,
//! directory leaf or inner node, map block, journal header, descriptor or
//! commit record) is set to a hostile value and the block's CRC32C is then
//! recomputed, so what reads the image gets past the checksum and must
//! rely on its structure checks. Included with `#[path]` by the suites
//! that damage images.

use ulfs::format::{BLOCK_SIZE, get_u16, get_u32, get_u64, put_u16, put_u32, put_u64, seal_block};

/// Kinds of block worth damaging, by magic.
const MAGICS: [&[u8; 4]; 9] = [
    b"ULFS", b"UMAP", b"UINO", b"UIND", b"UDLF", b"UDIN", b"UJHD", b"UJDS", b"UJCM",
];

/// The metadata blocks of an image (by magic, log copies included).
pub fn meta_blocks(img: &[u8]) -> Vec<usize> {
    (0..img.len() / BLOCK_SIZE)
        .filter(|&b| {
            let m = &img[b * BLOCK_SIZE..b * BLOCK_SIZE + 4];
            MAGICS.iter().any(|k| m == *k)
        })
        .collect()
}

/// A field: byte offset in the block and width in bytes (1, 2, 4 or 8).
type Field = (usize, usize);

/// Fields of an inode record, relative to its slot (docs/FORMAT.md).
const INODE_FIELDS: [Field; 14] = [
    (0, 4),   // mode
    (4, 4),   // nlink
    (16, 8),  // size
    (24, 8),  // blocks
    (80, 4),  // flags
    (88, 8),  // parent
    (96, 8),  // name key
    (104, 8), // next orphan
    (112, 8), // entries
    (128, 4), // map[0]
    (132, 4), // map[1]
    (172, 4), // map[11]
    (176, 4), // single indirect
    (180, 4), // double indirect
];

/// Picks a field of block `b` (whose bytes are `blk`) to damage.
fn pick_field(blk: &[u8], next: &mut dyn FnMut() -> u64) -> Field {
    let mut pick = |n: u64| (next() % n) as usize;
    match &blk[..4] {
        b"ULFS" => (8 + 4 * pick(60), if pick(2) == 0 { 4 } else { 8 }),
        b"UMAP" => [(8, 4), (12, 4), (16 + 4 * pick(1000), 4)][pick(3)],
        b"UINO" => {
            if pick(4) == 0 {
                [(8, 4), (12, 4), (16, 2)][pick(3)]
            } else {
                // A slot in use if there is one.
                let used = get_u16(blk, 16);
                let slots: Vec<usize> = (1..16).filter(|s| used >> s & 1 == 1).collect();
                let s = if slots.is_empty() {
                    1 + pick(15)
                } else {
                    slots[pick(slots.len() as u64)]
                };
                let (o, w) = INODE_FIELDS[pick(INODE_FIELDS.len() as u64)];
                (s * 256 + o, w)
            }
        }
        b"UIND" => {
            if pick(4) == 0 {
                (8, 8)
            } else {
                let set: Vec<usize> = (0..1020)
                    .filter(|i| get_u32(blk, 16 + 4 * i) != 0)
                    .collect();
                let i = if set.is_empty() {
                    pick(1020)
                } else {
                    set[pick(set.len() as u64)]
                };
                (16 + 4 * i, 4)
            }
        }
        b"UDLF" => {
            let count = (get_u16(blk, 16) as usize).min(2000);
            match pick(6) {
                0 => [(8, 8), (16, 2), (18, 2), (20, 4)][pick(4)],
                1 | 2 if count > 0 => (32 + 2 * pick(count as u64), 2),
                _ if count > 0 => {
                    // A field of a record, through its slot.
                    let at = get_u16(blk, 32 + 2 * pick(count as u64)) as usize;
                    let (o, w) = [(0, 8), (8, 8), (16, 1), (17, 1)][pick(4)];
                    ((at + o).min(BLOCK_SIZE - w), w)
                }
                _ => (16, 2),
            }
        }
        b"UDIN" => {
            let count = (get_u16(blk, 16) as usize).clamp(1, 340);
            match pick(4) {
                0 => [(8, 8), (16, 2), (18, 2)][pick(3)],
                1 => (32 + 12 * pick(count as u64), 8),
                _ => (32 + 12 * pick(count as u64) + 8, 4),
            }
        }
        b"UJHD" => (8, 8),
        b"UJDS" => {
            let count = (get_u32(blk, 16) as usize).min(1016);
            match pick(3) {
                0 => [(8, 8), (16, 4)][pick(2)],
                _ => (32 + 4 * pick(count.max(1) as u64), 4),
            }
        }
        b"UJCM" => [(8, 8), (16, 4), (20, 4)][pick(3)],
        _ => (8, 4),
    }
}

/// A hostile value for a field `w` bytes wide in an image of `blocks`
/// blocks whose metadata blocks are `meta`.
fn hostile_value(w: usize, blocks: u64, meta: &[usize], next: &mut dyn FnMut() -> u64) -> u64 {
    let r = next();
    let some_meta = meta[(next() % meta.len() as u64) as usize] as u64;
    let choices: &[u64] = match w {
        1 => &[0, 1, 2, 4, 8, 10, 127, 255, r & 0xff],
        2 => &[0, 1, 2, 31, 32, 33, 4095, 4096, 0x7fff, 0xffff, r & 0xffff],
        4 => &[
            0,
            1,
            2,
            blocks - 1,
            blocks,
            blocks + 1,
            some_meta,
            r % blocks,
            0x8000_0000,
            u32::MAX as u64,
            r & 0xffff_ffff,
        ],
        _ => &[
            0,
            1,
            some_meta * 16 + 1,
            blocks * 4096,
            blocks * 4096 + 1,
            1 << 62,
            i64::MAX as u64,
            1 << 63,
            u64::MAX,
            r,
        ],
    };
    choices[(next() % choices.len() as u64) as usize]
}

/// Recomputes the checksum of block `b` the way its kind is checked.
fn reseal(blk: &mut [u8; BLOCK_SIZE]) {
    if &blk[..4] == b"UJHD" {
        // The journal header's CRC covers its first sector only.
        put_u32(blk, 4, 0);
        let c = crc32c::crc32c(&blk[..512]);
        put_u32(blk, 4, c);
    } else {
        seal_block(blk);
    }
}

/// Damages one field of one metadata block of `img` (also in the second
/// superblock when `both_supers` and the field is in the first) and
/// reseals it; returns what it did, for a failure message.
pub fn damage_sealed(img: &mut [u8], next: &mut dyn FnMut() -> u64) -> String {
    let meta = meta_blocks(img);
    let blocks = (img.len() / BLOCK_SIZE) as u64;
    let b = meta[(next() % meta.len() as u64) as usize];
    let blk: &mut [u8; BLOCK_SIZE] = (&mut img[b * BLOCK_SIZE..(b + 1) * BLOCK_SIZE])
        .try_into()
        .expect("block");
    let kind = String::from_utf8_lossy(&blk[..4]).into_owned();
    let (off, w) = pick_field(blk, next);
    let v = hostile_value(w, blocks, &meta, next);
    let old = match w {
        1 => blk[off] as u64,
        2 => get_u16(blk, off) as u64,
        4 => get_u32(blk, off) as u64,
        _ => get_u64(blk, off),
    };
    match w {
        1 => blk[off] = v as u8,
        2 => put_u16(blk, off, v as u16),
        4 => put_u32(blk, off, v as u32),
        _ => put_u64(blk, off, v),
    }
    reseal(blk);
    let mut what = format!(
        "block {b} ({kind}) bytes {off}..{}: {old:#x} -> {v:#x}",
        off + w
    );
    // The second superblock would hide damage to the first: damage it
    // the same way half the time.
    if b == 0
        && next().is_multiple_of(2)
        && img.len() >= 2 * BLOCK_SIZE
        && &img[BLOCK_SIZE..BLOCK_SIZE + 4] == b"ULFS"
    {
        let blk: &mut [u8; BLOCK_SIZE] = (&mut img[BLOCK_SIZE..2 * BLOCK_SIZE])
            .try_into()
            .expect("block");
        match w {
            4 => put_u32(blk, off, v as u32),
            _ => put_u64(blk, off, v),
        }
        reseal(blk);
        what.push_str(" (both superblocks)");
    }
    what
}
