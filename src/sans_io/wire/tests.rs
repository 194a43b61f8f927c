//! Unit tests of `wire.rs`.

use super::*;
use proptest::collection::vec;
use proptest::prelude::*;

fn sample_grant() -> ConnectGrant {
    ConnectGrant {
        conn_id: 0x1122_3344_5566_7788,
        keys: vec![1, u64::MAX],
        base: 0x7f00_0000_0000,
        length: 1 << 20,
        granted: 0o666,
        generation: 3,
        fabric_addr: vec![0xAB; 24],
        exporter_uid: 1000,
        exporter_gid: 100,
        doorbell: Some(Doorbell {
            controller: "tcp0".into(),
            addr: 0x2000,
            key: 77,
        }),
        admission: vec![0x5C; 16],
        map_service: b"rsm-fd-1-0123456789abcdef".to_vec(),
        atomics_addr: vec![0xA7; 16],
    }
}

fn samples() -> Vec<Message> {
    vec![
        Message::Hello(Hello {
            node_id: 2,
            incarnation: 0xdead_beef,
            byte_order: ByteOrder::Big,
            boot_id: [7; 16],
            auth: vec![],
            doorbells: vec![Doorbell {
                controller: "tcp0".into(),
                addr: 0x1000,
                key: 42,
            }],
        }),
        Message::ConnectRequest(ConnectRequest {
            req: 9,
            segment_id: 0x40_0001,
            controller: "shm0".into(),
            perm: 0o600,
            uid: 1000,
            gid: 100,
            groups: vec![4, 24, 27],
            fabric_addr: vec![1, 2, 3],
            signal_token: 0x55,
            doorbell: None,
            admission: vec![3; 16],
        }),
        Message::ConnectReply(ConnectReply {
            req: 9,
            result: Ok(sample_grant()),
        }),
        Message::ConnectReply(ConnectReply {
            req: 10,
            result: Err(27),
        }),
        Message::Disconnect { conn_id: 5 },
        Message::Revoke {
            conn_id: 5,
            generation: 2,
        },
        Message::RevokeAck {
            conn_id: 5,
            generation: 2,
        },
        Message::Rebind {
            conn_id: 5,
            generation: 3,
            keys: vec![11, 12, 13, 14],
            base: 0x2000,
        },
        Message::RebindAck {
            conn_id: 5,
            generation: 3,
        },
        Message::Signal {
            conn_id: 5,
            flags: 1,
        },
        Message::Wake {
            controller: "shm0".into(),
        },
        Message::Heartbeat { seq: u64::MAX },
        Message::Goodbye,
        Message::Handshake {
            noise: vec![7; MAX_HANDSHAKE],
        },
        Message::AtomicRequest(AtomicRequest {
            req: 1,
            conn_id: 2,
            class: 1,
            op: 2,
            datatype: 7,
            offset: 8,
            operand: u64::MAX,
            compare: 3,
        }),
        Message::AtomicReply(AtomicReply {
            req: 1,
            result: Ok(41),
            atomics_addr: vec![0x7A; 16],
        }),
        Message::AtomicReply(AtomicReply {
            req: 1,
            result: Err(10),
            atomics_addr: Vec::new(),
        }),
        Message::SegmentsRequest(SegmentsRequest {
            req: 3,
            controller: "tcp".into(),
            after: 0x40_0001,
            uid: 1000,
            gid: 100,
            groups: vec![4, 27],
        }),
        Message::SegmentsReply(SegmentsReply {
            req: 3,
            result: Ok(sample_page()),
        }),
        Message::SegmentsReply(SegmentsReply {
            req: 4,
            result: Err(12),
        }),
    ]
}

fn sample_page() -> SegmentsPage {
    SegmentsPage {
        segments: vec![
            ListedSegment {
                id: 0x40_0002,
                size: 1 << 16,
                perm: 0o600,
                controller: "tcp0".into(),
                name: Some("features".into()),
            },
            ListedSegment {
                id: 0x8000_0000,
                size: 4096,
                perm: 0o400,
                controller: "tcp0".into(),
                name: None,
            },
        ],
        more: true,
    }
}

/// A page of the most segments, each with the longest controller and name, fits a frame.
#[test]
fn the_fullest_page_fits_a_frame() {
    let full = ListedSegment {
        id: u32::MAX,
        size: u64::MAX,
        perm: 0o600,
        controller: "c".repeat(MAX_CONTROLLER),
        name: Some("\u{10FFFF}".repeat(MAX_SEGMENT_NAME / 4)),
    };
    let msg = Message::SegmentsReply(SegmentsReply {
        req: u64::MAX,
        result: Ok(SegmentsPage {
            segments: vec![full; MAX_LISTED],
            more: true,
        }),
    });
    let frame = encode(&msg).expect("the fullest page encodes");
    assert!(frame.len() <= MAX_FRAME);
    assert_eq!(decode(&frame), Ok(msg));
}

/// What a hostile exporter might answer a listing with: refused on both sides, and a
/// count beyond the frame is truncation, not an allocation.
#[test]
fn hostile_listings_are_refused() {
    let reply = |page: SegmentsPage| {
        Message::SegmentsReply(SegmentsReply {
            req: 1,
            result: Ok(page),
        })
    };
    // Too many segments, a perm of nothing or of other bits, an empty or long name.
    let mut over = sample_page();
    over.segments = vec![over.segments[0].clone(); MAX_LISTED + 1];
    assert!(matches!(
        encode(&reply(over)),
        Err(WireError::Length { len: 257, .. })
    ));
    for perm in [0, 0o700, 0o644, 0o1] {
        let mut p = sample_page();
        p.segments[0].perm = perm;
        assert!(encode(&reply(p)).is_err(), "{perm:o}");
    }
    for name in [String::new(), "n".repeat(MAX_SEGMENT_NAME + 1)] {
        let mut p = sample_page();
        p.segments[0].name = Some(name);
        assert!(encode(&reply(p)).is_err());
    }

    let good = encode(&reply(sample_page())).expect("encodes").to_vec();
    // version 2, tag 1, req 8, result 1, count 2: the first entry at 14; its perm at 26.
    let mut bad_perm = good.clone();
    bad_perm[26..30].copy_from_slice(&0o700u32.to_le_bytes());
    assert!(matches!(
        decode(&bad_perm),
        Err(WireError::BadValue {
            field: "listed segment perm",
            ..
        })
    ));
    // controller length at 30, "tcp0" at 32, the name flag at 36, its length at 37.
    let mut bad_flag = good.clone();
    bad_flag[36] = 2;
    assert!(matches!(decode(&bad_flag), Err(WireError::BadValue { .. })));
    let mut empty_name = good.clone();
    empty_name[37..39].copy_from_slice(&0u16.to_le_bytes());
    assert!(matches!(decode(&empty_name), Err(WireError::Length { .. })));
    let mut bad_utf8 = good.clone();
    bad_utf8[39] = 0xFF;
    assert!(matches!(decode(&bad_utf8), Err(WireError::BadUtf8 { .. })));
    let mut bad_more = good.clone();
    *bad_more.last_mut().expect("the more flag") = 2;
    assert!(matches!(decode(&bad_more), Err(WireError::BadValue { .. })));
    // A count of 256 entries in a frame that ends after it.
    let mut frame = vec![6, 0, tag::SEGMENTS_REPLY];
    frame.extend_from_slice(&[0; 8]);
    frame.push(0);
    frame.extend_from_slice(&256u16.to_le_bytes());
    assert!(matches!(decode(&frame), Err(WireError::Truncated { .. })));
    frame[12..14].copy_from_slice(&257u16.to_le_bytes());
    assert!(matches!(decode(&frame), Err(WireError::Length { .. })));
}

#[test]
fn every_message_round_trips() {
    let all = samples();
    let mut tags: Vec<u8> = all.iter().map(Message::tag).collect();
    tags.dedup();
    assert_eq!(tags.len(), 17, "every message kind is covered");
    for msg in all {
        let frame = encode(&msg).expect("encodes");
        assert_eq!(&frame[..2], &WIRE_VERSION.to_le_bytes());
        assert_eq!(decode(&frame).as_ref(), Ok(&msg), "{}", msg.kind());
    }
}

#[test]
fn the_layout_is_little_endian_and_stable() {
    let frame = encode(&Message::Signal {
        conn_id: 0x0102_0304_0506_0708,
        flags: 0x0A0B_0C0D,
    })
    .expect("encodes");
    assert_eq!(
        &frame[..],
        &[6, 0, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0x0D, 0x0C, 0x0B, 0x0A]
    );
}

#[test]
fn another_version_is_refused() {
    let mut frame = encode(&Message::Goodbye).expect("encodes").to_vec();
    frame[0] = 1;
    assert_eq!(decode(&frame), Err(WireError::Version { got: 1 }));
}

#[test]
fn an_unknown_tag_is_refused() {
    assert_eq!(decode(&[6, 0, 0]), Err(WireError::UnknownTag(0)));
    assert_eq!(decode(&[6, 0, 200]), Err(WireError::UnknownTag(200)));
}

#[test]
fn trailing_bytes_are_refused() {
    let mut frame = encode(&Message::Goodbye).expect("encodes").to_vec();
    frame.push(0);
    assert_eq!(decode(&frame), Err(WireError::Trailing(1)));
}

#[test]
fn empty_and_oversize_frames_are_refused() {
    assert!(matches!(decode(&[]), Err(WireError::Truncated { .. })));
    let big = vec![0u8; MAX_FRAME + 1];
    assert!(matches!(decode(&big), Err(WireError::FrameTooLarge { .. })));
}

#[test]
fn bad_enum_values_and_utf8_are_refused() {
    let mut hello = encode(&samples()[0]).expect("encodes").to_vec();
    // version 2, tag 1, node id 4, incarnation 8: the byte order is at offset 15.
    hello[15] = 2;
    assert!(matches!(
        decode(&hello),
        Err(WireError::BadValue {
            field: "hello byte order",
            value: 2
        })
    ));

    let mut reply = encode(&samples()[3]).expect("encodes").to_vec();
    reply[11] = 7; // the result byte after version, tag and req
    assert!(matches!(
        decode(&reply),
        Err(WireError::BadValue { value: 7, .. })
    ));

    let mut req = encode(&samples()[1]).expect("encodes").to_vec();
    // version, tag, req 8, segment 4, controller length 2: "shm0" starts at offset 17.
    req[17] = 0xFF;
    assert!(matches!(decode(&req), Err(WireError::BadUtf8 { .. })));
}

#[test]
fn oversize_fields_are_refused_on_both_sides() {
    let mut over_groups = match samples().remove(1) {
        Message::ConnectRequest(r) => r,
        _ => unreachable!(),
    };
    over_groups.groups = vec![0; MAX_GROUPS + 1];
    let err = encode(&Message::ConnectRequest(over_groups)).expect_err("too many groups");
    assert!(matches!(
        err,
        WireError::Length {
            len: 65,
            max: 64,
            ..
        }
    ));

    // Hand-made frame: a hello whose auth claims 257 bytes, and carries them.
    let mut frame = vec![6, 0, tag::HELLO];
    frame.extend_from_slice(&[0; 4 + 8 + 1 + 16]);
    frame.extend_from_slice(&257u16.to_le_bytes());
    frame.extend_from_slice(&[0; 257]);
    frame.extend_from_slice(&0u16.to_le_bytes());
    assert!(matches!(
        decode(&frame),
        Err(WireError::Length {
            field: "hello auth",
            len: 257,
            ..
        })
    ));

    // A grant without keys, or with five, is refused.
    for n in [0usize, 5] {
        let mut g = sample_grant();
        g.keys = vec![1; n];
        let msg = Message::ConnectReply(ConnectReply {
            req: 1,
            result: Ok(g),
        });
        assert!(encode(&msg).is_err());
    }

    // A controller name over 64 bytes.
    let long = Message::Hello(Hello {
        node_id: 1,
        incarnation: 1,
        byte_order: ByteOrder::Little,
        boot_id: [0; 16],
        auth: vec![],
        doorbells: vec![Doorbell {
            controller: "x".repeat(MAX_CONTROLLER + 1),
            addr: 0,
            key: 0,
        }],
    });
    assert!(encode(&long).is_err());
}

#[test]
fn a_length_beyond_the_frame_is_truncation_not_allocation() {
    // A connect request whose groups count is 64 but whose frame ends right after it.
    let mut frame = vec![6, 0, tag::CONNECT_REQUEST];
    frame.extend_from_slice(&[0; 8 + 4]);
    frame.extend_from_slice(&0u16.to_le_bytes());
    frame.extend_from_slice(&[0; 12]);
    frame.extend_from_slice(&64u16.to_le_bytes());
    assert!(matches!(
        decode(&frame),
        Err(WireError::Truncated {
            need: 256,
            left: 0,
            ..
        })
    ));
}

#[test]
fn errors_describe_themselves() {
    let e = WireError::Length {
        field: "grant keys",
        len: 5,
        min: 1,
        max: 4,
    };
    assert_eq!(e.to_string(), "grant keys has length 5, allowed 1 to 4");
    assert!(
        WireError::Version { got: 9 }
            .to_string()
            .contains("version 9")
    );
}

#[test]
fn native_byte_order() {
    let expect = if u16::from_ne_bytes([1, 0]) == 1 {
        ByteOrder::Little
    } else {
        ByteOrder::Big
    };
    assert_eq!(ByteOrder::native(), expect);
}

fn arb_string(max: usize) -> impl Strategy<Value = String> {
    // Any UTF-8 whose encoding fits `max` bytes.
    vec(any::<char>(), 0..=max).prop_map(move |chars| {
        let mut s = String::new();
        for c in chars {
            if s.len() + c.len_utf8() > max {
                break;
            }
            s.push(c);
        }
        s
    })
}

fn arb_grant() -> impl Strategy<Value = ConnectGrant> {
    (
        any::<u64>(),
        vec(any::<u64>(), 1..=MAX_KEYS),
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        vec(any::<u8>(), 0..=MAX_FABRIC_ADDR),
        (any::<u32>(), any::<u32>()),
        (
            vec(any::<u8>(), 0..=MAX_TICKET),
            vec(any::<u8>(), 0..=MAX_FABRIC_ADDR),
            vec(any::<u8>(), 0..=MAX_FABRIC_ADDR),
        ),
    )
        .prop_map(
            |(
                conn_id,
                keys,
                base,
                length,
                granted,
                generation,
                fabric_addr,
                (uid, gid),
                (admission, map_service, atomics_addr),
            )| {
                ConnectGrant {
                    conn_id,
                    keys,
                    base,
                    length,
                    granted,
                    generation,
                    fabric_addr,
                    exporter_uid: uid,
                    exporter_gid: gid,
                    doorbell: None,
                    admission,
                    map_service,
                    atomics_addr,
                }
            },
        )
}

fn arb_message() -> impl Strategy<Value = Message> {
    let doorbell = (arb_string(MAX_CONTROLLER), any::<u64>(), any::<u64>()).prop_map(
        |(controller, addr, key)| Doorbell {
            controller,
            addr,
            key,
        },
    );
    let hello = (
        any::<u32>(),
        any::<u64>(),
        any::<bool>(),
        any::<[u8; 16]>(),
        vec(any::<u8>(), 0..=MAX_AUTH),
        vec(doorbell, 0..=MAX_DOORBELLS),
    )
        .prop_map(|(node_id, incarnation, big, boot_id, auth, doorbells)| {
            Message::Hello(Hello {
                node_id,
                incarnation,
                byte_order: if big {
                    ByteOrder::Big
                } else {
                    ByteOrder::Little
                },
                boot_id,
                auth,
                doorbells,
            })
        });
    let request = (
        any::<u64>(),
        any::<u32>(),
        arb_string(MAX_CONTROLLER),
        any::<(u32, u32, u32)>(),
        vec(any::<u32>(), 0..=MAX_GROUPS),
        (
            vec(any::<u8>(), 0..=MAX_FABRIC_ADDR),
            vec(any::<u8>(), 0..=MAX_TICKET),
        ),
    )
        .prop_map(
            |(req, segment_id, controller, (perm, uid, gid), groups, (fabric_addr, admission))| {
                Message::ConnectRequest(ConnectRequest {
                    req,
                    segment_id,
                    controller,
                    perm,
                    uid,
                    gid,
                    groups,
                    fabric_addr,
                    signal_token: req ^ 0x5A,
                    doorbell: None,
                    admission,
                })
            },
        );
    let reply = (
        any::<u64>(),
        prop_oneof![arb_grant().prop_map(Ok), any::<u32>().prop_map(Err)],
    )
        .prop_map(|(req, result)| Message::ConnectReply(ConnectReply { req, result }));
    prop_oneof![
        hello,
        request,
        reply,
        any::<u64>().prop_map(|conn_id| Message::Disconnect { conn_id }),
        any::<(u64, u32)>().prop_map(|(conn_id, generation)| Message::Revoke {
            conn_id,
            generation
        }),
        any::<(u64, u32)>().prop_map(|(conn_id, generation)| Message::RevokeAck {
            conn_id,
            generation
        }),
        (any::<(u64, u32, u64)>(), vec(any::<u64>(), 1..=MAX_KEYS)).prop_map(
            |((conn_id, generation, base), keys)| Message::Rebind {
                conn_id,
                generation,
                keys,
                base
            }
        ),
        any::<(u64, u32)>().prop_map(|(conn_id, generation)| Message::RebindAck {
            conn_id,
            generation
        }),
        any::<(u64, u32)>().prop_map(|(conn_id, flags)| Message::Signal { conn_id, flags }),
        "[a-z0-9]{0,8}".prop_map(|controller| Message::Wake { controller }),
        any::<u64>().prop_map(|seq| Message::Heartbeat { seq }),
        Just(Message::Goodbye),
        vec(any::<u8>(), 1..=MAX_HANDSHAKE).prop_map(|noise| Message::Handshake { noise }),
        any::<(u64, u64, u8, u8, u8, u64, u64, u64)>().prop_map(
            |(req, conn_id, class, op, datatype, offset, operand, compare)| {
                Message::AtomicRequest(AtomicRequest {
                    req,
                    conn_id,
                    class,
                    op,
                    datatype,
                    offset,
                    operand,
                    compare,
                })
            }
        ),
        (
            any::<(u64, Result<u64, u32>)>(),
            vec(any::<u8>(), 0..=MAX_FABRIC_ADDR)
        )
            .prop_map(
                |((req, result), atomics_addr)| Message::AtomicReply(AtomicReply {
                    req,
                    result,
                    atomics_addr
                })
            ),
        (
            any::<(u64, u32, u32, u32)>(),
            arb_string(MAX_CONTROLLER),
            vec(any::<u32>(), 0..=MAX_GROUPS)
        )
            .prop_map(|((req, after, uid, gid), controller, groups)| {
                Message::SegmentsRequest(SegmentsRequest {
                    req,
                    controller,
                    after,
                    uid,
                    gid,
                    groups,
                })
            }),
        (
            any::<u64>(),
            prop_oneof![
                (vec(arb_listed(), 0..=16), any::<bool>())
                    .prop_map(|(segments, more)| Ok(SegmentsPage { segments, more })),
                any::<u32>().prop_map(Err)
            ]
        )
            .prop_map(|(req, result)| Message::SegmentsReply(SegmentsReply { req, result })),
    ]
}

fn arb_listed() -> impl Strategy<Value = ListedSegment> {
    (
        any::<(u32, u64)>(),
        prop_oneof![Just(0o400u32), Just(0o200), Just(0o600)],
        arb_string(MAX_CONTROLLER),
        proptest::option::of(
            arb_string(MAX_SEGMENT_NAME).prop_filter("names are not empty", |n| !n.is_empty()),
        ),
    )
        .prop_map(|((id, size), perm, controller, name)| ListedSegment {
            id,
            size,
            perm,
            controller,
            name,
        })
}

// The fuzz targets of the frame decoder: `cargo xtask test` runs them again with
// `RSM_FUZZ_SCALE` times the cases (crate::sans_io::fuzz_cases).
proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::sans_io::fuzz_cases(512)))]

    #[test]
    fn fuzz_frames_never_panic(bytes in vec(any::<u8>(), 0..2048)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn fuzz_bodies_after_a_valid_header(
        tag in 0u8..19,
        body in vec(any::<u8>(), 0..1024),
    ) {
        let mut frame = vec![6, 0, tag];
        frame.extend_from_slice(&body);
        if let Ok(msg) = decode(&frame) {
            // Whatever decodes re-encodes to the same bytes: the format has one spelling.
            prop_assert_eq!(encode(&msg).expect("decoded messages are within limits"), frame);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_messages_round_trip(msg in arb_message()) {
        let frame = encode(&msg).expect("within limits");
        prop_assert!(frame.len() <= MAX_FRAME);
        prop_assert_eq!(decode(&frame), Ok(msg));
    }

    #[test]
    fn every_truncation_fails_cleanly(msg in arb_message()) {
        let frame = encode(&msg).expect("within limits");
        for cut in 0..frame.len() {
            prop_assert!(decode(&frame[..cut]).is_err(), "cut at {}", cut);
        }
    }

    #[test]
    fn every_extension_fails_cleanly(msg in arb_message(), extra in vec(any::<u8>(), 1..8)) {
        let mut frame = encode(&msg).expect("within limits").to_vec();
        frame.extend_from_slice(&extra);
        prop_assert_eq!(decode(&frame), Err(WireError::Trailing(extra.len())));
    }

    #[test]
    fn oversize_byte_fields_are_refused(extra in 1usize..64, auth_not_addr in any::<bool>()) {
        let msg = if auth_not_addr {
            Message::Hello(Hello {
                node_id: 1,
                incarnation: 1,
                byte_order: ByteOrder::Little,
                boot_id: [0; 16],
                auth: vec![0; MAX_AUTH + extra],
                doorbells: vec![],
            })
        } else {
            Message::ConnectRequest(ConnectRequest {
                req: 1,
                segment_id: 1,
                controller: String::new(),
                perm: 0,
                uid: 0,
                gid: 0,
                groups: vec![],
                fabric_addr: vec![0; MAX_FABRIC_ADDR + extra],
                signal_token: 0,
                doorbell: None,
                admission: vec![],
            })
        };
        let is_length_error = matches!(encode(&msg), Err(WireError::Length { .. }));
        prop_assert!(is_length_error);
    }
}
