//! `rsm::Error`: one variant per RSMAPI error code (docs/rsmapi.md §3.1), with context.
//!
//! Every fallible call in `rsm` returns [`Error`]. [`Error::code`] gives the RSMAPI number
//! (`RSMERR_*`), so the C library can return it unchanged; the context says which operation,
//! controller, segment, node, offset and length were involved and, where libfabric failed, the
//! call, its errno and the provider's own error number and text.
//!
//! Match on the variants, or ask the helpers for the kinds a caller usually decides on
//! ([`Error::is_timeout`], [`Error::is_unreachable`], [`Error::is_disconnected`],
//! [`Error::is_permission`]); [`std::error::Error::source`] gives the libfabric or OS failure
//! behind an error, where there was one.
//!
//! ```
//! use rsm::Error;
//!
//! let e = Error::bad_offset().op("put").segment(0x400001).offset(4096).length(8);
//! assert!(matches!(e, Error::BadOffset(_)));
//! assert_eq!(e.code(), 18); // for the C library
//! assert_eq!(e.name(), "RSMERR_BAD_OFFSET");
//! assert!(e.to_string().contains("offset"));
//! ```

use std::fmt;
use std::sync::Arc;

/// The result type of every fallible `rsm` call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub use rsm_fabric::FabricFailure;

/// Where an error happened: each field is set where it applies.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// The operation, such as `"put"` or `"publish"`.
    pub op: Option<&'static str>,
    /// The controller name, such as `"tcp0"`.
    pub controller: Option<String>,
    /// The segment id.
    pub segment: Option<u32>,
    /// The remote (or offending) node id.
    pub node: Option<u32>,
    /// The offset into the segment.
    pub offset: Option<u64>,
    /// The length of the transfer.
    pub length: Option<u64>,
    /// What went wrong, and what to do about it, in words.
    pub detail: Option<String>,
    /// The libfabric call that failed, if one did.
    pub fabric: Option<FabricFailure>,
    /// The operating-system error behind it, if one was (shared: a context is cloned).
    pub io: Option<Arc<std::io::Error>>,
}

impl PartialEq for Context {
    fn eq(&self, o: &Self) -> bool {
        // io::Error has no equality: the same kind, OS number and text count as equal.
        let io_eq = match (&self.io, &o.io) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                a.kind() == b.kind()
                    && a.raw_os_error() == b.raw_os_error()
                    && a.to_string() == b.to_string()
            }
            _ => false,
        };
        io_eq
            && self.op == o.op
            && self.controller == o.controller
            && self.segment == o.segment
            && self.node == o.node
            && self.offset == o.offset
            && self.length == o.length
            && self.detail == o.detail
            && self.fabric == o.fabric
    }
}

impl Eq for Context {}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(op) = self.op {
            parts.push(op.to_string());
        }
        if let Some(c) = &self.controller {
            parts.push(format!("controller {c}"));
        }
        if let Some(s) = self.segment {
            parts.push(format!("segment {s:#x}"));
        }
        if let Some(n) = self.node {
            parts.push(format!("node {n}"));
        }
        if let Some(o) = self.offset {
            parts.push(format!("offset {o}"));
        }
        if let Some(l) = self.length {
            parts.push(format!("length {l}"));
        }
        if !parts.is_empty() {
            write!(f, " ({})", parts.join(", "))?;
        }
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        if let Some(fi) = &self.fabric {
            write!(f, ": {fi}")?;
        }
        Ok(())
    }
}

macro_rules! rsm_errors {
    ($( $code:literal $variant:ident $ctor:ident $name:literal $text:literal; )*) => {
        /// An RSMAPI error: one variant per `RSMERR_*` code of docs/rsmapi.md §3.1, each carrying
        /// [`Context`]. Construct with the lowercase constructors (`Error::bad_offset()`) and
        /// add context with the builder methods.
        #[non_exhaustive]
        pub enum Error {
            $(
                #[doc = concat!("`", $name, "` (", stringify!($code), "): ", $text, ".")]
                $variant(Box<Context>),
            )*
        }

        impl Error {
            $(
                #[doc = concat!("A new `", $name, "` error with empty context.")]
                pub fn $ctor() -> Self {
                    Error::$variant(Box::default())
                }
            )*

            /// The RSMAPI error number (`RSMERR_*`, 1-45).
            pub fn code(&self) -> i32 {
                match self {
                    $( Error::$variant(_) => $code, )*
                }
            }

            /// The RSMAPI name of the error, such as `"RSMERR_BAD_OFFSET"`.
            pub fn name(&self) -> &'static str {
                match self {
                    $( Error::$variant(_) => $name, )*
                }
            }

            /// The short description of the error kind, without context.
            pub fn text(&self) -> &'static str {
                match self {
                    $( Error::$variant(_) => $text, )*
                }
            }

            /// The error for an RSMAPI number, or `None` for a number that is not one.
            pub fn from_code(code: i32) -> Option<Self> {
                match code {
                    $( $code => Some(Error::$variant(Box::default())), )*
                    _ => None,
                }
            }

            /// The context of this error.
            pub fn context(&self) -> &Context {
                match self {
                    $( Error::$variant(c) => c, )*
                }
            }

            fn context_mut(&mut self) -> &mut Context {
                match self {
                    $( Error::$variant(c) => c, )*
                }
            }

            fn variant(&self) -> &'static str {
                match self {
                    $( Error::$variant(_) => stringify!($variant), )*
                }
            }
        }

        /// Every RSMAPI error number with its name, in order (1-45).
        pub const ALL_CODES: &[(i32, &str)] = &[ $( ($code, $name), )* ];
    };
}

rsm_errors! {
    1 BadLibraryVersion bad_library_version "RSMERR_BAD_LIBRARY_VERSION" "bad library version";
    2 BadTopologyPtr bad_topology_ptr "RSMERR_BAD_TOPOLOGY_PTR" "bad topology pointer";
    3 BadCtlrHndl bad_ctlr_hndl "RSMERR_BAD_CTLR_HNDL" "bad controller handle";
    4 CtlrNotPresent ctlr_not_present "RSMERR_CTLR_NOT_PRESENT" "controller not present";
    5 BadSegHndl bad_seg_hndl "RSMERR_BAD_SEG_HNDL" "bad segment handle";
    6 SegAlreadyPublished seg_already_published "RSMERR_SEG_ALREADY_PUBLISHED" "segment already published";
    7 SegNotPublished seg_not_published "RSMERR_SEG_NOT_PUBLISHED" "segment not published";
    8 SegNotPublishedToNode seg_not_published_to_node "RSMERR_SEG_NOT_PUBLISHED_TO_NODE" "segment not published to this node";
    9 SegAlreadyMapped seg_already_mapped "RSMERR_SEG_ALREADY_MAPPED" "segment already mapped";
    10 SegStillMapped seg_still_mapped "RSMERR_SEG_STILL_MAPPED" "segment still mapped";
    11 SegNotMapped seg_not_mapped "RSMERR_SEG_NOT_MAPPED" "segment not mapped";
    12 NotCreator not_creator "RSMERR_NOT_CREATOR" "caller is not the creator of the segment";
    13 BadBarrierPtr bad_barrier_ptr "RSMERR_BAD_BARRIER_PTR" "bad barrier pointer";
    14 BadSgio bad_sgio "RSMERR_BAD_SGIO" "bad scatter/gather request";
    15 BadLocalmemHndl bad_localmem_hndl "RSMERR_BAD_LOCALMEM_HNDL" "bad local memory handle";
    16 BadAddr bad_addr "RSMERR_BAD_ADDR" "bad address";
    17 BadMemAlignment bad_mem_alignment "RSMERR_BAD_MEM_ALIGNMENT" "bad memory alignment";
    18 BadOffset bad_offset "RSMERR_BAD_OFFSET" "bad offset";
    19 MisalignedOffset misaligned_offset "RSMERR_MISALIGNED_OFFSET" "misaligned offset";
    20 BadLength bad_length "RSMERR_BAD_LENGTH" "bad length";
    21 BadAcl bad_acl "RSMERR_BAD_ACL" "bad access list";
    22 BadSegid bad_segid "RSMERR_BAD_SEGID" "bad segment id";
    23 ReservedSegid reserved_segid "RSMERR_RESERVED_SEGID" "reserved segment id";
    24 SegidInUse segid_in_use "RSMERR_SEGID_IN_USE" "segment id in use";
    25 BadMode bad_mode "RSMERR_BAD_MODE" "bad barrier mode";
    26 BadPerms bad_perms "RSMERR_BAD_PERMS" "bad permissions";
    27 PermDenied perm_denied "RSMERR_PERM_DENIED" "permission denied";
    28 LocksNotSupported locks_not_supported "RSMERR_LOCKS_NOT_SUPPORTED" "lock operations not supported";
    29 LocksNotEnabled locks_not_enabled "RSMERR_LOCKS_NOT_ENABLED" "lock operations not enabled";
    30 RebindNotAllowed rebind_not_allowed "RSMERR_REBIND_NOT_ALLOWED" "rebind not allowed";
    31 InsufficientResources insufficient_resources "RSMERR_INSUFFICIENT_RESOURCES" "insufficient resources";
    32 InsufficientMem insufficient_mem "RSMERR_INSUFFICIENT_MEM" "insufficient memory";
    33 MapFailed map_failed "RSMERR_MAP_FAILED" "map failed";
    34 PollfdInUse pollfd_in_use "RSMERR_POLLFD_IN_USE" "poll descriptor in use";
    35 BarrierUninitialized barrier_uninitialized "RSMERR_BARRIER_UNINITIALIZED" "barrier not initialized";
    36 BarrierOpenFailed barrier_open_failed "RSMERR_BARRIER_OPEN_FAILED" "barrier open failed";
    37 BarrierNotOpened barrier_not_opened "RSMERR_BARRIER_NOT_OPENED" "barrier not opened";
    38 BarrierFailure barrier_failure "RSMERR_BARRIER_FAILURE" "barrier failure: a remote access failed";
    39 RemoteNodeUnreachable remote_node_unreachable "RSMERR_REMOTE_NODE_UNREACHABLE" "remote node unreachable";
    40 ConnAborted conn_aborted "RSMERR_CONN_ABORTED" "connection aborted";
    41 Interrupted interrupted "RSMERR_INTERRUPTED" "interrupted";
    42 Timeout timeout "RSMERR_TIMEOUT" "timed out";
    43 BadAppid bad_appid "RSMERR_BAD_APPID" "application id not found in the segment-id file";
    44 BadConf bad_conf "RSMERR_BAD_CONF" "bad configuration";
    45 SegNotConnected seg_not_connected "RSMERR_SEG_NOT_CONNECTED" "segment not connected";
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.text(), self.context())
    }
}

/// `{:?}` is the RSMAPI name and number, then the [`Display`](fmt::Display) text: what
/// `main` prints when it returns the error. `{:#?}` shows the variant and its [`Context`]
/// field by field.
///
/// ```
/// let e = rsm::Error::perm_denied().op("import").node(2);
/// assert_eq!(
///     format!("{e:?}"),
///     "RSMERR_PERM_DENIED (code 27): permission denied (import, node 2)"
/// );
/// assert!(format!("{e:#?}").contains("node: Some("));
/// ```
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return f
                .debug_struct(self.variant())
                .field("name", &self.name())
                .field("code", &self.code())
                .field("context", self.context())
                .finish();
        }
        write!(f, "{} (code {}): {self}", self.name(), self.code())
    }
}

impl Error {
    /// Sets the operation.
    pub fn op(mut self, op: &'static str) -> Self {
        self.context_mut().op = Some(op);
        self
    }

    /// Sets the controller name.
    pub fn controller(mut self, name: impl Into<String>) -> Self {
        self.context_mut().controller = Some(name.into());
        self
    }

    /// Sets the segment id.
    pub fn segment(mut self, id: impl Into<crate::SegmentId>) -> Self {
        self.context_mut().segment = Some(id.into().get());
        self
    }

    /// Sets the node id.
    pub fn node(mut self, node: impl Into<crate::NodeId>) -> Self {
        self.context_mut().node = Some(node.into().get());
        self
    }

    /// Sets the offset.
    pub fn offset(mut self, offset: u64) -> Self {
        self.context_mut().offset = Some(offset);
        self
    }

    /// Sets the length.
    pub fn length(mut self, length: u64) -> Self {
        self.context_mut().length = Some(length);
        self
    }

    /// Sets what went wrong, in words (lowercase; say what to do where there is something).
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.context_mut().detail = Some(detail.into());
        self
    }

    /// Attaches the libfabric call that failed.
    pub fn fabric(mut self, failure: FabricFailure) -> Self {
        self.context_mut().fabric = Some(failure);
        self
    }

    /// The libfabric failure behind this error, if any.
    pub fn fabric_failure(&self) -> Option<&FabricFailure> {
        self.context().fabric.as_ref()
    }

    /// Attaches the operating-system error behind this one; [`std::error::Error::source`]
    /// returns it (after a libfabric failure, if both are set).
    ///
    /// ```
    /// use std::error::Error as _;
    ///
    /// let os = std::io::Error::from_raw_os_error(libc::EMFILE);
    /// let e = rsm::Error::insufficient_resources().detail("eventfd").io(os);
    /// assert_eq!(e.io_error().and_then(|e| e.raw_os_error()), Some(libc::EMFILE));
    /// assert!(e.source().is_some());
    /// ```
    pub fn io(mut self, e: impl Into<std::io::Error>) -> Self {
        self.context_mut().io = Some(Arc::new(e.into()));
        self
    }

    /// The operating-system error behind this error, if any.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        self.context().io.as_deref()
    }

    /// Whether the call gave up because its time ran out: `RSMERR_TIMEOUT` (a signal wait, a
    /// connect that got no answer).
    ///
    /// ```no_run
    /// # async fn f(seg: rsm::ImportSegment) -> rsm::Result<()> {
    /// use std::time::Duration;
    ///
    /// match seg.wait_signal(Some(Duration::from_millis(10))).await {
    ///     Ok(_) => println!("signalled"),
    ///     Err(e) if e.is_timeout() => println!("not yet"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout(_))
    }

    /// Whether the other node cannot be reached or the connection to it was lost:
    /// `RSMERR_REMOTE_NODE_UNREACHABLE` (the node is dead or unreachable) and
    /// `RSMERR_CONN_ABORTED` (the connection was torn down: node lost, segment revoked, or
    /// the fabric failed). Retrying the same handle does not help; a new import might.
    ///
    /// ```
    /// use rsm::Error;
    ///
    /// assert!(Error::remote_node_unreachable().is_unreachable());
    /// assert!(Error::conn_aborted().is_unreachable());
    /// assert!(!Error::timeout().is_unreachable());
    /// ```
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            Error::RemoteNodeUnreachable(_) | Error::ConnAborted(_)
        )
    }

    /// Whether the connection the call needed is gone: `RSMERR_SEG_NOT_CONNECTED` (an
    /// importer [`signal_to`](crate::ExportSegment::signal_to) named has disconnected or
    /// is not this segment's) and `RSMERR_CONN_ABORTED` (the connection was torn down).
    ///
    /// ```
    /// use rsm::Error;
    ///
    /// assert!(Error::seg_not_connected().is_disconnected());
    /// assert!(Error::conn_aborted().is_disconnected());
    /// assert!(!Error::remote_node_unreachable().is_disconnected());
    /// ```
    pub fn is_disconnected(&self) -> bool {
        matches!(self, Error::SegNotConnected(_) | Error::ConnAborted(_))
    }

    /// Whether access was refused: `RSMERR_PERM_DENIED` (the access check or the OS said
    /// no) and `RSMERR_SEG_NOT_PUBLISHED_TO_NODE` (the segment's access list leaves this
    /// node out).
    ///
    /// ```no_run
    /// # async fn f(ctrl: rsm::Controller) -> rsm::Result<()> {
    /// use rsm::{NodeId, SegmentId};
    /// let (node, id) = (NodeId(1), SegmentId(0x400000));
    /// match ctrl.import(node, id, rsm::Perm::READ | rsm::Perm::WRITE).await {
    ///     Ok(seg) => drop(seg),
    ///     Err(e) if e.is_permission() => {
    ///         let seg = ctrl.import(node, id, rsm::Perm::READ).await?; // read-only, then
    ///         drop(seg);
    ///     }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_permission(&self) -> bool {
        matches!(self, Error::PermDenied(_) | Error::SegNotPublishedToNode(_))
    }
}

impl std::error::Error for Error {
    /// The libfabric failure behind the error, else the operating-system error, where the
    /// error has one.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        let c = self.context();
        if let Some(f) = &c.fabric {
            return Some(f);
        }
        c.io.as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<rsm_fabric::Error> for Error {
    /// Maps a failure of the libfabric wrappers to its RSMAPI code, keeping what it says.
    fn from(e: rsm_fabric::Error) -> Self {
        use rsm_fabric::ErrorKind;
        let mut out = match e.kind() {
            ErrorKind::InsufficientMem => Error::insufficient_mem(),
            ErrorKind::BadAddr => Error::bad_addr(),
            ErrorKind::Closed => Error::bad_ctlr_hndl(),
            ErrorKind::Unreachable => Error::remote_node_unreachable(),
            _ => Error::insufficient_resources(),
        };
        if let Some(op) = e.operation() {
            out = out.op(op);
        }
        if let Some(d) = e.detail_text() {
            out = out.detail(d);
        }
        if let Some(l) = e.length_involved() {
            out = out.length(l);
        }
        if let Some(f) = e.fabric_failure() {
            out = out.fabric(f.clone());
        }
        out
    }
}

/// A copy of `e`'s kind, detail and libfabric failure (errors are not `Clone`: they may
/// carry large context). What an abort or a barrier's failure hands to each operation.
pub(crate) fn clone_error(e: &Error) -> Error {
    let mut out = Error::from_code(e.code()).unwrap_or_else(Error::conn_aborted);
    if let Some(d) = &e.context().detail {
        out = out.detail(d.clone());
    }
    if let Some(f) = e.fabric_failure() {
        out = out.fabric(f.clone());
    }
    out.context_mut().io.clone_from(&e.context().io);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_one_to_forty_five_in_order() {
        assert_eq!(ALL_CODES.len(), 45);
        for (i, (code, name)) in ALL_CODES.iter().enumerate() {
            assert_eq!(*code, i as i32 + 1);
            let e = Error::from_code(*code).expect("every listed code maps to an error");
            assert_eq!(e.code(), *code);
            assert_eq!(e.name(), *name);
            assert!(name.starts_with("RSMERR_"));
        }
        assert!(Error::from_code(0).is_none());
        assert!(Error::from_code(46).is_none());
        assert!(Error::from_code(-1).is_none());
    }

    #[test]
    fn display_carries_context_and_fabric_failure() {
        let e = Error::insufficient_mem()
            .op("publish")
            .controller("tcp0")
            .segment(0x400000)
            .node(2)
            .length(4096)
            .detail("raise the memlock limit (ulimit -l)")
            .fabric(FabricFailure {
                call: "fi_mr_reg",
                errno: 12,
                prov_errno: None,
                message: "Cannot allocate memory".into(),
            });
        let s = e.to_string();
        assert!(s.starts_with("insufficient memory (publish, controller tcp0, segment 0x400000, node 2, length 4096)"), "{s}");
        assert!(s.contains("ulimit -l"), "{s}");
        assert!(
            s.contains("fi_mr_reg failed: Cannot allocate memory (errno 12)"),
            "{s}"
        );
        assert_eq!(e.fabric_failure().map(|f| f.errno), Some(12));
    }

    #[test]
    fn debug_is_the_name_and_code_then_display() {
        let e = Error::bad_offset()
            .op("put")
            .segment(0x400001)
            .offset(4096)
            .detail("past the end");
        let display = e.to_string();
        assert_eq!(
            format!("{e:?}"),
            format!("RSMERR_BAD_OFFSET (code 18): {display}")
        );
        assert_eq!(
            format!("{:?}", Error::timeout()),
            "RSMERR_TIMEOUT (code 42): timed out"
        );
        let pretty = format!("{e:#?}");
        assert!(pretty.starts_with("BadOffset {"), "{pretty}");
        assert!(pretty.contains("code: 18"), "{pretty}");
        assert!(pretty.contains("segment: Some("), "{pretty}");
    }

    #[test]
    fn main_returning_a_boxed_error_prints_the_name_code_and_display() {
        // What `fn main() -> Result<(), Box<dyn Error>>` prints after "Error: ".
        fn run() -> std::result::Result<(), Box<dyn std::error::Error>> {
            Err(Error::perm_denied().op("import").node(2))?;
            Ok(())
        }
        let e = run().unwrap_err();
        assert_eq!(
            format!("{e:?}"),
            "RSMERR_PERM_DENIED (code 27): permission denied (import, node 2)"
        );
        let e: Box<dyn std::error::Error + Send + Sync> = Error::conn_aborted().into();
        assert_eq!(
            format!("{e:?}"),
            "RSMERR_CONN_ABORTED (code 40): connection aborted"
        );
    }

    #[test]
    fn source_is_the_fabric_failure_else_the_os_error() {
        use std::error::Error as _;
        assert!(Error::timeout().source().is_none());
        let os = || std::io::Error::from_raw_os_error(libc::ENOMEM);
        let e = Error::insufficient_mem().io(os());
        let src = e.source().expect("the os error");
        assert_eq!(src.to_string(), os().to_string());
        let f = FabricFailure {
            call: "fi_mr_reg",
            errno: 12,
            prov_errno: None,
            message: "Cannot allocate memory".into(),
        };
        let e = e.fabric(f.clone());
        assert_eq!(e.source().map(|s| s.to_string()), Some(f.to_string()));
        // A copy keeps both.
        let c = clone_error(&e);
        assert_eq!(
            c.io_error().and_then(|e| e.raw_os_error()),
            Some(libc::ENOMEM)
        );
        assert_eq!(c.fabric_failure(), Some(&f));
        assert_eq!(c.context().io.is_some(), e.context().io.is_some());
    }

    #[test]
    fn the_helpers_cover_their_codes() {
        let names = |f: fn(&Error) -> bool| -> Vec<&str> {
            ALL_CODES
                .iter()
                .filter_map(|(c, _)| Error::from_code(*c))
                .filter(f)
                .map(|e| e.name())
                .collect()
        };
        assert_eq!(names(Error::is_timeout), ["RSMERR_TIMEOUT"]);
        assert_eq!(
            names(Error::is_unreachable),
            ["RSMERR_REMOTE_NODE_UNREACHABLE", "RSMERR_CONN_ABORTED"]
        );
        assert_eq!(
            names(Error::is_disconnected),
            ["RSMERR_CONN_ABORTED", "RSMERR_SEG_NOT_CONNECTED"]
        );
        assert_eq!(
            names(Error::is_permission),
            ["RSMERR_SEG_NOT_PUBLISHED_TO_NODE", "RSMERR_PERM_DENIED"]
        );
    }

    #[test]
    fn error_is_small_and_send_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Error>();
        assert!(std::mem::size_of::<Error>() <= 16);
    }
}
