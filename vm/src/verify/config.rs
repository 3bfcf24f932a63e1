//! The config section's checks (spec/bytecode.md §7, step 9): dispatch policies, threshold
//! levels and the schedule knobs.

use super::*;

impl<'v, 'a> Checker<'v, 'a> {
    /// Checks one policy; returns the loops a task needs around it for the policy to apply.
    pub(super) fn policy(&self, p: &PolicySpec, allow_threshold: bool, at: Location) -> R<u32> {
        let Some(kind) = Policy::from_u8(p.kind) else {
            return Err(VerifyError {
                kind: ErrorKind::BadCode {
                    what: "dispatch policy",
                    value: p.kind as u32,
                },
                at,
            });
        };
        let nz = |what| {
            Err(VerifyError {
                kind: ErrorKind::NonZero { what },
                at,
            })
        };
        match kind {
            Policy::RoundRobin | Policy::Threshold => {
                if kind == Policy::Threshold && !allow_threshold {
                    return Err(VerifyError {
                        kind: ErrorKind::Threshold {
                            problem: "a level cannot itself be a threshold policy",
                        },
                        at,
                    });
                }
                if p.depth != 0 || p.key.get() != NONE16 {
                    return nz("depth and key (must be 0 and 0xFFFF)");
                }
                Ok(0)
            }
            Policy::Affinity | Policy::Hash => {
                if p.depth != 0 {
                    return nz("depth of an affinity/hash policy");
                }
                self.expr(p.key.get() as u32, Some(limits::MAX_LOOP_DEPTH as u32), at)
            }
            Policy::StaticPartition => {
                if p.key.get() != NONE16 {
                    return nz("key of a static policy (must be 0xFFFF)");
                }
                limit(
                    "static partition depth",
                    p.depth as u32,
                    limits::MAX_LOOP_DEPTH as u32 - 1,
                    at,
                )?;
                Ok(p.depth as u32 + 1)
            }
        }
    }

    /// Returns the loops a task needs around it for the module's dispatch policy.
    pub(super) fn config(&mut self) -> R<u32> {
        let c = self.v.config;
        let at = |o| self.cfg_loc(o);
        let code = |what: &'static str, value: u8, ok: bool, o: usize| -> R<()> {
            if ok {
                Ok(())
            } else {
                Err(VerifyError {
                    kind: ErrorKind::BadCode {
                        what,
                        value: value as u32,
                    },
                    at: self.cfg_loc(o),
                })
            }
        };
        let n = c.num_aicpus.get();
        if n == 0 {
            return Err(VerifyError {
                kind: ErrorKind::TooSmall {
                    what: "num_aicpus",
                    value: 0,
                    min: 1,
                },
                at: at(offset_of!(Config, num_aicpus)),
            });
        }
        limit(
            "num_aicpus",
            n as u32,
            limits::MAX_AICPUS as u32,
            at(offset_of!(Config, num_aicpus)),
        )?;
        let mut need = self.policy(&c.policy, true, at(offset_of!(Config, policy)))?;
        let threshold = c.policy.kind == Policy::Threshold as u8;
        let levels = c.num_levels as usize;
        if threshold {
            if levels == 0 {
                return Err(VerifyError {
                    kind: ErrorKind::Threshold {
                        problem: "needs at least one level",
                    },
                    at: at(offset_of!(Config, num_levels)),
                });
            }
            limit(
                "threshold levels",
                levels as u32,
                limits::MAX_LEVELS as u32,
                at(offset_of!(Config, num_levels)),
            )?;
            self.expr(
                c.selector.get() as u32,
                None,
                at(offset_of!(Config, selector)),
            )?;
            let mut prev: Option<u32> = None;
            for i in 0..levels {
                let t = c.thresholds[i].get();
                if prev.is_some_and(|p| t <= p) {
                    return Err(VerifyError {
                        kind: ErrorKind::Threshold {
                            problem: "thresholds must strictly increase",
                        },
                        at: at(offset_of!(Config, thresholds) + 4 * i),
                    });
                }
                prev = Some(t);
                need = need.max(self.policy(
                    &c.levels[i],
                    false,
                    at(offset_of!(Config, levels) + 4 * i),
                )?);
            }
            if prev != Some(u32::MAX) {
                return Err(VerifyError {
                    kind: ErrorKind::Threshold {
                        problem: "the last level's threshold must be 4294967295 (the catch-all)",
                    },
                    at: at(offset_of!(Config, thresholds) + 4 * (levels - 1)),
                });
            }
        } else if levels != 0 || c.selector.get() != NONE16 {
            return Err(VerifyError {
                kind: ErrorKind::NonZero {
                    what: "threshold fields of a non-threshold policy (levels 0, selector 0xFFFF)",
                },
                at: at(offset_of!(Config, num_levels)),
            });
        }
        for i in levels..limits::MAX_LEVELS {
            if c.thresholds[i].get() != 0 || c.levels[i] != PolicySpec::default() {
                return Err(VerifyError {
                    kind: ErrorKind::NonZero {
                        what: "unused threshold levels",
                    },
                    at: at(offset_of!(Config, thresholds) + 4 * i),
                });
            }
        }
        code(
            "timing",
            c.timing,
            Timing::from_u8(c.timing).is_some(),
            offset_of!(Config, timing),
        )?;
        code(
            "ready policy",
            c.ready,
            ReadyPolicy::from_u8(c.ready).is_some(),
            offset_of!(Config, ready),
        )?;
        code(
            "start policy",
            c.start,
            StartPolicy::from_u8(c.start).is_some(),
            offset_of!(Config, start),
        )?;
        code(
            "window mode",
            c.window_mode,
            WindowMode::from_u8(c.window_mode).is_some(),
            offset_of!(Config, window_mode),
        )?;
        if c.timing == Timing::Immediate as u8 && c.timing_arg.get() != 0 {
            return Err(VerifyError {
                kind: ErrorKind::NonZero {
                    what: "timing argument of immediate timing",
                },
                at: at(offset_of!(Config, timing_arg)),
            });
        }
        if c.timing != Timing::Immediate as u8 && c.timing_arg.get() == 0 {
            return Err(VerifyError {
                kind: ErrorKind::TooSmall {
                    what: "timing argument",
                    value: 0,
                    min: 1,
                },
                at: at(offset_of!(Config, timing_arg)),
            });
        }
        // `interleaved(n)` rotates over the `n` streams of `stream_by` (spec/pto.md §4.2).
        if c.timing == Timing::Interleaved as u8
            && (self.stream.is_none() || c.timing_arg.get() != c.streams.get() as u32)
        {
            return Err(VerifyError {
                kind: ErrorKind::StreamOrder {
                    problem:
                        "interleaved timing needs a stream-order tensor and names its stream count",
                },
                at: at(offset_of!(Config, timing_arg)),
            });
        }
        let st = c.start_threshold.get();
        if c.start == StartPolicy::Threshold as u8 {
            if st == 0 {
                return Err(VerifyError {
                    kind: ErrorKind::TooSmall {
                        what: "start threshold",
                        value: 0,
                        min: 1,
                    },
                    at: at(offset_of!(Config, start_threshold)),
                });
            }
        } else if st != 0 {
            return Err(VerifyError {
                kind: ErrorKind::NonZero {
                    what: "start threshold without start = threshold",
                },
                at: at(offset_of!(Config, start_threshold)),
            });
        }
        if c.streams.get() == 0 {
            return Err(VerifyError {
                kind: ErrorKind::TooSmall {
                    what: "streams",
                    value: 0,
                    min: 1,
                },
                at: at(offset_of!(Config, streams)),
            });
        }
        if c.window.get() == 0 {
            return Err(VerifyError {
                kind: ErrorKind::TooSmall {
                    what: "task window",
                    value: 0,
                    min: 1,
                },
                at: at(offset_of!(Config, window)),
            });
        }
        for level in [c.level & 0xF, c.level >> 4] {
            if Level::from_u8(level).is_none() {
                return Err(VerifyError {
                    kind: ErrorKind::BadCode {
                        what: "level",
                        value: level as u32,
                    },
                    at: at(offset_of!(Config, level)),
                });
            }
        }
        if crate::sched::CoreAlloc::from_u8(c.cores).is_none() {
            return Err(VerifyError {
                kind: ErrorKind::BadCode {
                    what: "core allocation",
                    value: c.cores as u32,
                },
                at: at(offset_of!(Config, cores)),
            });
        }
        if c.reserved2.iter().any(|&r| r != 0) || c.reserved3.iter().any(|r| r.get() != 0) {
            return Err(VerifyError {
                kind: ErrorKind::NonZero {
                    what: "config reserved fields",
                },
                at: at(offset_of!(Config, reserved2)),
            });
        }
        Ok(need)
    }
}
