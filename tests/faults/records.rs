//! The segment's layout and its records: every slot holds one record (sequence, slot,
//! checksum, a pattern the sequence and slot decide), so a torn, misplaced or lost write
//! shows; lanes are written in order, one write in flight each, so what a lane holds
//! after its writer died is known but for that one write.

/// Bytes per record slot.
pub const SLOT: usize = 8192;
/// Lanes: one writer task each.
pub const LANES: usize = 4;
/// Slots per lane.
pub const PER_LANE: usize = 15;
/// The slot the `check` command writes and reads back.
pub const CHECK_SLOT: usize = LANES * PER_LANE;
/// The slot holding one fetch-add counter per lane (8 bytes apart).
pub const COUNTER_SLOT: usize = CHECK_SLOT + 1;
/// The segment's size.
pub const SIZE: usize = 64 * SLOT;
/// Record slots (lanes and the check slot), all holding a valid record at start.
pub const RECORD_SLOTS: usize = CHECK_SLOT + 1;
const HEADER: usize = 24;

/// The offset of slot `slot`.
pub fn offset(slot: usize) -> u64 {
    (slot * SLOT) as u64
}

/// The offset of lane `lane`'s fetch-add counter.
pub fn counter(lane: usize) -> u64 {
    offset(COUNTER_SLOT) + 8 * lane as u64
}

/// Lane `lane`'s `n`-th slot.
pub fn lane_slot(lane: usize, n: u64) -> usize {
    lane * PER_LANE + (n % PER_LANE as u64) as usize
}

fn payload(seq: u64, slot: usize, out: &mut [u8]) {
    let mut x = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (slot as u64 + 1);
    for chunk in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// The record `seq` for slot `slot`.
pub fn record(seq: u64, slot: usize) -> Vec<u8> {
    let mut r = vec![0u8; SLOT];
    payload(seq, slot, &mut r[HEADER..]);
    let sum = super::common::checksum(&r[HEADER..]);
    r[..8].copy_from_slice(&seq.to_le_bytes());
    r[8..16].copy_from_slice(&(slot as u64).to_le_bytes());
    r[16..24].copy_from_slice(&sum.to_le_bytes());
    r
}

/// The sequence of the record `bytes` if it is slot `slot`'s and whole; `None` if torn,
/// misplaced or corrupted.
pub fn check(bytes: &[u8], slot: usize) -> Option<u64> {
    if bytes.len() != SLOT {
        return None;
    }
    let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
    let (seq, at, sum) = (word(0), word(1), word(2));
    if at != slot as u64 || super::common::checksum(&bytes[HEADER..]) != sum {
        return None;
    }
    let mut want = vec![0u8; SLOT - HEADER];
    payload(seq, slot, &mut want);
    (want == bytes[HEADER..]).then_some(seq)
}

/// What one lane holds after a writer that wrote its `n`-th record as sequence
/// `base + n + 1` stopped or died (`seqs`: each slot's sequence, `None` when torn), given
/// that at least `acked` of its writes were acknowledged. Every acknowledged write must be
/// there with its value, and only the one write in flight may be torn or missing.
pub fn check_lane(seqs: &[Option<u64>], base: u64, acked: u64) -> Result<(), String> {
    let m = seqs.len() as u64;
    // The last write that landed: the highest sequence of this run.
    let last = seqs
        .iter()
        .flatten()
        .filter(|&&s| s > base)
        .max()
        .map(|s| s - base - 1);
    let done = last.map_or(0, |n| n + 1);
    if done < acked {
        return Err(format!("{acked} writes acknowledged, {done} found"));
    }
    let in_flight = done % m;
    for (j, s) in seqs.iter().enumerate() {
        let j = j as u64;
        // The last write of this run to slot j, if any.
        let expected = (done > j).then(|| {
            let n = j + (done - 1 - j) / m * m;
            base + n + 1
        });
        let ok = match (s, expected) {
            _ if j == in_flight => match s {
                None => true,
                Some(s) => Some(*s) == expected || (expected.is_none() && *s <= base),
            },
            (Some(s), Some(e)) => *s == e,
            (Some(s), None) => *s <= base,
            (None, _) => false,
        };
        if !ok {
            return Err(format!(
                "slot {j} holds {s:?}, expected {expected:?} (base {base}, {done} writes landed)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_tears_show() {
        let r = record(7, 3);
        assert_eq!(check(&r, 3), Some(7));
        assert_eq!(check(&r, 4), None);
        let mut torn = r.clone();
        torn[SLOT / 2..].copy_from_slice(&record(8, 3)[SLOT / 2..]);
        assert_eq!(check(&torn, 3), None);
    }

    #[test]
    fn lanes() {
        let b = 100;
        // Five writes landed in a lane of three slots: seqs 104, 105, 103.
        let lane = [Some(b + 4), Some(b + 5), Some(b + 3)];
        assert!(check_lane(&lane, b, 5).is_ok());
        assert!(check_lane(&lane, b, 6).is_err());
        // The sixth torn in slot 2.
        assert!(check_lane(&[Some(b + 4), Some(b + 5), None], b, 5).is_ok());
        // A lost acknowledged write.
        assert!(check_lane(&[Some(b + 1), Some(b + 5), Some(b + 3)], b, 5).is_err());
        // Nothing written yet: old records, slot 0 may be torn.
        assert!(check_lane(&[None, Some(3), Some(9)], b, 0).is_ok());
        assert!(check_lane(&[Some(3), None, Some(9)], b, 0).is_err());
    }
}
