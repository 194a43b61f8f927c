//! `--op round`: the service round of `examples/signal_service.rs` (an 8-byte record put
//! into the peer's segment and signalled in one `ImportSegment::put_signal`, or as a put
//! then a signal with `--round-two-ops`; the answer of the peer's task awaited), and its
//! baseline: the round's parts, rsm's 8 B put and rsm's signal round trip, measured in the
//! same run, so that the ratio says what composing them costs (above 1: less than the
//! parts; issue 47's target is a round of at most 0.6 x its parts, a ratio of 1.67).
//!
//! The record is a counter: the initiator's buffer holds the next value, the peer's task
//! (`rsm_side::RsmPeer`) reads the record of each signal and counts those that do not hold
//! the value due, between a `check` and a `checked` line (`proto.rs`).

use super::child::PeerProcess;
use super::pagebuf::PageBuf;
use super::pattern;
use super::proto::Command;
use super::report::Progress;
use super::rsm_run;
use super::rsm_side::RsmInitiator;
use super::stats::Summary;
use super::{BenchError, RowSpec};

/// One round of rsm's side of the row: `warmup + timed` service rounds, the records counting
/// up from `first`; verified when the peer saw every record and each held the value due.
/// `corrupt` (the test hook) tells the peer to expect one more than `first`, so none does.
pub(crate) async fn rsm_row(
    init: &RsmInitiator,
    peer: &mut PeerProcess,
    spec: &RowSpec,
    first: u64,
    progress: &mut Progress,
    corrupt: bool,
) -> Result<(Summary, bool), BenchError> {
    progress.phase("rsm", "preparing");
    let due = if corrupt {
        first.wrapping_add(1)
    } else {
        first
    };
    peer.expect_ok(&Command::Check { next: due })?;
    let mut bufs = vec![PageBuf::copy_of(&first.to_le_bytes())];
    let summary = rsm_run::measure(init, spec, &mut bufs, progress).await?;
    progress.phase("rsm", "verifying");
    let (seen, wrong) = parse_checked(&peer.request(&Command::Checked)?)?;
    let rounds = (spec.warmup() + spec.timed()) as u64;
    let last = bufs.first().map(|b| pattern::record(b));
    let ok = verdict(seen, wrong, rounds) && last == Some(first.wrapping_add(rounds));
    Ok((summary, ok))
}

/// The peer's answer to `checked`: records seen, records wrong.
fn parse_checked(reply: &str) -> Result<(u64, u64), BenchError> {
    let mut w = reply.split_whitespace().map(str::parse::<u64>);
    match (w.next(), w.next(), w.next()) {
        (Some(Ok(seen)), Some(Ok(wrong)), None) => Ok((seen, wrong)),
        _ => Err(BenchError::Peer(format!(
            "\"checked\": unexpected answer {reply:?}"
        ))),
    }
}

/// Whether the peer checked every round's record and found none wrong.
fn verdict(seen: u64, wrong: u64, rounds: u64) -> bool {
    wrong == 0 && seen == rounds
}

/// The baseline of a round: its parts one after the other, an 8 B put (`put`) then a signal
/// round trip (`signal`), each measured alone. Median and p99 are the sums of the parts'
/// (the p99 so an upper bound); the rates follow from the mean times of the parts added.
pub(crate) fn parts(put: &Summary, signal: &Summary, size: usize) -> Summary {
    let mean_s = |s: &Summary| 1.0 / s.ops_per_s;
    let ops_per_s = 1.0 / (mean_s(put) + mean_s(signal));
    Summary {
        median_us: put.median_us + signal.median_us,
        p99_us: put.p99_us.zip(signal.p99_us).map(|(a, b)| a + b),
        p999_us: put.p999_us.zip(signal.p999_us).map(|(a, b)| a + b),
        mb_per_s: ops_per_s * size as f64 / 1e6,
        ops_per_s,
        ops: put.ops.min(signal.ops),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::stats::ratio;

    fn lat(ns: u64) -> Summary {
        Summary::from_latency(&mut vec![ns; 100], 8)
    }

    #[test]
    fn parts_add_up() {
        let p = parts(&lat(2_000), &lat(6_000), 8);
        assert_eq!(p.median_us, 8.0);
        assert_eq!(p.p99_us, Some(8.0));
        assert!((p.ops_per_s - 125_000.0).abs() < 1e-6);
        assert!((p.mb_per_s - 1.0).abs() < 1e-9);
        assert_eq!(p.ops, 100);
    }

    #[test]
    fn the_ratio_is_parts_over_round() {
        let p = parts(&lat(2_000), &lat(6_000), 8);
        // A round of 10 µs against 8 µs of parts: 0.8, within the 1.5x.
        assert_eq!(ratio(true, &lat(10_000), &p), Some(0.8));
        // A round cheaper than its parts scores above 1.
        assert_eq!(ratio(true, &lat(4_000), &p), Some(2.0));
    }

    #[test]
    fn every_record_must_be_seen_and_right() {
        assert_eq!(parse_checked("1100 0").unwrap(), (1100, 0));
        for bad in ["", "1", "1 x", "1 2 3", "-1 0"] {
            assert!(parse_checked(bad).is_err(), "{bad:?} accepted");
        }
        assert!(verdict(1100, 0, 1100));
        assert!(!verdict(1100, 1, 1100));
        assert!(!verdict(1099, 0, 1100));
        assert!(!verdict(1101, 0, 1100));
    }
}
