//! The posts one benchmarked operation is made of, as rsm makes them, so that the baseline
//! posts the same: a put or get is one range in chunks of at most the provider's largest
//! message; a putv or getv of [`VECTOR_ENTRIES`] pieces of `size / 16` bytes (contiguous in
//! the local buffer and in the segment, as `rsm_side` builds them) goes out in batches of at
//! most `iov_max` local ranges and `rma_max` remote ranges, pieces that follow each other in
//! the segment sharing one remote range (`src/import/sg/batch.rs` and `Slot::part_ranges`).

use super::cli::Op;
use super::rsm_run::VECTOR_ENTRIES;

/// One post: local ranges (offsets into the slot) and remote ranges (offsets into the
/// peer's buffer), each `(offset, len)`; both lists carry the same bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) local: Vec<(usize, usize)>,
    pub(crate) remote: Vec<(u64, usize)>,
}

/// The provider's limits a plan respects.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Local ranges per post.
    pub(crate) iov_max: usize,
    /// Remote ranges per post.
    pub(crate) rma_max: usize,
    /// Bytes per post (the provider's largest message).
    pub(crate) chunk: usize,
}

/// The data posts of `op` over `size` bytes at offset 0 of the slot and of the peer's buffer.
pub(crate) fn plan(op: Op, size: usize, limits: Limits) -> Vec<Shape> {
    let Limits {
        iov_max,
        rma_max,
        chunk,
    } = limits;
    let (iov_max, rma_max, chunk) = (iov_max.max(1), rma_max.max(1), chunk.max(1));
    if !op.is_vector() {
        return (0..size.div_ceil(chunk).max(1))
            .map(|i| {
                let start = i * chunk;
                let len = chunk.min(size - start);
                Shape {
                    local: vec![(start, len)],
                    remote: vec![(start as u64, len)],
                }
            })
            .collect();
    }
    let mut out = Vec::new();
    let mut cur: Option<(Shape, usize)> = None; // the post, its bytes
    for (start, len) in vector_pieces(size, VECTOR_ENTRIES) {
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk);
            let at = start + done;
            done += n;
            let fits = cur.as_ref().map(|(s, bytes)| {
                let extra = usize::from(!touches(s, at as u64));
                s.local.len() < iov_max
                    && s.remote.len() + extra <= rma_max
                    && bytes.saturating_add(n) <= chunk
            });
            if fits != Some(true) {
                out.extend(cur.take().map(|(s, _)| s));
                cur = Some((
                    Shape {
                        local: Vec::new(),
                        remote: Vec::new(),
                    },
                    0,
                ));
            }
            if let Some((s, bytes)) = cur.as_mut() {
                if touches(s, at as u64) {
                    if let Some(last) = s.remote.last_mut() {
                        last.1 += n;
                    }
                } else {
                    s.remote.push((at as u64, n));
                }
                s.local.push((at, n));
                *bytes += n;
            }
        }
    }
    out.extend(cur.map(|(s, _)| s));
    out
}

/// Whether a range at `at` continues the post's last remote range.
fn touches(s: &Shape, at: u64) -> bool {
    s.remote.last().is_some_and(|&(o, l)| o + l as u64 == at)
}

/// The pieces of a vector row: `n` of `size / n` bytes, the last taking the remainder
/// (as `rsm_side::Shared::split`), empty ones left out (rsm posts nothing for them).
fn vector_pieces(size: usize, n: usize) -> impl Iterator<Item = (usize, usize)> {
    let n = n.max(1);
    let piece = size / n;
    (0..n)
        .map(move |i| {
            let start = i * piece;
            let len = if i + 1 == n { size - start } else { piece };
            (start, len)
        })
        .filter(|&(_, len)| len > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIG: usize = usize::MAX;

    #[test]
    fn single_operations_are_one_range_per_chunk() {
        let lim = Limits {
            iov_max: 4,
            rma_max: 4,
            chunk: BIG,
        };
        assert_eq!(plan(Op::Put, 8, lim).len(), 1);
        let lim = Limits { chunk: 10, ..lim };
        let p = plan(Op::Get, 25, lim);
        assert_eq!(
            p.iter().map(|s| s.local.clone()).collect::<Vec<_>>(),
            vec![vec![(0, 10)], vec![(10, 10)], vec![(20, 5)]]
        );
    }

    #[test]
    fn vectors_batch_like_rsm() {
        // shm and tcp;ofi_rxm: 4 local ranges per post, the contiguous remote ones merged.
        let lim = Limits {
            iov_max: 4,
            rma_max: 4,
            chunk: BIG,
        };
        let p = plan(Op::Putv, 4096, lim);
        assert_eq!(p.len(), 4);
        for (i, s) in p.iter().enumerate() {
            assert_eq!(s.local.len(), 4);
            assert_eq!(s.remote, vec![(i as u64 * 1024, 1024)]);
        }
        // sockets: 8 per post.
        let lim = Limits {
            iov_max: 8,
            rma_max: 8,
            chunk: BIG,
        };
        assert_eq!(plan(Op::Getv, 1 << 20, lim).len(), 2);
        // Every byte once, in order.
        let p = plan(Op::Putv, 1000, lim);
        let local: Vec<_> = p.iter().flat_map(|s| s.local.clone()).collect();
        assert_eq!(local.len(), 16);
        assert_eq!(local.last(), Some(&(15 * 62, 1000 - 15 * 62)));
        let bytes: usize = p.iter().flat_map(|s| &s.remote).map(|r| r.1).sum();
        assert_eq!(bytes, 1000);
    }

    #[test]
    fn long_pieces_split_at_the_chunk() {
        let lim = Limits {
            iov_max: 4,
            rma_max: 4,
            chunk: 100,
        };
        let p = plan(Op::Putv, 16 * 150, lim);
        assert!(
            p.iter()
                .all(|s| s.local.iter().map(|l| l.1).sum::<usize>() <= 100)
        );
        let bytes: usize = p.iter().flat_map(|s| &s.local).map(|l| l.1).sum();
        assert_eq!(bytes, 16 * 150);
    }
}
