//! The owned, host-side form of a PTOW program: what the `.pto` lowering and the listing parser
//! build, what the encoder writes and what the decoder reads back. It holds the vm crate's record
//! types directly, so the layout is defined once (in `ptovm_vm::format`).

use ptovm_vm::format::{
    padded_strtab, seal, sizes, Config, Header, KernelEntry, ModuleInfoEntry, ParamEntry,
    PlanEntry, PolicySpec, RegionDim, TensorEntry, MAGIC, NONE16, PARAM_HAS_DEFAULT, VERSION,
};
use ptovm_vm::{InfoKind, ParamDefault, ParamKind, Policy, Record, Verified};
use zerocopy::little_endian::{U16, U32};
use zerocopy::IntoBytes;

/// A kernel: its name and table entry (the entry's name fields are set by the encoder).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// Name.
    pub name: String,
    /// Table entry.
    pub entry: KernelEntry,
}

/// A tensor: name and table entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    /// Name.
    pub name: String,
    /// Table entry.
    pub entry: TensorEntry,
}

/// A runtime-parameter slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// Name (`--param NAME=...`).
    pub name: String,
    /// Scalar or array.
    pub kind: ParamKind,
    /// Its default value (one value for a scalar), used when a launch gives none.
    pub default: Option<Vec<u32>>,
}

/// A planned value (`@plan`): runtime slot `params.len() + i` for plan `i`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Name (read in expressions like a runtime scalar).
    pub name: String,
    /// The expression pool index of its expression.
    pub expr: u16,
}

/// A whole program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// Workload name.
    pub workload: String,
    /// Schedule name.
    pub schedule: String,
    /// The module header (PTO-WSP's `module`, `version` and `target` lines), in file order.
    pub info: Vec<(InfoKind, String)>,
    /// Configuration section (its name fields are set by the encoder).
    pub config: Config,
    /// Code section; ends with `HALT`.
    pub code: Vec<Record>,
    /// Axis section.
    pub axes: Vec<Record>,
    /// Kernel table.
    pub kernels: Vec<Kernel>,
    /// Tensor table.
    pub tensors: Vec<Tensor>,
    /// Runtime-parameter slots.
    pub params: Vec<Param>,
    /// Planned values, computed at launch in this order.
    pub plans: Vec<Plan>,
    /// Expression pool.
    pub exprs: Vec<Record>,
    /// Region table.
    pub regions: Vec<RegionDim>,
}

/// The configuration a module gets when its source says nothing: round robin over 6 AICPUs
/// (the 910B runtime's usable AICPU threads), one stream, immediate timing, FIFO ready queues,
/// immediate start, a 1024-task stalling window.
pub fn default_config() -> Config {
    Config {
        num_aicpus: U16::new(6),
        policy: PolicySpec {
            kind: Policy::RoundRobin as u8,
            depth: 0,
            key: U16::new(NONE16),
        },
        selector: U16::new(NONE16),
        streams: U16::new(1),
        window: U32::new(1024),
        ..Config::default()
    }
}

impl Module {
    /// An empty program (just `HALT`) with the default configuration.
    pub fn new(workload: &str, schedule: &str) -> Module {
        Module {
            workload: workload.to_string(),
            schedule: schedule.to_string(),
            info: vec![],
            config: default_config(),
            code: vec![Record::new(ptovm_vm::Opcode::HALT as u8, 0, 0, 0)],
            axes: vec![],
            kernels: vec![],
            tensors: vec![],
            params: vec![],
            plans: vec![],
            exprs: vec![],
            regions: vec![],
        }
    }

    /// Encodes to PTOW bytes: canonical string table, header counts, length and checksum.
    /// Counts beyond a u32 are impossible for in-memory vectors of this size; the verifier checks
    /// the limits of the spec.
    pub fn encode(&self) -> Vec<u8> {
        let mut strtab: Vec<u8> = Vec::new();
        let mut name = |s: &str| -> (u32, u16) {
            let off = strtab.len() as u32;
            strtab.extend_from_slice(s.as_bytes());
            (off, s.len() as u16)
        };
        let mut config = self.config;
        let (o, l) = name(&self.workload);
        config.workload_name_off = U32::new(o);
        config.workload_name_len = U16::new(l);
        let (o, l) = name(&self.schedule);
        config.schedule_name_off = U32::new(o);
        config.schedule_name_len = U16::new(l);
        let info: Vec<ModuleInfoEntry> = self
            .info
            .iter()
            .map(|(kind, text)| {
                let (o, l) = name(text);
                ModuleInfoEntry {
                    text_off: U32::new(o),
                    text_len: U16::new(l),
                    kind: *kind as u8,
                    reserved: 0,
                }
            })
            .collect();
        let mut defaults: Vec<U32> = Vec::new();
        let params: Vec<ParamEntry> = self
            .params
            .iter()
            .map(|p| {
                let (o, l) = name(&p.name);
                let start = defaults.len() as u32;
                let d = p.default.as_deref().unwrap_or(&[]);
                defaults.extend(d.iter().map(|&x| U32::new(x)));
                ParamEntry {
                    name_off: U32::new(o),
                    name_len: U16::new(l),
                    kind: p.kind as u8,
                    flags: if p.default.is_some() {
                        PARAM_HAS_DEFAULT
                    } else {
                        0
                    },
                    default_start: U32::new(start),
                    default_len: U32::new(d.len() as u32),
                }
            })
            .collect();
        let plans: Vec<PlanEntry> = self
            .plans
            .iter()
            .map(|p| {
                let (o, l) = name(&p.name);
                PlanEntry {
                    name_off: U32::new(o),
                    name_len: U16::new(l),
                    expr: U16::new(p.expr),
                }
            })
            .collect();
        let tensors: Vec<TensorEntry> = self
            .tensors
            .iter()
            .map(|t| {
                let (o, l) = name(&t.name);
                TensorEntry {
                    name_off: U32::new(o),
                    name_len: U16::new(l),
                    ..t.entry
                }
            })
            .collect();
        let kernels: Vec<KernelEntry> = self
            .kernels
            .iter()
            .map(|k| {
                let (o, l) = name(&k.name);
                KernelEntry {
                    name_off: U32::new(o),
                    name_len: U16::new(l),
                    ..k.entry
                }
            })
            .collect();
        let header = Header {
            magic: U32::new(MAGIC),
            version: U32::new(VERSION),
            num_instructions: U32::new(self.code.len() as u32),
            num_axes: U32::new(self.axes.len() as u32),
            num_kernels: U32::new(kernels.len() as u32),
            num_tensors: U32::new(tensors.len() as u32),
            total_len: U32::new(0),
            checksum: U32::new(0),
            num_exprs: U32::new(self.exprs.len() as u32),
            num_regions: U32::new(self.regions.len() as u32),
            num_params: U32::new(params.len() as u32),
            num_defaults: U32::new(defaults.len() as u32),
            num_module_info: U32::new(info.len() as u32),
            num_plans: U32::new(plans.len() as u32),
            strtab_len: U32::new(strtab.len() as u32),
            ..Header::default()
        };
        let mut out = Vec::with_capacity(
            sizes::HEADER + sizes::CONFIG + 8 * self.code.len() + strtab.len() + 64,
        );
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(config.as_bytes());
        out.extend_from_slice(self.code.as_bytes());
        out.extend_from_slice(self.axes.as_bytes());
        out.extend_from_slice(kernels.as_bytes());
        out.extend_from_slice(tensors.as_bytes());
        out.extend_from_slice(params.as_bytes());
        out.extend_from_slice(defaults.as_bytes());
        out.extend_from_slice(info.as_bytes());
        out.extend_from_slice(plans.as_bytes());
        out.extend_from_slice(self.exprs.as_bytes());
        out.extend_from_slice(self.regions.as_bytes());
        let slen = strtab.len();
        out.extend_from_slice(&strtab);
        out.resize(out.len() + padded_strtab(slen) - slen, 0);
        seal(&mut out);
        out
    }

    /// Reads a verified program back into owned form. `decode(verify(encode(m))) == m` for every
    /// module whose name fields are canonical (as the encoder writes them).
    pub fn decode(v: &Verified<'_>) -> Module {
        let mut config = *v.config();
        config.workload_name_off = U32::new(0);
        config.workload_name_len = U16::new(0);
        config.schedule_name_off = U32::new(0);
        config.schedule_name_len = U16::new(0);
        let clear_k = |e: &KernelEntry| KernelEntry {
            name_off: U32::new(0),
            name_len: U16::new(0),
            ..*e
        };
        let clear_t = |e: &TensorEntry| TensorEntry {
            name_off: U32::new(0),
            name_len: U16::new(0),
            ..*e
        };
        Module {
            workload: v.workload_name().to_string(),
            schedule: v.schedule_name().to_string(),
            info: v
                .module_info()
                .iter()
                .map(|e| {
                    (
                        InfoKind::from_u8(e.kind).unwrap_or(InfoKind::Target),
                        v.info_text(e).to_string(),
                    )
                })
                .collect(),
            config,
            code: v.code().to_vec(),
            axes: v.axes().to_vec(),
            kernels: v
                .kernels()
                .iter()
                .map(|k| Kernel {
                    name: v
                        .name(k.name_off.get(), k.name_len.get() as u32)
                        .to_string(),
                    entry: clear_k(k),
                })
                .collect(),
            tensors: v
                .tensors()
                .iter()
                .map(|t| Tensor {
                    name: v
                        .name(t.name_off.get(), t.name_len.get() as u32)
                        .to_string(),
                    entry: clear_t(t),
                })
                .collect(),
            params: v
                .params()
                .iter()
                .enumerate()
                .map(|(slot, p)| Param {
                    name: v
                        .name(p.name_off.get(), p.name_len.get() as u32)
                        .to_string(),
                    kind: ParamKind::from_u8(p.kind).unwrap_or(ParamKind::Scalar),
                    default: v.param_default(slot).map(|d| match d {
                        ParamDefault::Scalar(x) => vec![x],
                        ParamDefault::Array(a) => a.iter().map(|x| x.get()).collect(),
                    }),
                })
                .collect(),
            plans: v
                .plans()
                .iter()
                .map(|p| Plan {
                    name: v
                        .name(p.name_off.get(), p.name_len.get() as u32)
                        .to_string(),
                    expr: p.expr.get(),
                })
                .collect(),
            exprs: v.exprs().to_vec(),
            regions: v.regions().to_vec(),
        }
    }
}
