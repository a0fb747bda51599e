//! How many times a cell runs and what number stands for it.
//!
//! The machines are shared and noisy, so the systems of one cell run in
//! interleaved rounds (one request to each per round, the first system
//! rotating): a burst of noise then hits every system alike rather than
//! one of them, which is what keeps ratios meaningful. The first rounds
//! are warm-up (caches, page faults, lazy allocation) and are discarded;
//! the value is the mean of the rest and the spread their sample
//! standard deviation.

#[derive(Clone, Copy, Debug)]
pub struct Rounds {
    pub warmup: usize,
    pub kept: usize,
}

impl Rounds {
    pub fn total(self) -> usize {
        self.warmup + self.kept
    }
}

/// Mean and sample standard deviation (0 for fewer than two values).
pub fn mean_stddev(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (f64::NAN, 0.0);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, 0.0);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// The order of systems in round `round`: each takes its turn first.
pub fn rotation(systems: usize, round: usize) -> impl Iterator<Item = usize> {
    (0..systems).map(move |i| (i + round) % systems.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_stddev() {
        let (m, s) = mean_stddev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert!((m - 5.0).abs() < 1e-12);
        assert!((s - 2.138_089_935).abs() < 1e-6, "{s}");
        assert_eq!(mean_stddev(&[3.0]), (3.0, 0.0));
        assert!(mean_stddev(&[]).0.is_nan());
    }

    #[test]
    fn every_system_goes_first_once_in_as_many_rounds() {
        let firsts: Vec<usize> = (0..3).map(|r| rotation(3, r).next().unwrap()).collect();
        assert_eq!(firsts, [0, 1, 2]);
        for r in 0..3 {
            let mut order: Vec<usize> = rotation(3, r).collect();
            order.sort_unstable();
            assert_eq!(order, [0, 1, 2]);
        }
    }
}
