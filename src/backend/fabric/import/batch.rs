//! The cutting of a vector's valid pieces into batches, each one post within the provider's
//! limits (local ranges, remote ranges, bytes), and its unit tests.

use crate::reactor::slot::{Batches, Cut, Piece, Span};

/// Groups the valid pieces (entry i is `valid[i]`, `bytes` their sum) into batches: at
/// most `iov_max` local ranges and `rma_max` remote ranges (pieces that follow each other in
/// the segment share one) and `chunk` bytes each. A piece larger than `chunk` is split, an
/// empty one skipped; otherwise the pieces go out as they are, in the list they came in.
pub(super) fn batch(
    valid: Vec<Piece>,
    bytes: usize,
    iov_max: usize,
    rma_max: usize,
    chunk: usize,
) -> Batches {
    let cut = Cutter::new(iov_max, rma_max, chunk);
    // When a batch of `iov_max` pieces can never pass `rma_max` remote ranges, and the whole
    // vector fits one chunk, the rules cut after every `iov_max` pieces: no need to look at
    // each (the look was 900 of a 16-entry getv's instructions, callgrind; a test holds both
    // ways to the same batches), nor to list where the batches end.
    if cut.rma_max >= cut.iov_max && bytes <= cut.chunk && valid.iter().all(|p| p.len > 0) {
        return Batches {
            pieces: valid,
            cut: Cut::Every(cut.iov_max),
            bytes,
        };
    }
    cut_each(cut, valid, bytes)
}

/// [`batch`], piece by piece.
fn cut_each(mut cut: Cutter, valid: Vec<Piece>, bytes: usize) -> Batches {
    if valid.iter().all(|p| p.len > 0 && p.len <= cut.chunk) {
        cut.spans.reserve(valid.len().div_ceil(cut.iov_max));
        for (j, p) in valid.iter().enumerate() {
            cut.push(p, j, j);
        }
        return cut.finish(valid, bytes);
    }
    let mut pieces: Vec<Piece> = Vec::with_capacity(valid.len());
    for (entry, p) in valid.iter().enumerate() {
        let mut done = 0;
        while done < p.len {
            let len = (p.len - done).min(cut.chunk);
            let q = Piece {
                ptr: p.ptr.wrapping_add(done),
                len,
                desc: p.desc,
                offset: p.offset + done as u64,
            };
            cut.push(&q, pieces.len(), entry);
            pieces.push(q);
            done += len;
        }
    }
    cut.finish(pieces, bytes)
}

/// Cuts pieces into batches as they come, in order (see [`batch`]): a batch ends where
/// the next piece would take it past `iov_max` local ranges, `rma_max` remote ranges or
/// `chunk` bytes.
struct Cutter {
    iov_max: usize,
    rma_max: usize,
    chunk: usize,
    spans: Vec<Span>,
    /// The batch being filled: its first piece and that piece's entry, its remote ranges
    /// and bytes.
    start: usize,
    start_entry: usize,
    rma: usize,
    bytes: usize,
    /// Where the last piece ends in the segment.
    end: u64,
}

impl Cutter {
    fn new(iov_max: usize, rma_max: usize, chunk: usize) -> Cutter {
        Cutter {
            iov_max: iov_max.max(1),
            rma_max: rma_max.max(1),
            chunk: chunk.max(1),
            spans: Vec::new(),
            start: 0,
            start_entry: 0,
            rma: 0,
            bytes: 0,
            end: 0,
        }
    }

    /// Piece `j` (of at most `chunk` bytes, none empty), of vector entry `entry`.
    #[inline(always)]
    fn push(&mut self, p: &Piece, j: usize, entry: usize) {
        let touches = j > self.start && self.end == p.offset;
        let fits = j - self.start < self.iov_max
            && self.rma + usize::from(!touches) <= self.rma_max
            && self.bytes.saturating_add(p.len) <= self.chunk;
        if j > self.start && !fits {
            self.spans.push(Span {
                end: j,
                first_entry: self.start_entry,
            });
            (self.start, self.rma, self.bytes) = (j, 0, 0);
        }
        if j == self.start {
            self.start_entry = entry;
        }
        if j == self.start || !touches {
            self.rma += 1;
        }
        self.bytes += p.len;
        self.end = p.offset + p.len as u64;
    }

    /// The batches of `pieces`, every one of them pushed; `bytes` is their sum.
    fn finish(mut self, pieces: Vec<Piece>, bytes: usize) -> Batches {
        if self.start < pieces.len() {
            self.spans.push(Span {
                end: pieces.len(),
                first_entry: self.start_entry,
            });
        }
        Batches {
            pieces,
            cut: Cut::Spans(self.spans),
            bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(offset: u64, len: usize) -> Piece {
        Piece {
            ptr: std::ptr::null_mut(),
            len,
            desc: std::ptr::null_mut(),
            offset,
        }
    }

    /// `batch` over `valid`, checking the bytes it was told come back whole.
    fn batched(valid: Vec<Piece>, iov_max: usize, rma_max: usize, chunk: usize) -> Batches {
        let bytes = valid.iter().map(|p| p.len).sum();
        let b = batch(valid, bytes, iov_max, rma_max, chunk);
        assert_eq!(b.pieces.iter().map(|p| p.len).sum::<usize>(), bytes);
        assert_eq!(b.bytes, bytes);
        b
    }

    fn lens(b: &Batches) -> Vec<Vec<usize>> {
        (0..b.len())
            .map(|i| b.batch(i).iter().map(|p| p.len).collect())
            .collect()
    }

    fn firsts(b: &Batches) -> Vec<usize> {
        (0..b.len()).map(|i| b.first_entry(i)).collect()
    }

    #[test]
    fn batches_respect_iov_and_rma_limits() {
        let valid: Vec<_> = (0..16).map(|i| piece(i as u64 * 100, 10)).collect();
        let b = batched(valid.clone(), 4, 4, usize::MAX);
        assert_eq!(b.len(), 4);
        assert!((0..4).all(|i| b.batch(i).len() == 4));
        assert_eq!(firsts(&b), [0, 4, 8, 12]);
        assert_eq!(b.batch(1)[0].offset, 400);
        assert!(b.batch(4).is_empty(), "no batch past the end");
        // One remote range per post (shm's fast path): a batch per entry unless they touch.
        let b = batched(valid, 4, 1, usize::MAX);
        assert_eq!(b.len(), 16);
        assert_eq!(firsts(&b), (0..16).collect::<Vec<_>>());
        let touching: Vec<_> = (0..16).map(|i| piece(i as u64 * 10, 10)).collect();
        let b = batched(touching, 4, 1, usize::MAX);
        assert_eq!(b.len(), 4, "contiguous remote ranges merge into one");
        assert_eq!(firsts(&b), [0, 4, 8, 12]);
    }

    #[test]
    fn remote_ranges_count_only_where_pieces_do_not_touch() {
        // 0..10 and 10..20 touch (one range), 50..60 does not: 2 ranges fit rma_max 2, the
        // next non-touching piece starts a new batch.
        let valid = vec![piece(0, 10), piece(10, 10), piece(50, 10), piece(100, 10)];
        let b = batched(valid, 16, 2, usize::MAX);
        assert_eq!(lens(&b), vec![vec![10, 10, 10], vec![10]]);
        assert_eq!(firsts(&b), [0, 3]);
    }

    #[test]
    fn long_pieces_split_at_the_chunk() {
        let valid = vec![piece(0, 25), piece(1000, 5)];
        let b = batched(valid, 4, 4, 10);
        assert_eq!(lens(&b), vec![vec![10], vec![10], vec![5, 5]]);
        assert_eq!(firsts(&b), [0, 0, 0]);
        assert_eq!(b.batch(1)[0].offset, 10);
    }

    #[test]
    fn empty_pieces_are_skipped_and_entries_keep_their_numbers() {
        let valid = vec![piece(0, 0), piece(100, 10), piece(200, 0), piece(300, 10)];
        let b = batched(valid, 1, 1, usize::MAX);
        assert_eq!(lens(&b), vec![vec![10], vec![10]]);
        assert_eq!(firsts(&b), [1, 3]);
    }

    #[test]
    fn cutting_every_iov_max_pieces_agrees_with_looking_at_each() {
        // A small deterministic generator (xorshift): many vectors, touching or not, within
        // the short way's conditions; both ways must cut the same batches.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut short_way = 0;
        for _ in 0..2_000 {
            let n = 1 + next(16) as usize;
            let mut at = 0u64;
            let valid: Vec<_> = (0..n)
                .map(|_| {
                    let len = 1 + next(100) as usize;
                    at += next(2) * next(50);
                    let p = piece(at, len);
                    at += len as u64;
                    p
                })
                .collect();
            let bytes: usize = valid.iter().map(|p| p.len).sum();
            let iov_max = 1 + next(16) as usize;
            let rma_max = 1 + next(16) as usize;
            let chunk = bytes + next(3) as usize * 50;
            let fast = batch(valid.clone(), bytes, iov_max, rma_max, chunk);
            let each = cut_each(Cutter::new(iov_max, rma_max, chunk), valid, bytes);
            assert_eq!(
                lens(&fast),
                lens(&each),
                "{n} pieces, {iov_max} {rma_max} {chunk}"
            );
            assert_eq!(firsts(&fast), firsts(&each));
            if rma_max >= iov_max {
                assert_eq!(
                    fast.cut,
                    Cut::Every(iov_max),
                    "nothing listed the short way"
                );
                short_way += 1;
            }
        }
        assert!(short_way > 500, "the short way ran {short_way} times");
    }

    #[test]
    fn bytes_per_batch_stay_within_the_chunk() {
        let valid: Vec<_> = (0..6).map(|i| piece(i as u64 * 4, 4)).collect();
        let b = batched(valid, 16, 16, 10);
        assert_eq!(lens(&b), vec![vec![4, 4], vec![4, 4], vec![4, 4]]);
        assert_eq!(firsts(&b), [0, 2, 4]);
    }
}
