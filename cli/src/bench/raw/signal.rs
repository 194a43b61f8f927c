//! The signal baseline: a plain `fi_inject_writedata` to the peer's buffer, answered by the
//! peer with one to this side's doorbell, both sides busy-polling their queues.

use super::{Baseline, RawRegion, RawTarget, STALL, wait_readable};
use rsm::{Error, Result};
use rsm_fabric::WaitKind;
use rsm_fabric::endpoint::PostError;
use rsm_fabric::{CqReadError, MrAccess};
use std::time::Duration;
use std::time::Instant;

/// The key of the initiator's doorbell registration.
const BELL_KEY: u64 = 0xB2;

fn failed(what: &'static str, f: rsm::error::FabricFailure) -> Error {
    Error::conn_aborted().op(what).fabric(f)
}

impl Baseline {
    /// Registers this side's doorbell (remote write only) and returns its key and address
    /// for the peer.
    pub(crate) fn open_doorbell(&mut self) -> Result<(u64, u64)> {
        if self.bell.is_none() {
            let r = RawRegion::new(&self.raw.domain, 8, MrAccess::REMOTE_WRITE, BELL_KEY)?;
            self.bell = Some(r);
        }
        let bell = self
            .bell
            .as_ref()
            .ok_or_else(Error::insufficient_resources)?;
        let base = if self.raw.virt_addr() {
            bell.addr() as u64
        } else {
            0
        };
        Ok((bell.key(), base))
    }

    /// `warmup` untimed then `samples` timed round trips: ring the peer, spin until its
    /// answer arrives. Returns the times in ns.
    pub(crate) fn signal_latency(
        &mut self,
        warmup: usize,
        samples: usize,
        tick: &mut dyn FnMut(usize),
    ) -> Result<Vec<u64>> {
        let mut out = Vec::with_capacity(samples);
        let r = self.remote;
        for i in 0..warmup + samples {
            let t0 = Instant::now();
            loop {
                match self
                    .raw
                    .ep
                    .inject_writedata(&[0u8; 8], 1, r.addr, r.base, r.key)
                {
                    Ok(()) => break,
                    Err(PostError::Again | PostError::Connecting { .. }) => {
                        self.comps.clear();
                        let _ = self.raw.cq.read(&mut self.comps);
                    }
                    Err(PostError::Failed(f)) => return Err(failed("signal", f)),
                }
            }
            let mut spins = 0u32;
            'answer: loop {
                self.comps.clear();
                match self.raw.cq.read(&mut self.comps) {
                    Ok(_) => {}
                    Err(CqReadError::Entry(e)) => return Err(failed("signal", e.failure)),
                    Err(CqReadError::Failed(f)) => return Err(failed("signal", f)),
                }
                if self.comps.iter().any(|e| e.has_remote_data()) {
                    break 'answer;
                }
                spins = spins.wrapping_add(1);
                if spins % super::YIELD_EVERY == 0 {
                    std::thread::yield_now();
                }
                // Auto-progress providers (sockets): spinning would starve their threads.
                if let Some(fd) = self.idle_fd {
                    if self.raw.cq.trywait() {
                        wait_readable(fd, Duration::from_millis(10));
                    }
                }
                if spins % 4096 == 0 && t0.elapsed() > STALL {
                    return Err(Error::timeout()
                        .op("signal")
                        .detail("the peer never answered"));
                }
            }
            let dt = t0.elapsed();
            if i >= warmup {
                out.push(u64::try_from(dt.as_nanos()).unwrap_or(u64::MAX));
                if out.len() % 64 == 0 || out.len() == samples {
                    tick(out.len());
                }
            }
        }
        Ok(out)
    }
}

impl RawTarget {
    /// On an auto-progress provider (sockets), sleeps on the queue's wait fd for at most a
    /// millisecond instead of spinning: its own threads need the CPU. Elsewhere returns at
    /// once.
    pub(crate) fn rest(&self) {
        if let WaitKind::Fd(fd) = self.raw.cq.wait() {
            if self.raw.auto_progress() && self.raw.cq.trywait() {
                wait_readable(fd, Duration::from_millis(1));
            }
        }
    }
}
