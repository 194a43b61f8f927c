//! Remote atomics without I/O (DESIGN.md §13): the operations, the operand types, which
//! combinations exist, and the reference model of what each does to a value. The CPU path
//! (`sys/atomic_mem.rs`), the exporter serving a peer, and the tests all follow this model.
//!
//! The operation codes are libfabric's `fi_op` numbers and the type codes its `fi_datatype`
//! numbers (the fabric backend checks they agree), so one code names an operation on the
//! wire, in the native table and in a post.

/// An update applied to one value of a segment: by itself (`ImportSegment::atomic`, no
/// result) or fetching the previous value (`ImportSegment::fetch_atomic`).
///
/// ```
/// use rsm::AtomicOp;
/// assert_eq!(AtomicOp::Sum.name(), "sum");
/// assert!(AtomicOp::BitXor.valid_for_floats() == false);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AtomicOp {
    /// `*addr = min(*addr, operand)`.
    Min,
    /// `*addr = max(*addr, operand)`.
    Max,
    /// `*addr += operand` (wrapping for integers).
    Sum,
    /// `*addr *= operand` (wrapping for integers).
    Prod,
    /// `*addr = (*addr != 0) || (operand != 0)`, as 1 or 0.
    LogicalOr,
    /// `*addr = (*addr != 0) && (operand != 0)`, as 1 or 0.
    LogicalAnd,
    /// `*addr |= operand` (integers only).
    BitOr,
    /// `*addr &= operand` (integers only).
    BitAnd,
    /// `*addr = (*addr != 0) != (operand != 0)`, as 1 or 0.
    LogicalXor,
    /// `*addr ^= operand` (integers only).
    BitXor,
    /// Reads the value, changes nothing (fetching only: its operand is ignored).
    Read,
    /// `*addr = operand`.
    Write,
}

/// A conditional swap (`ImportSegment::compare_atomic`): the value becomes the operand when
/// the condition between `compare` and the value holds (masked swap: the bits of `compare`
/// choose which bits come from the operand); the previous value comes back either way.
///
/// ```
/// use rsm::CompareOp;
/// assert_eq!(CompareOp::Eq.name(), "cswap");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CompareOp {
    /// Swap when `compare == *addr` (compare-and-swap).
    Eq,
    /// Swap when `compare != *addr`.
    Ne,
    /// Swap when `compare <= *addr`.
    Le,
    /// Swap when `compare < *addr`.
    Lt,
    /// Swap when `compare >= *addr`.
    Ge,
    /// Swap when `compare > *addr`.
    Gt,
    /// `*addr = (operand & compare) | (*addr & !compare)` (integers only).
    Masked,
}

/// Which libfabric call an operation is: `fi_atomic`, `fi_fetch_atomic`, `fi_compare_atomic`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// No result (`fi_atomic`).
    Update = 0,
    /// The previous value comes back (`fi_fetch_atomic`).
    Fetch = 1,
    /// A conditional swap with a compare operand (`fi_compare_atomic`).
    Compare = 2,
}

impl Class {
    /// Every class, in code order.
    pub const ALL: [Class; 3] = [Class::Update, Class::Fetch, Class::Compare];

    /// The class of wire code `code`.
    pub fn from_code(code: u8) -> Option<Class> {
        Class::ALL.get(usize::from(code)).copied()
    }

    /// Its name, as `rsm info` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Class::Update => "atomic",
            Class::Fetch => "fetch",
            Class::Compare => "compare",
        }
    }
}

/// An operand type (libfabric's `fi_datatype` numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Datatype {
    /// `i8`
    I8 = 0,
    /// `u8`
    U8 = 1,
    /// `i16`
    I16 = 2,
    /// `u16`
    U16 = 3,
    /// `i32`
    I32 = 4,
    /// `u32`
    U32 = 5,
    /// `i64`
    I64 = 6,
    /// `u64`
    U64 = 7,
    /// `f32`
    F32 = 8,
    /// `f64`
    F64 = 9,
}

impl Datatype {
    /// Every type, in code order.
    pub const ALL: [Datatype; 10] = [
        Datatype::I8,
        Datatype::U8,
        Datatype::I16,
        Datatype::U16,
        Datatype::I32,
        Datatype::U32,
        Datatype::I64,
        Datatype::U64,
        Datatype::F32,
        Datatype::F64,
    ];

    /// The type of code `code`.
    pub fn from_code(code: u8) -> Option<Datatype> {
        Datatype::ALL.get(usize::from(code)).copied()
    }

    /// Its size in bytes (also the alignment an offset needs).
    pub fn size(self) -> usize {
        match self {
            Datatype::I8 | Datatype::U8 => 1,
            Datatype::I16 | Datatype::U16 => 2,
            Datatype::I32 | Datatype::U32 | Datatype::F32 => 4,
            Datatype::I64 | Datatype::U64 | Datatype::F64 => 8,
        }
    }

    /// Whether it is `f32` or `f64`.
    pub fn is_float(self) -> bool {
        matches!(self, Datatype::F32 | Datatype::F64)
    }

    /// Its Rust name.
    pub fn name(self) -> &'static str {
        [
            "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f32", "f64",
        ][self as usize]
    }
}

impl AtomicOp {
    /// Every update, in code order.
    pub const ALL: [AtomicOp; 12] = [
        AtomicOp::Min,
        AtomicOp::Max,
        AtomicOp::Sum,
        AtomicOp::Prod,
        AtomicOp::LogicalOr,
        AtomicOp::LogicalAnd,
        AtomicOp::BitOr,
        AtomicOp::BitAnd,
        AtomicOp::LogicalXor,
        AtomicOp::BitXor,
        AtomicOp::Read,
        AtomicOp::Write,
    ];

    /// Its code (libfabric's `fi_op`).
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Its name (`sum`, `band`, ...).
    pub fn name(self) -> &'static str {
        op_name(self.code())
    }

    /// Whether it applies to `f32` and `f64` (the bitwise ones do not).
    pub fn valid_for_floats(self) -> bool {
        !matches!(self, AtomicOp::BitOr | AtomicOp::BitAnd | AtomicOp::BitXor)
    }
}

impl CompareOp {
    /// Every compare operation, in code order.
    pub const ALL: [CompareOp; 7] = [
        CompareOp::Eq,
        CompareOp::Ne,
        CompareOp::Le,
        CompareOp::Lt,
        CompareOp::Ge,
        CompareOp::Gt,
        CompareOp::Masked,
    ];

    /// Its code (libfabric's `fi_op`: `FI_CSWAP` is 12).
    pub fn code(self) -> u8 {
        12 + self as u8
    }

    /// Its name (`cswap`, `cswap_ne`, ..., `mswap`).
    pub fn name(self) -> &'static str {
        op_name(self.code())
    }
}

/// The number of operation codes (`FI_ATOMIC_OP_LAST`).
pub const OPS: usize = 19;

/// The name of operation code `code`.
pub fn op_name(code: u8) -> &'static str {
    const NAMES: [&str; OPS] = [
        "min", "max", "sum", "prod", "lor", "land", "bor", "band", "lxor", "bxor", "read", "write",
        "cswap", "cswap_ne", "cswap_le", "cswap_lt", "cswap_ge", "cswap_gt", "mswap",
    ];
    NAMES.get(usize::from(code)).copied().unwrap_or("unknown")
}

/// Whether `rsm` offers operation `op` of `class` on `dt`: updates (codes 0-11) as updates
/// (not `read`) and fetching, compares (12-18) as compares; no bitwise operation and no
/// masked swap on floats.
#[inline]
pub fn offered(class: Class, op: u8, dt: Datatype) -> bool {
    let float_ok = !matches!(op, 6 | 7 | 9 | 18);
    if dt.is_float() && !float_ok {
        return false;
    }
    match class {
        Class::Update => op < 12 && op != 10,
        Class::Fetch => op < 12,
        Class::Compare => (12..19).contains(&op),
    }
}

/// One operation, decoded and checked: what a request from a peer must become before the
/// exporter performs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Call {
    /// Which call.
    pub class: Class,
    /// The operation code.
    pub op: u8,
    /// The operand type.
    pub datatype: Datatype,
}

impl Call {
    /// The call of `class`, `op`, `datatype` codes, if `rsm` offers it (bytes from a peer).
    pub fn decode(class: u8, op: u8, datatype: u8) -> Option<Call> {
        let class = Class::from_code(class)?;
        let datatype = Datatype::from_code(datatype)?;
        offered(class, op, datatype).then_some(Call {
            class,
            op,
            datatype,
        })
    }
}

/// A value of one [`Datatype`] as the low bits of a `u64` (floats as their bits).
macro_rules! via {
    ($dt:expr, $bits:expr, |$v:ident: $t:ident| $body:expr) => {{
        match $dt {
            Datatype::I8 => {
                type $t = i8;
                let $v = $bits as u8 as i8;
                ($body) as u8 as u64
            }
            Datatype::U8 => {
                type $t = u8;
                let $v = $bits as u8;
                ($body) as u64
            }
            Datatype::I16 => {
                type $t = i16;
                let $v = $bits as u16 as i16;
                ($body) as u16 as u64
            }
            Datatype::U16 => {
                type $t = u16;
                let $v = $bits as u16;
                ($body) as u64
            }
            Datatype::I32 => {
                type $t = i32;
                let $v = $bits as u32 as i32;
                ($body) as u32 as u64
            }
            Datatype::U32 => {
                type $t = u32;
                let $v = $bits as u32;
                ($body) as u64
            }
            Datatype::I64 => {
                type $t = i64;
                let $v = $bits as i64;
                ($body) as u64
            }
            Datatype::U64 => {
                type $t = u64;
                let $v = $bits;
                $body
            }
            Datatype::F32 => {
                type $t = f32;
                let $v = f32::from_bits($bits as u32);
                ($body).to_bits() as u64
            }
            Datatype::F64 => {
                type $t = f64;
                let $v = f64::from_bits($bits);
                ($body).to_bits()
            }
        }
    }};
}

/// Arithmetic that is the same for every operand type.
trait Num: Copy + PartialOrd {
    const ZERO: Self;
    const ONE: Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn bits(self, o: Self, f: fn(u64, u64) -> u64) -> Self;
}

macro_rules! int_num {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn bits(self, o: Self, f: fn(u64, u64) -> u64) -> Self {
                f(self as u64, o as u64) as $t
            }
        }
    )*};
}
int_num!(i8, u8, i16, u16, i32, u32, i64, u64);

macro_rules! float_num {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn add(self, o: Self) -> Self { self + o }
            fn mul(self, o: Self) -> Self { self * o }
            // Never reached: `offered` keeps bitwise operations off floats.
            fn bits(self, _: Self, _: fn(u64, u64) -> u64) -> Self { self }
        }
    )*};
}
float_num!(f32, f64);

fn truth<T: Num>(b: bool) -> T {
    if b { T::ONE } else { T::ZERO }
}

fn update<T: Num>(op: u8, old: T, x: T, cmp: T) -> T {
    let nz = |v: T| v != T::ZERO;
    match op {
        0 => {
            if x < old {
                x
            } else {
                old
            }
        }
        1 => {
            if x > old {
                x
            } else {
                old
            }
        }
        2 => old.add(x),
        3 => old.mul(x),
        4 => truth(nz(old) || nz(x)),
        5 => truth(nz(old) && nz(x)),
        6 => old.bits(x, |a, b| a | b),
        7 => old.bits(x, |a, b| a & b),
        8 => truth(nz(old) != nz(x)),
        9 => old.bits(x, |a, b| a ^ b),
        11 => x,
        12 if cmp == old => x,
        13 if cmp != old => x,
        14 if cmp <= old => x,
        15 if cmp < old => x,
        16 if cmp >= old => x,
        17 if cmp > old => x,
        // Read, a compare whose condition fails, the masked swap (`apply` does it on the
        // bits), an unknown code: unchanged.
        _ => old,
    }
}

/// The value after operation `op` on `dt` (all as bits in the low bytes): the reference
/// model every path follows. The masked swap is computed on the bits directly.
pub fn apply(dt: Datatype, op: u8, old: u64, operand: u64, compare: u64) -> u64 {
    if op == 18 {
        let mask = if dt.size() == 8 {
            u64::MAX
        } else {
            (1u64 << (8 * dt.size())) - 1
        };
        return ((operand & compare) | (old & !compare)) & mask;
    }
    via!(dt, old, |o: T| {
        let x = via_value::<T>(dt, operand);
        let c = via_value::<T>(dt, compare);
        update::<T>(op, o, x, c)
    })
}

/// The value of type `T` (which is `dt`'s) in the low bits of `bits`.
fn via_value<T: FromBits>(dt: Datatype, bits: u64) -> T {
    debug_assert_eq!(std::mem::size_of::<T>(), dt.size());
    T::from_bits(bits)
}

trait FromBits {
    fn from_bits(bits: u64) -> Self;
}

macro_rules! from_bits_int {
    ($($t:ty => $u:ty),*) => {$(
        impl FromBits for $t {
            #[inline(always)]
            fn from_bits(bits: u64) -> Self { bits as $u as $t }
        }
    )*};
}
from_bits_int!(i8 => u8, u8 => u8, i16 => u16, u16 => u16, i32 => u32, u32 => u32, i64 => u64, u64 => u64);

impl FromBits for f32 {
    #[inline(always)]
    fn from_bits(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
}

impl FromBits for f64 {
    #[inline(always)]
    fn from_bits(bits: u64) -> Self {
        f64::from_bits(bits)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A type remote atomics operate on: `i8`..`i64`, `u8`..`u64`, `f32`, `f64`. Sealed.
///
/// ```
/// use rsm::AtomicValue;
/// assert_eq!(<u64 as AtomicValue>::SIZE, 8);
/// assert_eq!(7u32.to_bits(), 7);
/// ```
pub trait AtomicValue: sealed::Sealed + Copy + Send + Sync + std::fmt::Debug + 'static {
    /// Its size in bytes, the alignment its offsets need.
    const SIZE: usize;
    /// Its type code.
    #[doc(hidden)]
    const DATATYPE: Datatype;
    /// The value's bits in the low bytes of a `u64`.
    fn to_bits(self) -> u64;
    /// The value in the low bytes of `bits`.
    fn from_bits(bits: u64) -> Self;
}

macro_rules! value {
    ($($t:ty => $u:ty, $dt:ident, $to:expr);*) => {$(
        impl sealed::Sealed for $t {}
        impl AtomicValue for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            const DATATYPE: Datatype = Datatype::$dt;
            #[inline(always)]
            fn to_bits(self) -> u64 {
                let to: fn($t) -> u64 = $to;
                to(self)
            }
            #[inline(always)]
            fn from_bits(bits: u64) -> Self {
                <$t as FromBits>::from_bits(bits)
            }
        }
    )*};
}
value!(i8 => u8, I8, |v| v as u8 as u64; u8 => u8, U8, |v| v as u64;
    i16 => u16, I16, |v| v as u16 as u64; u16 => u16, U16, |v| v as u64;
    i32 => u32, I32, |v| v as u32 as u64; u32 => u32, U32, |v| v as u64;
    i64 => u64, I64, |v| v as u64; u64 => u64, U64, |v| v;
    f32 => u32, F32, |v| v.to_bits() as u64; f64 => u64, F64, |v| v.to_bits());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_line_up() {
        for (i, op) in AtomicOp::ALL.iter().enumerate() {
            assert_eq!(op.code() as usize, i);
        }
        assert_eq!(CompareOp::Masked.code(), 18);
        assert_eq!(CompareOp::Masked.name(), "mswap");
        assert_eq!(op_name(200), "unknown");
        assert_eq!(Class::from_code(3), None);
        assert_eq!(Datatype::from_code(10), None);
    }

    #[test]
    fn the_model_on_a_few_values() {
        let u = Datatype::U64;
        assert_eq!(apply(u, 2, 5, 3, 0), 8);
        assert_eq!(apply(u, 2, u64::MAX, 1, 0), 0);
        assert_eq!(apply(Datatype::I8, 0, 5, 0xfd, 0), 0xfd);
        assert_eq!(apply(Datatype::U8, 0, 5, 0xfd, 0), 5);
        assert_eq!(apply(u, 12, 5, 9, 5), 9);
        assert_eq!(apply(u, 12, 5, 9, 4), 5);
        assert_eq!(apply(u, 14, 5, 9, 4), 9); // 4 <= 5
        assert_eq!(apply(u, 17, 5, 9, 4), 5); // 4 > 5 fails
        assert_eq!(apply(Datatype::U16, 18, 0xff00, 0x0ff0, 0x00ff), 0xfff0);
        assert_eq!(
            apply(Datatype::F64, 2, 1.5f64.to_bits(), 2.0f64.to_bits(), 0),
            3.5f64.to_bits()
        );
        assert_eq!(
            apply(
                Datatype::F32,
                8,
                0f32.to_bits().into(),
                2f32.to_bits().into(),
                0
            ),
            u64::from(1f32.to_bits())
        );
        assert_eq!(apply(u, 10, 5, 9, 0), 5);
    }

    #[test]
    fn offered_combinations() {
        assert!(offered(Class::Update, 2, Datatype::F32));
        assert!(!offered(Class::Update, 10, Datatype::U8));
        assert!(offered(Class::Fetch, 10, Datatype::U8));
        assert!(!offered(Class::Fetch, 6, Datatype::F64));
        assert!(!offered(Class::Compare, 18, Datatype::F64));
        assert!(offered(Class::Compare, 17, Datatype::F64));
        assert!(!offered(Class::Compare, 2, Datatype::U64));
        assert!(Call::decode(1, 2, 7).is_some());
        assert!(Call::decode(9, 2, 7).is_none() && Call::decode(1, 2, 77).is_none());
    }

    #[test]
    fn values_round_trip_their_bits() {
        assert_eq!(AtomicValue::to_bits(-1i8), 0xff);
        assert_eq!(<i8 as AtomicValue>::from_bits(0xff), -1);
        assert_eq!(AtomicValue::to_bits(-2i32), 0xffff_fffe);
        assert_eq!(
            <f32 as AtomicValue>::from_bits(1.5f32.to_bits().into()),
            1.5
        );
        assert_eq!(<f64 as AtomicValue>::from_bits(2.5f64.to_bits()), 2.5);
    }
}
