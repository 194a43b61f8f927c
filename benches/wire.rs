//! Encoding and decoding side-channel messages (`rsm::test_util::wire`): the hello every link
//! starts with, a connect request and its grant, and the heartbeat every link sends.

// criterion's macros define undocumented public functions.
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rsm::ByteOrder;
use rsm::test_util::wire::{
    ConnectGrant, ConnectReply, ConnectRequest, Doorbell, Hello, Message, decode, encode,
};
use std::hint::black_box;

fn messages() -> Vec<(&'static str, Message)> {
    let doorbell = |c: &str| Doorbell {
        controller: c.into(),
        addr: 0x7f00_dead_0000,
        key: 0xB0B0,
    };
    vec![
        (
            "hello",
            Message::Hello(Hello {
                node_id: 7,
                incarnation: 0x1234_5678_9abc_def0,
                byte_order: ByteOrder::native(),
                boot_id: [0x5a; 16],
                auth: Vec::new(),
                doorbells: vec![doorbell("tcp0"), doorbell("shm0"), doorbell("sockets0")],
            }),
        ),
        (
            "connect request",
            Message::ConnectRequest(ConnectRequest {
                req: 42,
                segment_id: 0x40_0001,
                controller: "tcp0".into(),
                perm: 0o600,
                uid: 1000,
                gid: 1000,
                groups: vec![4, 24, 27, 100],
                fabric_addr: vec![0xab; 32],
                signal_token: 0x1234_5600,
                doorbell: Some(Doorbell {
                    controller: "tcp0".into(),
                    addr: 0x7f00_0000_1000,
                    key: 77,
                }),
                admission: vec![0x5c; 16],
            }),
        ),
        (
            "connect reply",
            Message::ConnectReply(ConnectReply {
                req: 42,
                result: Ok(ConnectGrant {
                    conn_id: 9,
                    keys: vec![1, 2, 3],
                    base: 0x7f12_3456_0000,
                    length: 1 << 20,
                    granted: 0o600,
                    generation: 1,
                    fabric_addr: vec![0xcd; 32],
                    exporter_uid: 1000,
                    exporter_gid: 1000,
                    doorbell: Some(Doorbell {
                        controller: "tcp0".into(),
                        addr: 0x7f00_0000_2000,
                        key: 78,
                    }),
                    admission: vec![0x5d; 16],
                    map_service: Vec::new(),
                    atomics_addr: Vec::new(),
                }),
            }),
        ),
        ("heartbeat", Message::Heartbeat { seq: 123_456 }),
    ]
}

fn wire(c: &mut Criterion) {
    let mut g = c.benchmark_group("wire");
    for (name, msg) in messages() {
        let frame = encode(&msg).expect("encodes");
        assert_eq!(decode(&frame).expect("decodes"), msg);
        g.throughput(Throughput::Bytes(frame.len() as u64));
        g.bench_function(format!("encode {name}"), |b| {
            b.iter(|| encode(black_box(&msg)))
        });
        g.bench_function(format!("decode {name}"), |b| {
            b.iter(|| decode(black_box(&frame)))
        });
    }
    g.finish();
}

criterion_group!(benches, wire);
criterion_main!(benches);
