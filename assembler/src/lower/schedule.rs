//! The schedule: dispatch policies and knobs.

use super::*;

/// A `layout` directive: the tensor and each dimension (`None` for `R`, `Some(k)` for `S(k)`).
pub(super) type Layout<'a> = (&'a Ident, &'a [(Option<(u64, Span)>, Span)]);

impl<'a> Lower<'a, '_, '_> {
    pub(super) fn policy_spec(&mut self, p: &PolicyAst, span: Span) -> R<(PolicySpec, u32)> {
        let none = U16::new(NONE16);
        Ok(match p {
            PolicyAst::RoundRobin(_) | PolicyAst::WorkSteal => (
                PolicySpec {
                    kind: Policy::RoundRobin as u8,
                    depth: 0,
                    key: none,
                },
                0,
            ),
            PolicyAst::Affinity(e) | PolicyAst::Hash(e) => {
                let key = self.expr(e, Ctx::Workload)?;
                let kind = if matches!(p, PolicyAst::Hash(_)) {
                    Policy::Hash
                } else {
                    Policy::Affinity
                };
                (
                    PolicySpec {
                        kind: kind as u8,
                        depth: 0,
                        key: U16::new(key),
                    },
                    self.need_of(key),
                )
            }
            PolicyAst::Static(v) => match self.var_depth(&v.name, v.span, Ctx::Workload)? {
                Some(d) => (
                    PolicySpec {
                        kind: Policy::StaticPartition as u8,
                        depth: d as u8,
                        key: none,
                    },
                    d + 1,
                ),
                None => {
                    return Err(self.rep.error(
                        DiagKind::UnknownName,
                        v.span,
                        format!("`{}` is not a loop variable of the workload", v.name),
                    ))
                }
            },
            PolicyAst::Threshold(..) => {
                return Err(self.rep.error(
                    DiagKind::Type,
                    span,
                    "a threshold level cannot itself be a threshold policy",
                ))
            }
        })
    }

    /// The schedule's knobs into the config; returns its `layout` directives, which apply
    /// once the body has been lowered.
    pub(super) fn schedule(&mut self, s: &'a crate::ast::Schedule) -> R<Vec<Layout<'a>>> {
        let mut seen: HashMap<&str, Span> = HashMap::new();
        let mut layouts = vec![];
        let mut stream_by = None;
        for k in &s.knobs {
            if let KnobValue::Layout(t, dims) = &k.value {
                layouts.push((t, dims.as_slice()));
                continue;
            }
            if let KnobValue::PerLoop(..) = &k.value {
                // Applied to the syntax tree before lowering (`order::apply`).
                continue;
            }
            if let Some(_prev) = seen.insert(k.key.name.as_str(), k.key.span) {
                return Err(self.rep.error(
                    DiagKind::DuplicateName,
                    k.key.span,
                    format!("schedule knob `{}` is set twice", k.key.name),
                ));
            }
            let key = k.key.name.as_str();
            match &k.value {
                KnobValue::Dispatch(p, span) => self.dispatch_knob(p, *span)?,
                KnobValue::Int(v, span) => {
                    let c = &mut self.m.config;
                    match key {
                        "streams" => {
                            if *v == 0 || *v > u16::MAX as u64 {
                                return Err(self.rep.error(
                                    DiagKind::Overflow,
                                    *span,
                                    "streams must be in 1..=65535",
                                ));
                            }
                            c.streams = U16::new(*v as u16);
                        }
                        "aicpus" => self.set_aicpus(*v, *span)?,
                        "window" | "task_window" => {
                            let v = self.u32(*v, *span, 1, "the task window")?;
                            self.m.config.window = U32::new(v);
                        }
                        "pipeline_depth" => {
                            let v = self.u32(*v, *span, 0, "pipeline_depth")?;
                            self.m.config.pipeline_depth = U32::new(v);
                        }
                        "workspace" => {
                            let v = self.u32(*v, *span, 1, "the workspace arena")?;
                            self.m.config.workspace_arena = U32::new(v);
                            self.workspace_span = Some(*span);
                        }
                        _ => {
                            let v = self.u32(*v, *span, 0, "batch_deps")?;
                            self.m.config.batch_deps = U32::new(v);
                        }
                    }
                }
                KnobValue::Named(n, arg) => self.named_knob(key, n, *arg)?,
                KnobValue::SpatialMap(_, span) => {
                    return Err(self.rep.error(
                        DiagKind::Type,
                        *span,
                        "`spatial_map` is not supported: ptovm places tasks on the cube and vector pools of one NPU by dispatch policy, not on a spatial tile grid (remove the knob)",
                    ))
                }
                KnobValue::Expr(e) => stream_by = Some((e, k.key.span)),
                KnobValue::Layout(..) | KnobValue::PerLoop(..) => {}
                KnobValue::Unknown => self.rep.warn(
                    DiagKind::UnknownKnob,
                    k.key.span,
                    format!("unknown schedule knob `{key}` is ignored"),
                ),
            }
        }
        // After the loop: `streams` may follow `stream_by`.
        if let Some(n) = self.streams_override {
            self.m.config.streams = U16::new(n);
        }
        self.stream_order(stream_by, seen.get("streams").copied())?;
        if let Some(&span) = seen.get("timing") {
            self.timing_fits(span)?;
        }
        Ok(layouts)
    }

    /// `timing` against the rest of the schedule: `interleaved(n)` rotates over the `n` streams
    /// of `stream_by`, so it needs them; a `batched(n)` batch larger than the window can only
    /// go out short.
    fn timing_fits(&mut self, span: Span) -> R<()> {
        let c = &self.m.config;
        let (arg, streams) = (c.timing_arg.get(), c.streams.get() as u32);
        match Timing::from_u8(c.timing) {
            Some(Timing::Interleaved) if self.stream.is_none() => Err(self.rep.error(
                DiagKind::Type,
                span,
                format!("`timing = interleaved({arg})` issues round-robin over the streams of `stream_by`, and this schedule has none (add `streams = {arg}` and `stream_by = KEY`, an expression of loop variables)"),
            )),
            Some(Timing::Interleaved) if arg != streams => Err(self.rep.error(
                DiagKind::Type,
                span,
                format!("`timing = interleaved({arg})` names {arg} streams, but the schedule has {streams} (`streams`{}): make them equal", if self.streams_override.is_some() { ", set by --streams" } else { "" }),
            )),
            Some(Timing::Batched) if arg > c.window.get() => {
                self.rep.warn(
                    DiagKind::NoEffect,
                    span,
                    format!("`timing = batched({arg})` never fills a batch: an AICPU holds at most its window of {} tasks, so every batch goes out short, when none of its cores is busy", c.window.get()),
                );
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// `stream_by = key` (with `streams = N`): every task joins stream `key % N`, and a
    /// stream's tasks run one after another in program order (spec/pto.md §4.2). Lowered to a
    /// stream-order tensor of `N` elements that every task reads and writes at its stream's
    /// index, so the TensorMap — and across AICPUs the watermark protocol — orders them.
    fn stream_order(&mut self, key: Option<(&Expr, Span)>, streams: Option<Span>) -> R<()> {
        let n = self.m.config.streams.get();
        let Some((key, span)) = key else {
            if let Some(s) = streams.filter(|_| n > 1) {
                self.rep.warn(
                    DiagKind::NoEffect,
                    s,
                    format!("`streams = {n}` without `stream_by` orders nothing: ptovm cannot tell which stream a task belongs to, so tasks follow their data dependencies only (add `stream_by = KEY`, an expression of loop variables, to run each stream's tasks in program order)"),
                );
            }
            return Ok(());
        };
        if n == 1 {
            self.rep.warn(
                DiagKind::NoEffect,
                span,
                "`stream_by` with one stream (`streams` is 1 or not given) puts every task in one stream: tasks run one at a time in program order",
            );
        }
        // `key % N`: a key below zero gives a negative index, which the run rejects as a
        // region outside the stream-order tensor (a stream is never guessed).
        let modulo = Expr {
            kind: ExprK::Bin(
                ExprOp::MOD,
                Box::new(key.clone()),
                Box::new(Expr {
                    kind: ExprK::Int(n as u64),
                    span: key.span,
                }),
            ),
            span: key.span,
        };
        let e = self.expr(&modulo, Ctx::Workload)?;
        let need = self.need_of(e);
        if need == 0 {
            return Err(self.rep.error(
                DiagKind::Type,
                key.span,
                "`stream_by` names no loop variable: every task would be in the same stream (name a loop variable of the workload, e.g. `stream_by = b`)",
            ));
        }
        let region = self.m.regions.len() as u32;
        self.m.regions.push(RegionDim {
            start: U16::new(e),
            end: U16::new(NONE16),
        });
        self.limit(
            self.m.regions.len(),
            limits::MAX_REGIONS as usize,
            "region dimensions",
            span,
        )?;
        let tensor = self.m.tensors.len();
        self.limit(tensor + 1, limits::MAX_TENSORS as usize, "tensors", span)?;
        let mut dims = [U32::new(0); 8];
        dims[0] = U32::new(n as u32);
        self.m.tensors.push(Tensor {
            // Named once the body's implicit tensors are known (`name_stream_tensor`).
            name: String::new(),
            entry: TensorEntry {
                flags: U32::new(TENSOR_STREAM),
                rank: 1,
                dims,
                ..Default::default()
            },
        });
        self.stream = Some(StreamOrder {
            tensor: tensor as u16,
            region,
            need,
            span,
        });
        Ok(())
    }

    /// Names the stream-order tensor `stream_order` (with `_` appended while another tensor
    /// has that name: it is never referred to by name, but `inspect` shows it).
    pub(super) fn name_stream_tensor(&mut self) {
        let Some(st) = self.stream else { return };
        let mut name = "stream_order".to_string();
        while self.m.tensors.iter().any(|t| t.name == name) {
            name.push('_');
        }
        self.m.tensors[st.tensor as usize].name = name;
    }

    /// `layout T = (...)` directives: each names a tensor of the lowered workload (declared, or
    /// used as a resource), once; a declared tensor's layout gives every dimension.
    pub(super) fn layouts(&mut self, layouts: &[Layout<'a>]) -> R<()> {
        let mut done: HashSet<&str> = HashSet::new();
        for &(t, dims) in layouts {
            let Some(&id) = self.tensor_ids.get(&t.name) else {
                return Err(self.rep.error(
                    DiagKind::UnknownName,
                    t.span,
                    format!(
                        "layout of unknown tensor `{}`: it is neither declared with `@tensor` nor used by workload `{}`",
                        t.name, self.m.workload
                    ),
                ));
            };
            if !done.insert(&t.name) {
                return Err(self.rep.error(
                    DiagKind::DuplicateName,
                    t.span,
                    format!("the layout of `{}` is given twice", t.name),
                ));
            }
            let entry = self.m.tensors[id as usize].entry;
            let implicit = entry.flags.get() & TENSOR_IMPLICIT != 0;
            if dims.len() > limits::MAX_RANK {
                return Err(self.rep.error(
                    DiagKind::Limit,
                    t.span,
                    format!(
                        "a layout of {} dimensions; tensors have at most {}",
                        dims.len(),
                        limits::MAX_RANK
                    ),
                ));
            }
            if !implicit && dims.len() != entry.rank as usize {
                return Err(self.rep.error(
                    DiagKind::Type,
                    t.span,
                    format!(
                        "the layout of `{}` gives {} dimension(s) but the tensor has rank {}",
                        t.name,
                        dims.len(),
                        entry.rank
                    ),
                ));
            }
            if dims.is_empty() {
                self.rep.warn(
                    DiagKind::NoEffect,
                    t.span,
                    format!(
                        "an empty layout of `{}` says nothing; it is not recorded",
                        t.name
                    ),
                );
            }
            let mut word = 0u32;
            for (d, (shard, span)) in dims.iter().enumerate() {
                let code = match shard {
                    None => LAYOUT_REPLICATE,
                    Some((k, _)) if *k <= limits::MAX_MESH_AXIS as u64 => LAYOUT_SHARD + *k as u32,
                    Some((k, _)) => {
                        return Err(self.rep.error(
                            DiagKind::Limit,
                            *span,
                            format!(
                                "mesh axis {k}; the format records S(0) to S({})",
                                limits::MAX_MESH_AXIS
                            ),
                        ))
                    }
                };
                word |= code << (4 * d);
            }
            self.m.tensors[id as usize].entry.layout = U32::new(word);
        }
        Ok(())
    }

    pub(super) fn set_aicpus(&mut self, v: u64, span: Span) -> R<()> {
        if v == 0 || v > limits::MAX_AICPUS as u64 {
            return Err(self.rep.error(
                DiagKind::Overflow,
                span,
                format!("the AICPU count must be in 1..={}", limits::MAX_AICPUS),
            ));
        }
        self.m.config.num_aicpus = U16::new(v as u16);
        Ok(())
    }

    pub(super) fn named_knob(&mut self, key: &str, n: &Ident, arg: Option<(u64, Span)>) -> R<()> {
        let bad = |l: &Self, msg: String| Err(l.rep.error(DiagKind::Type, n.span, msg));
        let want_arg = |l: &Self, needed: bool| -> R<u32> {
            match (needed, arg) {
                (true, Some((v, s))) => l.u32(v, s, 1, "the argument"),
                (true, None) => Err(l.rep.error(
                    DiagKind::Type,
                    n.span,
                    format!("`{}` needs an argument: `{}(N)`", n.name, n.name),
                )),
                (false, Some((_, s))) => {
                    Err(l
                        .rep
                        .error(DiagKind::Type, s, format!("`{}` takes no argument", n.name)))
                }
                (false, None) => Ok(0),
            }
        };
        match key {
            "timing" => {
                let Some(t) = Timing::from_name(&n.name) else {
                    return bad(self, format!("unknown timing `{}`; expected immediate, batched(N), interleaved(N) or rate_limit(N)", n.name));
                };
                let a = want_arg(self, t != Timing::Immediate)?;
                self.m.config.timing = t as u8;
                self.m.config.timing_arg = U32::new(a);
            }
            "ready" => {
                let Some(r) = ReadyPolicy::from_name(&n.name) else {
                    return bad(
                        self,
                        format!(
                            "unknown ready policy `{}`; expected fifo or work_steal",
                            n.name
                        ),
                    );
                };
                want_arg(self, false)?;
                self.m.config.ready = r as u8;
            }
            "cores" => {
                let Some(c) = CoreAlloc::from_name(&n.name) else {
                    return bad(
                        self,
                        format!(
                            "unknown core allocation `{}`; expected shared or partition",
                            n.name
                        ),
                    );
                };
                want_arg(self, false)?;
                self.m.config.cores = c.code();
            }
            "start" => {
                let Some(s) = StartPolicy::from_name(&n.name) else {
                    return bad(self, format!("unknown start policy `{}`; expected immediate, after_orchestration or threshold(N)", n.name));
                };
                let a = want_arg(self, s == StartPolicy::Threshold)?;
                self.m.config.start = s as u8;
                self.m.config.start_threshold = U32::new(a);
            }
            _ => {
                let Some(w) = WindowMode::from_name(&n.name) else {
                    return bad(
                        self,
                        format!(
                            "unknown window mode `{}`; expected stall, abort or benchmark",
                            n.name
                        ),
                    );
                };
                want_arg(self, false)?;
                self.m.config.window_mode = w as u8;
            }
        }
        Ok(())
    }

    pub(super) fn dispatch_knob(&mut self, p: &PolicyAst, span: Span) -> R<()> {
        match p {
            PolicyAst::Threshold(sel, levels, default) => {
                let sel = self.expr(sel, Ctx::NoVars)?;
                if levels.len() + 1 > limits::MAX_LEVELS {
                    return Err(self.rep.error(
                        DiagKind::Limit,
                        span,
                        format!(
                            "a threshold policy has at most {} levels, the default included",
                            limits::MAX_LEVELS
                        ),
                    ));
                }
                let mut need = 0;
                let mut prev: Option<u64> = None;
                let all = levels
                    .iter()
                    .map(|(t, s, p)| (Some((*t, *s)), p))
                    .chain(std::iter::once((None, default.as_ref())));
                let c_levels: Vec<(u32, PolicySpec)> = {
                    let mut v = vec![];
                    for (t, p) in all {
                        let t = match t {
                            Some((t, s)) => {
                                if prev.is_some_and(|p| t <= p) {
                                    return Err(self.rep.error(
                                        DiagKind::Type,
                                        s,
                                        "thresholds must strictly increase",
                                    ));
                                }
                                if t >= u32::MAX as u64 {
                                    return Err(self.rep.error(DiagKind::Overflow, s, "a threshold must be below 4294967295 (the default level covers the rest)"));
                                }
                                prev = Some(t);
                                t as u32
                            }
                            None => u32::MAX,
                        };
                        if matches!(p, PolicyAst::RoundRobin(Some(_))) {
                            return Err(self.rep.error(DiagKind::Type, span, "the AICPU count can only be set by a top-level `round_robin(N)` or `aicpus = N`"));
                        }
                        let (spec, n) = self.policy_spec(p, span)?;
                        need = need.max(n);
                        v.push((t, spec));
                    }
                    v
                };
                let c = &mut self.m.config;
                c.policy = PolicySpec {
                    kind: Policy::Threshold as u8,
                    depth: 0,
                    key: U16::new(NONE16),
                };
                c.selector = U16::new(sel);
                c.num_levels = c_levels.len() as u8;
                for (i, (t, spec)) in c_levels.into_iter().enumerate() {
                    c.thresholds[i] = U32::new(t);
                    c.levels[i] = spec;
                }
                self.need = (need, span);
            }
            _ => {
                if let PolicyAst::RoundRobin(Some((n, s))) = p {
                    self.set_aicpus(*n, *s)?;
                }
                if matches!(p, PolicyAst::WorkSteal) {
                    self.m.config.ready = ReadyPolicy::WorkSteal as u8;
                }
                let (spec, need) = self.policy_spec(p, span)?;
                self.m.config.policy = spec;
                self.need = (need, span);
            }
        }
        Ok(())
    }
}
