//! # ptovm-vm
//!
//! The PTOW bytecode format, its verifier and its interpreter: the one source of truth for
//! opcodes, record layouts, limits, the checks every program passes before anything runs it
//! (`verify`), the runtime-parameter block (`params`) and the values planned from it at launch
//! (`planning`), per-AICPU task expansion (`interp`);
//! and the schedulers' pieces that the simulator and the device share: the fixed-capacity
//! TensorMap (`tmap`), the lock-free successor lists and fanin counts (`waitlist`), the ready
//! queues (`ring`), the AICore handshake slots (`handshake`) and the task descriptors the
//! cores read (`desc`).
//!
//! `#![no_std]` with no allocator: it builds for `aarch64-unknown-none` and runs on the AICPU.
//! No `unsafe` code but the spin lock's (`spin`, over the cell of `sync`).
//!
//! ```
//! use ptovm_vm::{verify, ErrorKind};
//! let err = verify(b"not a program").unwrap_err();
//! assert!(matches!(err.kind, ErrorKind::TooShort { len: 13 }));
//! ```
#![no_std]
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod cost;
pub mod deque;
pub mod desc;
pub mod error;
pub mod format;
pub mod handshake;
pub mod interp;
pub mod opcodes;
pub mod params;
pub mod planning;
pub mod readback;
pub mod ring;
pub mod sched;
pub mod share;
#[allow(unsafe_code)]
pub mod spin;
#[allow(unsafe_code)]
pub mod sync;
pub mod tmap;
pub mod verify;
pub mod waitlist;

pub use error::{ErrorKind, ExprProblem, Location, VerifyError};
pub use format::{limits, Layout, Record, Section, MAGIC, VERSION};
pub use interp::{Interpreter, Io, LaunchError, RunError, Sink, Stats, Status, Task, WorkBound};
pub use opcodes::{
    DType, Dir, ExprKind, ExprOp, Field, InfoKind, Level, OpClass, Opcode, ParamKind, Policy, Pool,
    ReadyPolicy, Slot, StartPolicy, Timing, WindowMode,
};
pub use params::{ParamError, RuntimeParams, Value};
pub use planning::{ExprError, PlanProblem, Planned};
pub use verify::{verify, ParamDefault, Verified};
