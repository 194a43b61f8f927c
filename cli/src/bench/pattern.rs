//! Deterministic data patterns and the checksum both processes compute over them.

/// Fills `buf` with the pattern of `seed`: a splitmix64 stream, so every byte depends on the
/// seed and on its position (a transfer to the wrong offset does not verify).
pub(crate) fn fill(seed: u64, buf: &mut [u8]) {
    let mut chunks = buf.chunks_exact_mut(8);
    let mut i = 0u64;
    for c in &mut chunks {
        c.copy_from_slice(&word(seed, i).to_le_bytes());
        i += 1;
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let w = word(seed, i).to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&w[..n]);
    }
}

/// The first `len` bytes of the pattern of `seed`.
pub(crate) fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(seed, &mut v);
    v
}

fn word(seed: u64, i: u64) -> u64 {
    let mut z = seed
        .wrapping_add(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(i.wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ i);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 64-bit FNV-1a of `bytes`.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

/// The value of a round's record (`--op round`): the little-endian u64 at the start of
/// `bytes`, 0 when they are shorter.
pub(crate) fn record(bytes: &[u8]) -> u64 {
    bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// Makes `bytes` hold the next record: its value plus one (a no-op on fewer than 8 bytes).
pub(crate) fn next_record(bytes: &mut [u8]) {
    let next = record(bytes).wrapping_add(1);
    if let Some(b) = bytes.get_mut(..8) {
        b.copy_from_slice(&next.to_le_bytes());
    }
}

/// The first position where `got` differs from `want` (or where one ends early).
pub(crate) fn first_mismatch(got: &[u8], want: &[u8]) -> Option<usize> {
    got.iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .or_else(|| (got.len() != want.len()).then(|| got.len().min(want.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_count_up() {
        let mut r = 41u64.to_le_bytes().to_vec();
        assert_eq!(record(&r), 41);
        next_record(&mut r);
        assert_eq!(record(&r), 42);
        let mut max = u64::MAX.to_le_bytes();
        next_record(&mut max);
        assert_eq!(record(&max), 0);
        assert_eq!(record(&[1, 2]), 0);
    }

    #[test]
    fn patterns_are_deterministic_and_position_dependent() {
        let a = pattern(7, 1000);
        assert_eq!(a, pattern(7, 1000));
        assert_ne!(a, pattern(8, 1000));
        // A prefix of a longer pattern is the shorter pattern (rows of several sizes share it).
        assert_eq!(&pattern(7, 4099)[..13], &pattern(7, 13)[..]);
        // Shifted by 8 bytes it no longer matches: an offset error is caught.
        assert_ne!(&a[8..16], &a[..8]);
        // Not constant, and nearly every byte differs from the pattern of another seed.
        let b = pattern(8, 1000);
        assert!(a.iter().zip(&b).filter(|(x, y)| x != y).count() > 950);
        assert!(a.windows(2).any(|w| w[0] != w[1]));
        // Seeds that differ in one bit give unrelated patterns.
        assert_ne!(pattern(0, 8), pattern(1, 8));
        assert_ne!(pattern(u64::MAX, 8), pattern(!1, 8));
        for len in 0..20 {
            assert_eq!(pattern(3, len).len(), len);
        }
    }

    #[test]
    fn fnv1a_known_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        let mut p = pattern(42, 4096);
        let h = fnv1a64(&p);
        p[4095] ^= 1;
        assert_ne!(fnv1a64(&p), h, "one flipped bit changes the sum");
    }

    #[test]
    fn mismatches_are_located() {
        assert_eq!(first_mismatch(b"abc", b"abc"), None);
        assert_eq!(first_mismatch(b"abd", b"abc"), Some(2));
        assert_eq!(first_mismatch(b"ab", b"abc"), Some(2));
        assert_eq!(first_mismatch(b"", b""), None);
    }
}
