//! `rsm_get_interconnect_topology`, `rsm_free_interconnect_topology` and
//! `rsm_get_segmentid_range` (docs/rsmapi.md §4.9): the topology is one block from C's
//! allocator, laid out as the original's.

use crate::codes::{self, Ret};
use crate::ctypes::{Connections, ConnectionsHdr, MAXNAMELEN, RemoteCntlr, Topology, TopologyHdr};
use crate::node::{self, block, code};
use crate::{cin, guard, sys};
use std::mem::{offset_of, size_of};
use std::net::SocketAddr;
use std::os::raw::{c_char, c_int, c_uint};

/// A hardware address for a side-channel address: the IPv4 address and port
/// (`a.b.c.d:p` → `0x0000_aabb_ccdd_pppp`); otherwise a hash of the text.
fn hwaddr(text: &str) -> u64 {
    let tail = text.rsplit("://").next().unwrap_or(text);
    match tail.parse::<SocketAddr>() {
        Ok(SocketAddr::V4(a)) => (u64::from(a.ip().to_bits()) << 16) | u64::from(a.port()),
        _ => text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        }),
    }
}

/// `name` as a NUL-terminated C array (cut to fit).
fn cname(name: &str) -> [c_char; MAXNAMELEN] {
    let mut out = [0 as c_char; MAXNAMELEN];
    for (o, b) in out.iter_mut().zip(name.bytes().take(MAXNAMELEN - 1)) {
        *o = b as c_char;
    }
    out
}

fn build(t: &rsm::Topology) -> Result<*mut Topology, c_int> {
    let n = t.controllers.len();
    let head = offset_of!(Topology, connections) + n.max(1) * size_of::<*mut Connections>();
    let per = |remotes: usize| {
        offset_of!(Connections, remote_cntlr) + remotes.max(1) * size_of::<RemoteCntlr>()
    };
    let total = t
        .controllers
        .iter()
        .fold(head, |acc, c| acc + per(c.remotes.len()));
    let base = sys::calloc(total);
    if base.is_null() {
        return Err(codes::INSUFFICIENT_MEM);
    }
    let top = base.cast::<Topology>();
    let hdr = TopologyHdr {
        local_nodeid: t.local_node.get(),
        local_cntlr_count: n as c_uint,
    };
    // SAFETY: base is a fresh zeroed block of `total` bytes, aligned for any type; every
    // write below lies inside it by the size computation above: the header and n pointers,
    // then per controller its header and its remotes.
    unsafe {
        std::ptr::addr_of_mut!((*top).hdr).write(hdr);
        let ptrs = std::ptr::addr_of_mut!((*top).connections).cast::<*mut Connections>();
        let mut at = head;
        for (i, c) in t.controllers.iter().enumerate() {
            let conn = base.add(at).cast::<Connections>();
            ptrs.add(i).write(conn);
            std::ptr::addr_of_mut!((*conn).hdr).write(ConnectionsHdr {
                cntlr_name: cname(&c.controller),
                local_hwaddr: hwaddr(&c.address),
                remote_cntlr_count: c_int::try_from(c.remotes.len()).unwrap_or(c_int::MAX),
            });
            let rem = std::ptr::addr_of_mut!((*conn).remote_cntlr).cast::<RemoteCntlr>();
            for (j, r) in c.remotes.iter().enumerate() {
                rem.add(j).write(RemoteCntlr {
                    remote_nodeid: r.node.get(),
                    remote_cntlrname: cname(&r.controller),
                    remote_hwaddr: hwaddr(&r.address.to_string()),
                    connection_state: rsm::topology::RSM_CONNECTION_ACTIVE,
                });
            }
            at += per(c.remotes.len());
        }
    }
    Ok(top)
}

fn get(out: *mut *mut Topology) -> Ret {
    if out.is_null() || out.align_offset(align_of::<*mut Topology>()) != 0 {
        return Err(codes::BAD_TOPOLOGY_PTR);
    }
    // SAFETY: non-null and aligned: the caller's pointer variable.
    unsafe { out.write(std::ptr::null_mut()) };
    let node = node::node()?;
    let t = code(block(node.topology()))?;
    let top = build(&t)?;
    // SAFETY: as above.
    unsafe { out.write(top) };
    Ok(())
}

/// `rsm_get_interconnect_topology`: the local node, its controllers (not `loopback`) and
/// the peers each reaches, in one block to free with `rsm_free_interconnect_topology`.
/// Hardware addresses are the side-channel addresses as numbers (DESIGN.md §12).
///
/// # Safety
/// `topology_data` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_get_interconnect_topology(topology_data: *mut *mut Topology) -> c_int {
    guard::call(
        "rsm_get_interconnect_topology",
        codes::INSUFFICIENT_RESOURCES,
        || get(topology_data),
    )
}

/// `rsm_free_interconnect_topology`: frees what the get returned; NULL is ignored.
///
/// # Safety
/// `topology_data` is NULL or came from `rsm_get_interconnect_topology`, once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_free_interconnect_topology(topology_data: *mut Topology) {
    let _ = guard::stateless("rsm_free_interconnect_topology", || {
        // SAFETY: the caller's contract: null or our calloc'd block, freed once.
        unsafe { sys::free(topology_data.cast()) };
        Ok(())
    });
}

fn segmentid_range(appid: *const c_char, base: *mut u32, length: *mut u32) -> Ret {
    let aligned = |p: *mut u32| !p.is_null() && p.align_offset(align_of::<u32>()) == 0;
    if appid.is_null() || !aligned(base) || !aligned(length) {
        return Err(codes::BAD_ADDR);
    }
    // SAFETY: a non-null C string argument; read to its NUL or 4096 bytes.
    let bytes = unsafe { cin::bounded_str(appid, 4096) }.ok_or(codes::BAD_APPID)?;
    let appid = String::from_utf8(bytes).map_err(|_| codes::BAD_APPID)?;
    let r = code(rsm::get_segmentid_range(&appid))?;
    // SAFETY: non-null and aligned (checked): the caller's variables.
    unsafe {
        base.write(r.base);
        length.write(r.length);
    }
    Ok(())
}

/// `rsm_get_segmentid_range`: the range the segment-id file reserves for `appid`
/// (`/etc/rsm/rsm.segmentid`, or `RSM_SEGMENTID_FILE`; DESIGN.md, decision 9).
///
/// # Safety
/// `appid` is NULL or a NUL-terminated string; `baseid` and `length` are NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsm_get_segmentid_range(
    appid: *const c_char,
    baseid: *mut u32,
    length: *mut u32,
) -> c_int {
    guard::stateless("rsm_get_segmentid_range", || {
        segmentid_range(appid, baseid, length)
    })
}
