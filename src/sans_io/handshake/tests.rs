use super::*;
use proptest::collection::vec;
use proptest::prelude::*;

fn cluster(n: u32) -> Vec<Credentials> {
    let keys: Vec<NodeKey> = (0..n).map(|_| NodeKey::generate()).collect();
    let trust: BTreeMap<u32, PublicKey> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (i as u32 + 1, k.public()))
        .collect();
    keys.into_iter()
        .enumerate()
        .map(|(i, key)| Credentials {
            node_id: i as u32 + 1,
            key,
            trust: trust.clone(),
        })
        .collect()
}

/// Runs a whole handshake: `dialler` dials `expect`, `acceptor` answers.
fn run(
    dialler: &Credentials,
    acceptor: &Credentials,
    expect: u32,
) -> Result<(u32, Sealer, Opener, Sealer, Opener), Refused> {
    let (dial, m1) = Initiator::start(dialler, expect)?;
    let (accept, m2) = Responder::accept(acceptor, &m1)?;
    let (m3, d_seal, d_open) = dial.finish(&m2)?;
    let (peer, a_seal, a_open) = accept.finish(&m3)?;
    Ok((peer, d_seal, d_open, a_seal, a_open))
}

#[test]
fn both_ends_prove_their_keys_and_frames_flow_both_ways() {
    let c = cluster(2);
    let (peer, mut d_seal, mut d_open, mut a_seal, mut a_open) = run(&c[0], &c[1], 2).expect("ok");
    assert_eq!(peer, 1);
    for i in 0..3u8 {
        let f = d_seal.seal(&[i; 10]).expect("seal");
        assert_eq!(f.len(), 10 + TAG_LEN);
        assert_eq!(a_open.open(&f).expect("open"), vec![i; 10]);
        let g = a_seal.seal(&[i]).expect("seal");
        assert_eq!(d_open.open(&g).expect("open"), vec![i]);
    }
}

#[test]
fn a_key_that_is_not_the_trusted_one_gets_nothing() {
    let c = cluster(3);
    // Node 3 poses as node 1 with its own key: the acceptor refuses at the third message.
    let mut impostor = c[2].clone();
    impostor.node_id = 1;
    let err = run(&impostor, &c[1], 2).err().expect("refused");
    assert!(err.0.contains("another key"), "{err}");
    // A dialler reaching node 3 where it expected node 2 learns it from the second message.
    let err = run(&c[0], &c[2], 2).err().expect("refused");
    assert!(err.0.contains("different node (3)"), "{err}");
    // An acceptor holding a key of its own that its peers do not trust for its id.
    let mut wrong = c[1].clone();
    wrong.key = NodeKey::generate();
    let err = run(&c[0], &wrong, 2).err().expect("refused");
    assert!(err.0.contains("another key"), "{err}");
}

#[test]
fn unknown_nodes_and_its_own_id_are_refused() {
    let c = cluster(2);
    let mut stranger = c[0].clone();
    stranger.node_id = 9;
    assert!(
        run(&stranger, &c[1], 2)
            .err()
            .expect("refused")
            .0
            .contains("node 9 has no key")
    );
    assert!(
        Initiator::start(&c[0], 7).is_err(),
        "no key for the node dialled"
    );
    let mut twin = c[1].clone();
    twin.node_id = 2;
    twin.trust.insert(2, c[1].key.public());
    let err = run(&twin, &c[1], 2).err().expect("refused");
    assert!(err.0.contains("own id"), "{err}");
}

#[test]
fn altered_replayed_or_reordered_frames_fail() {
    let c = cluster(2);
    let (_, mut seal, _, _, mut open) = run(&c[0], &c[1], 2).expect("ok");
    let a = seal.seal(b"first").expect("seal");
    let b = seal.seal(b"second").expect("seal");
    assert!(open.open(&b).is_err(), "reordered");
    let mut fresh = run(&c[0], &c[1], 2).expect("ok");
    let x = fresh.1.seal(b"x").expect("seal");
    let mut flipped = x.clone();
    flipped[0] ^= 1;
    assert!(fresh.4.open(&flipped).is_err(), "altered");
    assert_eq!(fresh.4.open(&x).expect("intact"), b"x");
    assert!(fresh.4.open(&x).is_err(), "replayed");
    // A frame of another link's key.
    assert!(fresh.4.open(&a).is_err());
    assert!(open.open(&[0; 3]).is_err(), "shorter than a tag");
}

// The fuzz targets of the handshake: `cargo xtask test` runs them again with
// `RSM_FUZZ_SCALE` times the cases (crate::sans_io::fuzz_cases).
proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::sans_io::fuzz_cases(256)))]

    #[test]
    fn fuzz_handshake_messages(
        m1 in vec(any::<u8>(), 0..700),
        m2 in vec(any::<u8>(), 0..700),
        m3 in vec(any::<u8>(), 0..700),
    ) {
        let c = cluster(2);
        let _ = Responder::accept(&c[1], &m1);
        if let Ok((dial, real1)) = Initiator::start(&c[0], 2) {
            let _ = dial.finish(&m2);
            if let Ok((accept, _)) = Responder::accept(&c[1], &real1) {
                let _ = accept.finish(&m3);
            }
        }
    }

    #[test]
    fn fuzz_sealed_frames(frame in vec(any::<u8>(), 0..300)) {
        let c = cluster(2);
        let (_, _, _, _, mut open) = run(&c[0], &c[1], 2).expect("ok");
        prop_assert!(open.open(&frame).is_err());
    }
}
