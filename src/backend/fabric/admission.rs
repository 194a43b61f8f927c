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
/// and again while some are unclaimed and young.
fn watch_listener(watch: &ListenWatch, endpoint: &Weak<Endpoint>, listen: SocketAddr) {
    let mut first_seen = HashMap::new();
    let mut next_look: Option<Instant> = None;
    loop {
        let timeout = next_look.map(|t| t.saturating_duration_since(Instant::now()));
        if watch.wait(timeout) == Watched::Stop {
            return;
        }
        let now = Instant::now();
        match next_look {
            Some(t) if t > now => continue,
            // An arrival: its socket is the provider's by the next look.
            None if timeout.is_none() => {
                next_look = Some(now + LOOK_EVERY);
                continue;
            }
            _ => {}
        }
        let Some(ep) = endpoint.upgrade() else {
            return;
        };
        next_look = look(&ep, listen, &mut first_seen, now).map(|d| now + d.max(LOOK_EVERY));
    }
}

/// Hangs up the connections no admitted request claimed for [`UNCLAIMED_FOR`] since this
/// thread first saw them; returns when to look again (`None`: no unclaimed one is left).
fn look(
    ep: &Endpoint,
    listen: SocketAddr,
    first_seen: &mut HashMap<SocketAddr, Instant>,
    now: Instant,
) -> Option<Duration> {
    let claimed: HashSet<SocketAddr> = ep
        .accepted_peers()
        .iter()
        .filter_map(|a| sockaddr_of(a))
        .collect();
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
    // no new arrival would wake this thread for them.
    if next.is_none() && backlog_at(listen) {
        next = Some(LOOK_EVERY);
    }
    if hung > 0 {
        tracing::debug!(
            hung,
            "connections that made no admitted request within {UNCLAIMED_FOR:?} hung up"
        );
    }
    next
}
