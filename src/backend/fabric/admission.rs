//! Who may connect to a controller's connected endpoint (tcp, `FI_EP_MSG`): a connection
//! request must carry a ticket this node issued over its side channel (to an importer with
//! its grant, to an exporter with the connect request), else it is rejected at once; and a
//! connection that never makes a request, which the provider would keep as long as the peer
//! likes, is hung up once it stayed unclaimed for [`UNCLAIMED_FOR`] (DESIGN.md §8, "Owners
//! and limits").

use crate::fabric::{Endpoint, connected::Admitted};
use crate::sys::sockets::{ListenWatch, Watched, accepted_on, backlog_at, hang_up, sockaddr_of};
use crate::{Error, Result};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The bytes of a ticket: random, so that only the peer it was sent to can present it.
const TICKET_LEN: usize = 16;
/// How long a connection may stay without a request this node admitted: as long as a
/// side-channel handshake may take.
pub(crate) const UNCLAIMED_FOR: Duration = Duration::from_secs(5);
/// The shortest time between two looks at the accepted sockets (one look reads every
/// descriptor of the process: a flood of connections must not make one per arrival).
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// The longest a silent connection goes unseen when no arrival woke this thread: under load,
/// the listener's arrival wake-ups were seen to go missing for whole tests (cause not found),
/// so a look at each of these wall-clock instants, when idle nodes wake anyway, bounds it.
const SWEEP_EVERY: Duration = Duration::from_secs(20);

/// A ticket for one peer's connections to `endpoint`, admitted until it drops; `None`
/// where peers do not connect (RDM endpoints).
pub(crate) fn issue(endpoint: &Endpoint) -> Result<Option<Admitted>> {
    if !endpoint.accepts_connections() {
        return Ok(None);
    }
    let ticket: [u8; TICKET_LEN] = rand::random();
    Ok(endpoint.admit(ticket.to_vec())?)
}

/// The admission of a connected endpoint: tickets required from now on, and a thread that
/// hangs up what no admitted request claimed. Stops when dropped.
pub(crate) struct Gate {
    watch: Arc<ListenWatch>,
    thread: Option<JoinHandle<()>>,
}

impl Gate {
    /// Starts admitting by ticket on `endpoint`, if peers connect to it; `None` otherwise.
    pub(crate) fn start(endpoint: &Arc<Endpoint>, controller: &str) -> Result<Option<Gate>> {
        if !endpoint.accepts_connections() {
            return Ok(None);
        }
        endpoint.admit_only_ticketed();
        let Some(listen) = sockaddr_of(endpoint.name()) else {
            return Ok(None);
        };
        let watch = match ListenWatch::new(listen) {
            Ok(Some(w)) => Arc::new(w),
            Ok(None) => {
                tracing::warn!(
                    controller,
                    %listen,
                    "the provider's listening socket was not found: connections that make \
                     no request stay until their peer closes them"
                );
                return Ok(None);
            }
            Err(e) => {
                return Err(Error::insufficient_resources()
                    .controller(controller)
                    .detail(format!("cannot watch the fabric listener: {e}")));
            }
        };
        tracing::debug!(controller, %listen, "admission gate watches the fabric listener");
        let run = (Arc::clone(&watch), Arc::downgrade(endpoint));
        let span = tracing::debug_span!("admission", controller, %listen);
        let thread = std::thread::Builder::new()
            .name("rsm-admit".into())
            .spawn(move || span.in_scope(|| watch_listener(&run.0, &run.1, listen)))
            .map_err(|e| Error::insufficient_resources().detail(format!("thread: {e}")))?;
        Ok(Some(Gate {
            watch,
            thread: Some(thread),
        }))
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.watch.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Looks at the endpoint's connections after each arrival (at most every [`LOOK_EVERY`])
/// and again while some are unclaimed and young, or wait in the accept queue; and, whatever
/// arrived, at every [`SWEEP_EVERY`] of the wall clock.
fn watch_listener(watch: &ListenWatch, endpoint: &Weak<Endpoint>, listen: SocketAddr) {
    let mut first_seen = HashMap::new();
    let mut next_look: Option<Instant> = None;
    let mut queued = false;
    let mut sweep_at = Instant::now() + crate::sys::clock::until_wall_multiple(SWEEP_EVERY);
    loop {
        let timeout = next_look
            .unwrap_or(sweep_at)
            .min(sweep_at)
            .saturating_duration_since(Instant::now());
        if watch.wait(Some(timeout)) == Watched::Stop {
            return;
        }
        let now = Instant::now();
        tracing::trace!(?timeout, ?next_look, "woken");
        let sweep = now >= sweep_at;
        if sweep {
            sweep_at = now + crate::sys::clock::until_wall_multiple(SWEEP_EVERY);
        }
        match next_look {
            Some(t) if t > now && !sweep => continue,
            // An arrival: its socket is the provider's by the next look.
            None if !sweep => {
                next_look = Some(now + LOOK_EVERY);
                continue;
            }
            _ => {}
        }
        let Some(ep) = endpoint.upgrade() else {
            return;
        };
        let claimed = || {
            ep.accepted_peers()
                .iter()
                .filter_map(|a| sockaddr_of(a))
                .collect()
        };
        let (next, queued_now) = look(claimed, listen, &mut first_seen, queued, now);
        queued = queued_now;
        next_look = next.map(|d| now + d.max(LOOK_EVERY));
    }
}

/// Hangs up the connections no admitted request claimed for [`UNCLAIMED_FOR`] since this
/// thread first saw them; returns when to look again (`None`: no unclaimed one is left and
/// none waits to be accepted, now or at the last look, `queued_before`) and whether
/// connections wait in the accept queue.
fn look(
    claimed: impl FnOnce() -> HashSet<SocketAddr>,
    listen: SocketAddr,
    first_seen: &mut HashMap<SocketAddr, Instant>,
    queued_before: bool,
    now: Instant,
) -> (Option<Duration>, bool) {
    // Before the scan: a connection the provider accepts during the scan was queued here,
    // and one that arrives after this is an arrival that wakes the thread again.
    let queued = backlog_at(listen);
    let claimed = claimed();
    let mut present = HashSet::new();
    let (mut hung, mut next) = (0usize, None::<Duration>);
    for (peer, fd) in accepted_on(listen) {
        if claimed.contains(&peer) {
            continue;
        }
        present.insert(peer);
        let age = now.saturating_duration_since(*first_seen.entry(peer).or_insert(now));
        if age >= UNCLAIMED_FOR {
            hang_up(&fd);
            hung += 1;
        } else {
            let left = UNCLAIMED_FOR - age;
            next = Some(next.map_or(left, |n| n.min(left)));
        }
    }
    first_seen.retain(|p, _| present.contains(p));
    // Arrivals the provider has not accepted yet (a busy host) are looked at once it has:
    // no new arrival would wake this thread for them. Once more after the queue drained:
    // the last one taken from it may not have been the provider's descriptor yet.
    if next.is_none() && (queued || queued_before) {
        next = Some(LOOK_EVERY);
    }
    tracing::trace!(
        queued,
        unclaimed = present.len(),
        claimed = claimed.len(),
        hung,
        ?next,
        "looked"
    );
    if hung > 0 {
        tracing::debug!(
            hung,
            "connections that made no admitted request within {UNCLAIMED_FOR:?} hung up"
        );
    }
    (next, queued)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};

    /// The provider's part played by a listener of this process, accepting by hand.
    #[test]
    fn a_connection_accepted_after_a_look_began_is_looked_at_again_and_hung_up() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let listen = listener.local_addr().unwrap();
        let mut seen = HashMap::new();
        let t0 = Instant::now();
        let mut client = TcpStream::connect(listen).unwrap();
        // Queued when the look began: looked at again, whatever the scan found.
        let (next, queued) = look(HashSet::new, listen, &mut seen, false, t0);
        assert!(queued);
        assert_eq!(next, Some(LOOK_EVERY));
        let (_accepted, _) = listener.accept().unwrap();
        // Accepted since: the next look sees it, young, and comes back for it.
        let (next, queued) = look(HashSet::new, listen, &mut seen, queued, t0);
        assert!(!queued);
        assert_eq!(next, Some(UNCLAIMED_FOR));
        let (next, _) = look(HashSet::new, listen, &mut seen, false, t0 + UNCLAIMED_FOR);
        assert_eq!(next, None, "hung up: nothing left to look at");
        let mut buf = [0u8; 1];
        assert_eq!(client.read(&mut buf).unwrap(), 0, "the peer read the end");
    }

    #[test]
    fn a_connection_the_provider_accepts_while_a_look_runs_is_not_missed() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let listen = listener.local_addr().unwrap();
        let mut client = TcpStream::connect(listen).unwrap();
        let mut seen = HashMap::new();
        let t0 = Instant::now();
        let taken = std::cell::RefCell::new(None);
        // The provider accepts it during the look, while the claims are read.
        let accept_now = || {
            *taken.borrow_mut() = Some(listener.accept().unwrap());
            HashSet::new()
        };
        let (next, _) = look(accept_now, listen, &mut seen, false, t0);
        assert!(taken.borrow().is_some());
        assert!(next.is_some(), "looked at again");
        look(HashSet::new, listen, &mut seen, true, t0 + UNCLAIMED_FOR);
        let mut buf = [0u8; 1];
        assert_eq!(
            client.read(&mut buf).unwrap(),
            0,
            "hung up within the bound"
        );
    }

    #[test]
    fn a_claimed_connection_stays_and_one_more_look_follows_a_drained_queue() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let listen = listener.local_addr().unwrap();
        let client = TcpStream::connect(listen).unwrap();
        let (_accepted, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let mut seen = HashMap::new();
        let t0 = Instant::now();
        let claimed = || HashSet::from([peer]);
        // Nothing unclaimed, nothing queued: but the last look saw a queue, so once more.
        assert_eq!(
            look(claimed, listen, &mut seen, true, t0).0,
            Some(LOOK_EVERY)
        );
        let later = t0 + 2 * UNCLAIMED_FOR;
        assert_eq!(
            look(claimed, listen, &mut seen, false, later),
            (None, false)
        );
        client.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 1];
        assert!(
            (&client).read(&mut buf).is_err(),
            "a claimed connection stays up"
        );
    }
}
