//! `ptovm inspect`: a readable (or JSON) account of a verified PTOW file.

use ptovm_assembler::listing::{
    default_text, layout_text, render_axis, render_expr, render_policy,
};
use ptovm_assembler::Module;
use ptovm_vm::format::{DIM_IS_SLOT, KERNEL_UNDECLARED, TENSOR_IMPLICIT, TENSOR_STREAM};
use ptovm_vm::{
    DType, Dir, InfoKind, Policy, Pool, ReadyPolicy, Section, StartPolicy, Timing, Verified,
    WindowMode,
};
use serde_json::{json, Value};

fn dims(m: &Module, t: &ptovm_assembler::model::Tensor) -> Vec<String> {
    t.entry.dims[..t.entry.rank as usize]
        .iter()
        .map(|d| {
            let d = d.get();
            if d & DIM_IS_SLOT != 0 {
                m.params
                    .get((d & 0xFFFF) as usize)
                    .map_or_else(|| format!("${}", d & 0xFFFF), |p| p.name.clone())
            } else {
                d.to_string()
            }
        })
        .collect()
}

fn dirs(k: &ptovm_assembler::model::Kernel) -> Vec<&'static str> {
    (0..k.entry.num_args as u32)
        .map(|a| {
            Dir::from_u8(((k.entry.arg_dirs.get() >> (2 * a)) & 3) as u8).map_or("?", |d| d.name())
        })
        .collect()
}

fn dispatch(m: &Module) -> String {
    let c = &m.config;
    if c.policy.kind == Policy::Threshold as u8 {
        let mut s = format!("threshold on {}:", render_expr(m, c.selector.get()));
        for i in 0..c.num_levels as usize {
            let t = c.thresholds[i].get();
            let bound = if t == u32::MAX {
                "otherwise".to_string()
            } else {
                format!("<= {t}")
            };
            s += &format!(" [{bound}: {}]", render_policy(m, &c.levels[i]));
        }
        s
    } else {
        render_policy(m, &c.policy)
    }
}

fn name<T>(v: Option<T>, f: impl Fn(T) -> &'static str) -> &'static str {
    v.map_or("?", f)
}

/// The module header's entries of one kind.
fn info(m: &Module, kind: InfoKind) -> Vec<&str> {
    m.info
        .iter()
        .filter(|(k, _)| *k == kind)
        .map(|(_, t)| t.as_str())
        .collect()
}

/// Text report.
pub fn text(v: &Verified<'_>) -> String {
    let m = Module::decode(v);
    let h = v.header();
    let c = &m.config;
    let mut o = String::new();
    o += &format!(
        "PTOW version {}, {} bytes, checksum 0x{:08X} (verified)\n",
        h.version.get(),
        h.total_len.get(),
        h.checksum.get()
    );
    o += &format!(
        "workload {} [{}]   schedule {} [{}]\n",
        m.workload,
        v.workload_level().name(),
        m.schedule,
        v.schedule_level().name()
    );
    if !m.info.is_empty() {
        let show = |k| {
            let t = info(&m, k);
            if t.is_empty() {
                "-".to_string()
            } else {
                t.iter()
                    .map(|t| format!("\"{t}\""))
                    .collect::<Vec<_>>()
                    .join(" | ")
            }
        };
        o += &format!(
            "module {}   version {}   target {}\n",
            show(InfoKind::Module),
            show(InfoKind::Version),
            show(InfoKind::Target)
        );
    }
    o += "\n";
    o += "sections:\n";
    for s in Section::ALL {
        let (off, len) = v.layout().range(s);
        o += &format!("  {:<11} offset {:>7}  size {:>7}\n", s.name(), off, len);
    }
    o += "\ndispatch:\n";
    o += &format!(
        "  aicpus {}   policy {}\n",
        c.num_aicpus.get(),
        dispatch(&m)
    );
    o += &format!(
        "  streams {}{}  timing {}{}  ready {}  start {}{}\n  window {} ({})  pipeline_depth {}  batch_deps {}  cores {}\n",
        c.streams.get(),
        match stream_by(&m) {
            Some(k) => format!(" (stream of a task: {k}; each stream in program order)"),
            None => String::new(),
        },
        name(Timing::from_u8(c.timing), |t| t.name()),
        if c.timing_arg.get() != 0 { format!("({})", c.timing_arg.get()) } else { String::new() },
        name(ReadyPolicy::from_u8(c.ready), |t| t.name()),
        name(StartPolicy::from_u8(c.start), |t| t.name()),
        if c.start_threshold.get() != 0 { format!("({})", c.start_threshold.get()) } else { String::new() },
        c.window.get(),
        name(WindowMode::from_u8(c.window_mode), |t| t.name()),
        c.pipeline_depth.get(),
        c.batch_deps.get(),
        name(ptovm_vm::sched::CoreAlloc::from_u8(c.cores), |a| match a {
            ptovm_vm::sched::CoreAlloc::Shared => "shared",
            ptovm_vm::sched::CoreAlloc::Partition => "partition",
        }),
    );
    o += &format!("\nruntime parameters ({}):\n", m.params.len());
    for (i, p) in m.params.iter().enumerate() {
        match &p.default {
            Some(d) => {
                o += &format!(
                    "  {i:>3}  {} ({}) default {}\n",
                    p.name,
                    p.kind.name(),
                    default_text(p.kind, d)
                )
            }
            None => o += &format!("  {i:>3}  {} ({}) no default\n", p.name, p.kind.name()),
        }
    }
    if !m.plans.is_empty() {
        o += &format!(
            "\nplanned values ({}, computed at launch):\n",
            m.plans.len()
        );
        for (i, p) in m.plans.iter().enumerate() {
            let slot = m.params.len() + i;
            o += &format!("  {slot:>3}  {} = {}\n", p.name, render_expr(&m, p.expr));
        }
    }
    let readbacks: Vec<_> = m
        .code
        .iter()
        .filter(|r| r.opcode == ptovm_vm::Opcode::READBACK as u8)
        .collect();
    if !readbacks.is_empty() {
        o += &format!(
            "\nread back while running ({}, `wait`: every AICPU waits for every earlier task, then reads the tensor into the runtime array):\n",
            readbacks.len()
        );
        for r in readbacks {
            let tensor = m.tensors.get(r.op1() as usize).map_or("?", |t| &t.name);
            let slot = (r.op2() & 0xFFFF) as usize;
            let array = m.params.get(slot).map_or("?", |p| &p.name);
            o += &format!(
                "  {tensor} -> runtime array {slot} ({array}), each element <= {}\n",
                render_expr(&m, (r.op2() >> 16) as u16)
            );
        }
    }
    o += &format!("\ntensors ({}):\n", m.tensors.len());
    for (i, t) in m.tensors.iter().enumerate() {
        let layout = match layout_text(t.entry.layout.get()) {
            l if l.is_empty() => l,
            l => format!("  layout {l}"),
        };
        if t.entry.flags.get() & TENSOR_IMPLICIT != 0 {
            o += &format!("  {i:>3}  {} (undeclared: shape unknown){layout}\n", t.name);
        } else if t.entry.flags.get() & TENSOR_STREAM != 0 {
            o += &format!(
                "  {i:>3}  {} (stream order of `stream_by`: {} streams, no memory)\n",
                t.name, t.entry.dims[0]
            );
        } else {
            o += &format!(
                "  {i:>3}  {}: {}[{}]{layout}\n",
                t.name,
                name(DType::from_u8(t.entry.dtype), |d| d.name()),
                dims(&m, t).join(", ")
            );
        }
    }
    o += &format!("\nkernels ({}):\n", m.kernels.len());
    for (i, k) in m.kernels.iter().enumerate() {
        let pool = name(Pool::from_u8(k.entry.pool), |p| p.name());
        if k.entry.flags & KERNEL_UNDECLARED != 0 {
            o += &format!(
                "  {i:>3}  {} on {pool} (undeclared: every resource read-write)\n",
                k.name
            );
        } else {
            o += &format!(
                "  {i:>3}  {} on {pool}, {} param(s), args ({}){}{}{}\n",
                k.name,
                k.entry.num_params,
                dirs(k).join(", "),
                match workspace(k) {
                    0 => String::new(),
                    n => format!("; workspace {n} bytes"),
                },
                cost(&m, k).map_or(String::new(), |c| format!("; cost {c}")),
                match k.entry.core_limit.get() {
                    0 => String::new(),
                    n => format!("; at most {n} running at once"),
                }
            );
        }
    }
    o += &format!("\naxes ({}):\n", m.axes.len());
    for (i, _) in m.axes.iter().enumerate() {
        o += &format!("  {i:>3}  {}\n", render_axis(&m, i as u16));
    }
    o += &format!(
        "\ncode: {} instructions, {} task sites, loops nested {} deep; {} expression nodes, {} region dimensions\n",
        m.code.len(),
        v.task_sites(),
        v.max_loop_depth(),
        m.exprs.len(),
        m.regions.len()
    );
    o
}

/// JSON report.
pub fn json(v: &Verified<'_>) -> String {
    let m = Module::decode(v);
    let h = v.header();
    let c = &m.config;
    let sections: Vec<Value> = Section::ALL
        .iter()
        .map(|s| {
            let (off, len) = v.layout().range(*s);
            json!({"name": s.name(), "offset": off, "size": len})
        })
        .collect();
    let levels: Vec<Value> = (0..c.num_levels as usize)
        .map(|i| json!({"threshold": c.thresholds[i].get(), "policy": render_policy(&m, &c.levels[i])}))
        .collect();
    let out = json!({
        "version": h.version.get(),
        "total_bytes": h.total_len.get(),
        "checksum": format!("0x{:08X}", h.checksum.get()),
        "workload": m.workload,
        "workload_level": v.workload_level().name(),
        "schedule": m.schedule,
        "schedule_level": v.schedule_level().name(),
        "module": info(&m, InfoKind::Module).first(),
        "version_text": info(&m, InfoKind::Version).first(),
        "targets": info(&m, InfoKind::Target),
        "sections": sections,
        "config": {
            "aicpus": c.num_aicpus.get(),
            "policy": Policy::from_u8(c.policy.kind).map(|p| p.name()),
            "dispatch": dispatch(&m),
            "selector": if c.policy.kind == Policy::Threshold as u8 { Some(render_expr(&m, c.selector.get())) } else { None },
            "levels": levels,
            "streams": c.streams.get(),
            "stream_by": stream_by(&m),
            "timing": Timing::from_u8(c.timing).map(|t| t.name()),
            "timing_arg": c.timing_arg.get(),
            "ready": ReadyPolicy::from_u8(c.ready).map(|t| t.name()),
            "start": StartPolicy::from_u8(c.start).map(|t| t.name()),
            "start_threshold": c.start_threshold.get(),
            "window": c.window.get(),
            "window_mode": WindowMode::from_u8(c.window_mode).map(|t| t.name()),
            "pipeline_depth": c.pipeline_depth.get(),
            "cores": ptovm_vm::sched::CoreAlloc::from_u8(c.cores).map(|a| a.to_string()),
            "batch_deps": c.batch_deps.get(),
        },
        "params": m.params.iter().map(|p| json!({
            "name": p.name,
            "kind": p.kind.name(),
            "default": p.default.as_ref().map(|d| match p.kind {
                ptovm_vm::ParamKind::Scalar => json!(d.first()),
                ptovm_vm::ParamKind::Array => json!(d),
            }),
        })).collect::<Vec<_>>(),
        "plans": m.plans.iter().map(|p| json!({
            "name": p.name,
            "expr": render_expr(&m, p.expr),
        })).collect::<Vec<_>>(),
        "tensors": m.tensors.iter().map(|t| {
            let implicit = t.entry.flags.get() & TENSOR_IMPLICIT != 0;
            let stream = t.entry.flags.get() & TENSOR_STREAM != 0;
            let layout = layout_text(t.entry.layout.get());
            json!({"name": t.name, "declared": !implicit, "stream_order": stream, "dtype": DType::from_u8(t.entry.dtype).map(|d| d.name()), "dims": dims(&m, t), "layout": (!layout.is_empty()).then_some(layout)})
        }).collect::<Vec<_>>(),
        "kernels": m.kernels.iter().map(|k| {
            json!({
                "name": k.name,
                "pool": Pool::from_u8(k.entry.pool).map(|p| p.name()),
                "declared": k.entry.flags & KERNEL_UNDECLARED == 0,
                "params": k.entry.num_params,
                "args": dirs(k),
                "workspace_bytes": workspace(k),
                "cost": cost(&m, k),
                "core_limit": k.entry.core_limit.get(),
            })
        }).collect::<Vec<_>>(),
        "axes": (0..m.axes.len()).map(|i| render_axis(&m, i as u16)).collect::<Vec<_>>(),
        "instructions": m.code.len(),
        "task_sites": v.task_sites(),
        "max_loop_depth": v.max_loop_depth(),
        "expr_nodes": m.exprs.len(),
        "region_dims": m.regions.len(),
    });
    serde_json::to_string_pretty(&out).unwrap_or_default()
}

/// The stream of a task under `stream_by` (`key % N`), from the stream record every task
/// carries last (spec/bytecode.md §4.3); `None` without stream order.
fn stream_by(m: &Module) -> Option<String> {
    let st = m
        .tensors
        .iter()
        .position(|t| t.entry.flags.get() & TENSOR_STREAM != 0)?;
    let region = m.code.iter().find_map(|r| {
        (ptovm_vm::Opcode::from_u8(r.opcode) == Some(ptovm_vm::Opcode::IO_INOUT)
            && r.op1() as usize == st)
            .then(|| r.op2() as usize)
    })?;
    Some(render_expr(m, m.regions.get(region)?.start.get()))
}

/// Bytes of scratch each task of kernel `k` gets.
fn workspace(k: &ptovm_assembler::model::Kernel) -> u32 {
    u32::from(k.entry.workspace.get()) * ptovm_vm::format::WORKSPACE_UNIT
}

/// Kernel `k`'s declared cost as text (`a1` is the task's parameter 1, `size(r0)` and
/// `extent(r0, d)` measure its region 0), with its unit.
fn cost(m: &Module, k: &ptovm_assembler::model::Kernel) -> Option<String> {
    k.entry
        .cost()
        .map(|(e, unit)| format!("{} {}", render_expr(m, e), unit.name()))
}
