//! xorshift64*: a tiny deterministic generator, the same sequence for a
//! seed on every machine, for tests that pick random operations or bytes
//! and must replay them exactly from the seed a failure prints.

pub struct Rng(pub u64);

impl Rng {
    /// A generator from `seed` (any value; 0 is made odd).
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}
