//! The need of a staged task (spec/runtime.md §4.1 step 4, §3.5 "The need"): the watermark
//! every other AICPU must have passed before the task records. It depends on the task's site —
//! its regions' tensors and directions, which the site fixes — and, for a region the steps'
//! rule takes, on where the stepping loop's current iteration started. So each site's share of
//! it is worked out once ([`NeedShape`]) and every task of the site reads it from there: a
//! pattern's task has up to five regions, and walking them at every task cost the threaded
//! stencil, fft and spread 7–11 % of their instructions.

use super::*;

/// Whether the steps' rule applies: a stepped tensor is in the global map (only such a tensor
/// lowers a need), by the classes `shares`.
pub(super) fn stepped_shared(shares: &[Sharing]) -> bool {
    shares.iter().any(|s| s.stepped && s.class == Class::Shared)
}

/// Sites whose [`NeedShape`] an AICPU keeps, each at `site % NEED_SITES`: as many, and kept
/// alike, as [`share::SiteUses`] keeps their uses.
pub(super) const NEED_SITES: usize = share::USE_SITES;

/// What a site's regions make of the needs of its tasks.
#[derive(Clone, Copy, Debug)]
pub(super) struct NeedShape {
    /// The site (`u32::MAX`: none).
    site: u32,
    /// The largest end its shared regions need but those of the steps' rule: a write needs
    /// every earlier access of its tensor (`accesses_end`), a read every earlier write
    /// (`writes_end`). 0 when none.
    end: u64,
    /// Whether a region takes the steps' rule (a read of a stepped tensor, or a write of one
    /// written once): the tasks before the stepping loop's current iteration.
    steps: bool,
    /// Whether a region's tensor is past the analysis: every earlier task.
    every: bool,
}

impl NeedShape {
    /// No site.
    pub(super) const NONE: NeedShape = NeedShape {
        site: u32::MAX,
        end: 0,
        steps: false,
        every: false,
    };

    /// The shape of the site of `t`, whose regions' tensors `shares` classifies; the steps'
    /// rule applies when `stepped_shared` (a stepped tensor is in the global map).
    fn of(shares: &[Sharing], t: &Task, stepped_shared: bool) -> NeedShape {
        let mut shape = NeedShape {
            site: t.site,
            ..NeedShape::NONE
        };
        for io in t.ios() {
            match shares.get(io.tensor as usize) {
                // A read of a stepped tensor reads rows of earlier steps; a write of one
                // written once meets no earlier access, and takes a table cell the readers of
                // earlier steps left (§3.5, §4.8): both need only the tasks before the step.
                Some(s) if s.class == Class::Shared => {
                    if stepped_shared && s.stepped && (!io.writes() || s.written_once) {
                        shape.steps = true;
                    } else if io.writes() {
                        shape.end = shape.end.max(s.accesses_end);
                    } else {
                        shape.end = shape.end.max(s.writes_end);
                    }
                }
                Some(_) => {}
                None => shape.every = true,
            }
        }
        shape
    }
}

impl<'a, 'p, 'm, S: Storage> Aicpu<'a, 'p, 'm, S> {
    /// Forgets the sites' shapes and works the steps' rule out again, for the classes the
    /// tensors have now (a `READBACK` classed them again: §4.5). The sites after a `READBACK`
    /// are other statements than those before it (it stands at the workload's top level), so
    /// no shape kept would be asked for again; they go as the sites' uses do.
    pub(super) fn forget_needs(&mut self) {
        self.needs = [NeedShape::NONE; NEED_SITES];
        self.stepped_shared = stepped_shared(self.shares);
    }

    /// The watermark the staged task waits for (§4.1, §3.5): every other AICPU must have
    /// recorded its tasks below it that may conflict with the task's shared accesses — never
    /// more than the tasks below it. A region the steps' rule takes needs only the tasks before
    /// the current iteration of the stepping loop ([`Interpreter::outer_start`]; all of them
    /// when the interpreter does not know where the iteration started) (§3.5, "The need"): so
    /// the AICPUs record a step's tasks together, rather than one AICPU after another in id
    /// order, and each opens one join for a row a join stands for (§4.7).
    #[inline]
    pub(super) fn need_of_staged(&mut self) -> u64 {
        let t = self.interp.current_task();
        let k = t.site as usize % NEED_SITES;
        if self.needs[k].site != t.site {
            self.needs[k] = NeedShape::of(self.shares, t, self.stepped_shared);
        }
        let shape = self.needs[k];
        if shape.every {
            return t.id;
        }
        let mut end = shape.end;
        if shape.steps {
            end = end.max(self.interp.outer_start().unwrap_or(t.id));
        }
        end.min(t.id)
    }
}
