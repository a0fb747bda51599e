//! Damage decoded from arbitrary bytes (a fuzz input), applied to an image.
//!
//! An input is a list of patches, five header bytes each: kind, block,
//! offset (two bytes), length, then that many bytes. The block is an index
//! into the image's non-zero blocks (its metadata and data, not free
//! space), so short inputs reach structures. A patch can write bytes, zero
//! the block, or flip bits; `Reseal` also recomputes the block's checksum
//! afterwards, so the damage gets past checksum verification and reaches
//! the structure checks behind it.

use ulfs::format::{BLOCK_SIZE, Block, seal_block};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Write,
    Reseal,
    Zero,
    Flip,
}

/// One decoded patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    pub kind: Kind,
    pub block: usize,
    pub offset: usize,
    pub bytes: Vec<u8>,
}

/// Most bytes one patch writes.
const PATCH_MAX: usize = 64;

/// The patches an input describes (a truncated last one is dropped).
pub fn decode(mut input: &[u8]) -> Vec<Patch> {
    let mut out = Vec::new();
    while input.len() >= 5 {
        let kind = match input[0] % 4 {
            0 => Kind::Write,
            1 => Kind::Reseal,
            2 => Kind::Zero,
            _ => Kind::Flip,
        };
        let block = input[1] as usize;
        let offset = u16::from_le_bytes([input[2], input[3]]) as usize % BLOCK_SIZE;
        let len = (input[4] as usize % PATCH_MAX).min(input.len() - 5);
        out.push(Patch {
            kind,
            block,
            offset,
            bytes: input[5..5 + len].to_vec(),
        });
        input = &input[5 + len..];
    }
    out
}

/// Blocks of `image` that hold something (all others are free space).
pub fn used_blocks(image: &[u8]) -> Vec<usize> {
    image
        .chunks_exact(BLOCK_SIZE)
        .enumerate()
        .filter(|(_, b)| b.iter().any(|&x| x != 0))
        .map(|(i, _)| i)
        .collect()
}

/// Applies `patches` to `image`; `targets` are the blocks patch indices
/// choose from (`used_blocks` of the undamaged image).
pub fn apply(image: &mut [u8], targets: &[usize], patches: &[Patch]) {
    if targets.is_empty() {
        return;
    }
    for p in patches {
        let bid = targets[p.block % targets.len()];
        let block: &mut Block = (&mut image[bid * BLOCK_SIZE..(bid + 1) * BLOCK_SIZE])
            .try_into()
            .expect("a block");
        let end = (p.offset + p.bytes.len()).min(BLOCK_SIZE);
        let bytes = &p.bytes[..end - p.offset];
        match p.kind {
            Kind::Write | Kind::Reseal => block[p.offset..end].copy_from_slice(bytes),
            Kind::Zero => block.fill(0),
            Kind::Flip => {
                for (b, x) in block[p.offset..end].iter_mut().zip(bytes) {
                    *b ^= x | 1;
                }
            }
        }
        if p.kind == Kind::Reseal {
            seal_block(block);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_and_applies() {
        let input = [1, 0, 8, 0, 2, 0xAA, 0xBB, 2, 1, 0, 0, 0];
        let patches = decode(&input);
        assert_eq!(patches.len(), 2);
        assert_eq!(patches[0].kind, Kind::Reseal);
        assert_eq!(patches[0].bytes, vec![0xAA, 0xBB]);
        let mut image = vec![1u8; 3 * BLOCK_SIZE];
        apply(&mut image, &[0, 2], &patches);
        assert_eq!(&image[8..10], &[0xAA, 0xBB]);
        assert!(
            image[2 * BLOCK_SIZE..].iter().all(|&b| b == 0),
            "second patch zeroes block 2"
        );
        assert!(image[BLOCK_SIZE..2 * BLOCK_SIZE].iter().all(|&b| b == 1));
    }
}
