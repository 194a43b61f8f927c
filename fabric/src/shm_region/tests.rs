use super::*;

/// A region as libfabric 1.17 lays it out: header, a command queue of `q` entries, an answer
/// queue of `q` entries, the peers' entries, the name.
struct Fake {
    words: Vec<u64>,
    cmds: usize,
    answers: usize,
}

const Q: usize = 8;

impl Fake {
    fn new(pid: i32, name: &str) -> Fake {
        let cmds = 128;
        let answers = cmds + CIRQUE_HEADER + Q * CMD_SIZE;
        let peer_data = answers + CIRQUE_HEADER + Q * RESP_SIZE;
        let name_at = peer_data + MAX_PEERS * PEER_DATA_SIZE;
        let len = name_at + NAME_MAX;
        let mut f = Fake {
            words: vec![0u64; len / 8],
            cmds,
            answers,
        };
        f.bytes()[AT_VERSION] = REGION_VERSION;
        f.bytes()[AT_LOCK..AT_LOCK + 4].copy_from_slice(&LOCK_FREE.to_ne_bytes());
        f.bytes()[AT_PID..AT_PID + 4].copy_from_slice(&pid.to_ne_bytes());
        f.put(AT_TOTAL_SIZE, len as u64);
        f.put(AT_CMD_QUEUE_OFFSET, cmds as u64);
        f.put(AT_RESP_QUEUE_OFFSET, answers as u64);
        f.put(AT_PEER_DATA_OFFSET, peer_data as u64);
        f.put(AT_NAME_OFFSET, name_at as u64);
        f.bytes()[name_at..name_at + name.len()].copy_from_slice(name.as_bytes());
        for q in [cmds, answers] {
            f.put(q, Q as u64);
            f.put(q + 8, Q as u64 - 1);
        }
        f
    }

    fn bytes(&mut self) -> &mut [u8] {
        let len = self.words.len() * 8;
        // SAFETY: the vector's u64s viewed as bytes, all initialised.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), len) }
    }

    fn put(&mut self, at: usize, v: u64) {
        self.words[at / 8] = v;
    }

    fn get(&self, at: usize) -> u64 {
        self.words[at / 8]
    }

    /// Appends a command from slot `id`.
    fn command_from(&mut self, id: i64) {
        let w = self.get(self.cmds + 24);
        let e = self.cmds + CIRQUE_HEADER + (w as usize % Q) * CMD_SIZE;
        self.put(e + CMD_AT_ID, id as u64);
        self.put(self.cmds + 24, w + 1);
    }

    /// Appends an answer awaited for `pending` with `status`; returns its offset.
    fn answer(&mut self, pending: &Tx, status: u64) -> usize {
        let w = self.get(self.answers + 24);
        let e = self.answers + CIRQUE_HEADER + (w as usize % Q) * RESP_SIZE;
        self.put(e, pending.address() as u64);
        self.put(e + 8, status);
        self.put(self.answers + 24, w + 1);
        e
    }

    fn region(&mut self) -> Region {
        let len = self.words.len() * 8;
        // SAFETY: the vector outlives the value in each test.
        unsafe { Region::new(self.words.as_mut_ptr().cast(), len) }.expect("a 1.17 region")
    }
}

/// A pending entry of the provider's: the command sent, then the peer's slot.
struct Tx(Vec<u64>);

impl Tx {
    fn new(slot: i64, op_src: u16) -> Tx {
        let mut w = vec![0u64; 40];
        w[TX_AT_PEER_ID / 8] = slot as u64;
        w[TX_AT_OP_SRC / 8] = u64::from(op_src) << ((TX_AT_OP_SRC % 8) * 8);
        Tx(w)
    }

    fn address(&self) -> usize {
        self.0.as_ptr() as usize
    }

    fn op_src(&self) -> u16 {
        (self.0[TX_AT_OP_SRC / 8] >> ((TX_AT_OP_SRC % 8) * 8)) as u16
    }
}

#[test]
fn the_header_and_the_name_are_read() {
    let mut f = Fake::new(4242, "4242:0:0");
    let r = f.region();
    assert_eq!(r.pid(), 4242);
    assert!(r.is_named(b"4242:0:0"));
    assert!(!r.is_named(b"4242:0:"));
    assert!(!r.is_named(b"4242:0:00"));
    assert!(!r.cma());
}

#[test]
fn another_layout_is_refused() {
    let mut f = Fake::new(1, "1:0:0");
    f.bytes()[AT_VERSION] = 5;
    let len = f.words.len() * 8;
    // SAFETY: the vector outlives the call.
    assert!(unsafe { Region::new(f.words.as_mut_ptr().cast(), len) }.is_none());
    let mut f = Fake::new(1, "1:0:0");
    f.put(AT_TOTAL_SIZE, len as u64 + 8);
    // SAFETY: as above.
    assert!(unsafe { Region::new(f.words.as_mut_ptr().cast(), len) }.is_none());
    // SAFETY: as above, a length below the header's.
    assert!(unsafe { Region::new(f.words.as_mut_ptr().cast(), HEADER - 1) }.is_none());
}

#[test]
fn queues_of_another_shape_are_not_read() {
    let mut f = Fake::new(1, "1:0:0");
    f.command_from(3);
    let (c, a) = (f.cmds, f.answers);
    f.put(c, 6); // not a power of two
    f.put(a, 1 << 40); // beyond the region
    let tx = Tx::new(3, 0);
    f.answer(&tx, BUSY);
    let r = f.region();
    let g = r.lock();
    assert_eq!(g.commands_from(3), 0);
    assert_eq!(g.answers_from(3), 0);
}

/// glibc's own spinlock on the word: what the provider's processes call.
fn glibc_lock(word: *mut i32) {
    // SAFETY: an initialised spinlock word of the test's region, alive for the call.
    assert_eq!(unsafe { libc::pthread_spin_lock(word) }, 0);
}

fn glibc_unlock(word: *mut i32) {
    // SAFETY: as above, held.
    assert_eq!(unsafe { libc::pthread_spin_unlock(word) }, 0);
}

#[test]
fn the_lock_is_glibcs_spinlock() {
    let mut f = Fake::new(1, "1:0:0");
    let word = f
        .words
        .as_mut_ptr()
        .cast::<u8>()
        .wrapping_add(AT_LOCK)
        .cast::<i32>();
    // SAFETY: as above.
    let init = unsafe { libc::pthread_spin_init(word, libc::PTHREAD_PROCESS_SHARED) };
    assert_eq!(init, 0);
    let r = f.region();
    assert!(!r.is_locked(), "pthread_spin_init's value is free");
    glibc_lock(word);
    assert!(
        r.is_locked() && r.try_lock().is_none(),
        "glibc's hold is seen"
    );
    glibc_unlock(word);
    {
        let _g = r.try_lock().expect("free after glibc's unlock");
        // SAFETY: as above.
        let taken = unsafe { libc::pthread_spin_trylock(word) };
        assert_ne!(taken, 0, "glibc sees ours");
    }
    glibc_lock(word);
    glibc_unlock(word);
    let g = r.try_lock().expect("free");
    assert!(r.is_locked());
    assert!(r.try_lock().is_none());
    drop(g);
    assert!(!r.is_locked());
    let _held_by_the_dead = std::mem::ManuallyDrop::new(r.lock());
    assert!(r.is_locked());
    r.force_unlock();
    assert!(r.try_lock().is_some());
}

#[test]
fn commands_are_counted_per_sender() {
    let mut f = Fake::new(1, "1:0:0");
    for id in [3, 5, 3] {
        f.command_from(id);
    }
    let r = f.region();
    let g = r.lock();
    assert_eq!(g.commands_from(3), 2);
    assert_eq!(g.commands_from(5), 1);
    assert_eq!(g.commands_from(7), 0);
}

#[test]
fn only_the_dead_peers_unanswered_operations_fail() {
    let mut f = Fake::new(1, "1:0:0");
    let (dead_busy, dead_done, dead_segmented, live) =
        (Tx::new(3, 2), Tx::new(3, 2), Tx::new(3, 4), Tx::new(5, 2));
    let e1 = f.answer(&dead_busy, BUSY);
    let e2 = f.answer(&dead_done, 0);
    let e3 = f.answer(&dead_segmented, 7);
    let e4 = f.answer(&live, BUSY);
    let r = f.region();
    {
        let g = r.lock();
        assert_eq!(g.answers_from(3), 3);
        assert_eq!(g.answers_from(5), 1);
        // SAFETY: the test's slot 3 stands for a dead peer.
        assert_eq!(unsafe { g.fail_answers_from(3, libc::ECONNABORTED) }, 2);
    }
    let aborted = (-(libc::ECONNABORTED as i64)) as u64;
    assert_eq!(f.get(e1 + 8), aborted);
    assert_eq!(
        f.get(e2 + 8),
        0,
        "an answer written before the death stands"
    );
    assert_eq!(f.get(e3 + 8), aborted);
    assert_eq!(
        dead_segmented.op_src(),
        SRC_IOV,
        "no segmentation buffer is read again"
    );
    assert_eq!(f.get(e4 + 8), BUSY, "a live peer's answer is left to it");
}

#[test]
fn consumed_answers_are_not_seen() {
    let mut f = Fake::new(1, "1:0:0");
    let tx = Tx::new(3, 2);
    for _ in 0..Q + 3 {
        f.answer(&tx, BUSY);
        let r = f.get(f.answers + 16);
        f.put(f.answers + 16, r + 1);
    }
    let e = f.answer(&tx, BUSY);
    let r = f.region();
    let g = r.lock();
    assert_eq!(g.answers_from(3), 1, "the queue wrapped; one entry is live");
    assert!(e > f.answers);
}

#[test]
fn peer_entries_are_found_and_reset() {
    let mut f = Fake::new(1, "1:0:0");
    let pd = f.get(AT_PEER_DATA_OFFSET) as usize;
    let e = pd + 5 * PEER_DATA_SIZE;
    f.bytes()[e..e + 14].copy_from_slice(b"fi_shm://9:0:0");
    f.put(e + NAME_MAX, 3);
    f.put(e + NAME_MAX + 8, u64::from(1u32) | (u64::from(1u32) << 32));
    let r = f.region();
    assert_eq!(r.slot_named(b"fi_shm://9:0:0\0"), Some(5));
    assert_eq!(r.slot_named(b"fi_shm://9:0:"), None);
    assert_eq!(r.peer_index(5), Some(3));
    r.forget_peer(5);
    assert_eq!(r.peer_index(5), Some(-1));
    assert_eq!(f.get(e + NAME_MAX + 8), 0, "sar_status and name_sent reset");
    assert_eq!(r.peer_index(MAX_PEERS), None);
}

#[test]
fn the_providers_map_lists_slots_in_use() {
    let mut map = vec![0u64; (MAP_AT_PEERS + MAX_PEERS * MAP_PEER_SIZE) / 8];
    for slot in 0..MAX_PEERS {
        map[(MAP_AT_PEERS + slot * MAP_PEER_SIZE + MAP_PEER_AT_ID) / 8] = u64::MAX; // -1
    }
    let e = MAP_AT_PEERS + 7 * MAP_PEER_SIZE;
    map[(e + MAP_PEER_AT_ID) / 8] = 7;
    map[(e + MAP_PEER_AT_REGION) / 8] = 0x7000_0000;
    map[e / 8] = u64::from_ne_bytes(*b"fi_shm:/");
    // SAFETY: the vector outlives the map.
    let m = unsafe { PeerMap::new(map.as_ptr() as usize) }.expect("aligned");
    assert_eq!(
        m.peer(7),
        Some(MappedPeer {
            slot: 7,
            name: b"fi_shm:/".to_vec(),
            region: 0x7000_0000
        })
    );
    assert_eq!(m.peer(6), None);
    assert_eq!(m.peer(MAX_PEERS), None);
}
