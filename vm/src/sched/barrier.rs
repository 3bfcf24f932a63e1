//! Reading a tensor back (spec/runtime.md §4.5): the barrier every AICPU passes at a
//! `READBACK`, and the read itself.
//!
//! When its interpreter stops at a `READBACK` ([`Status::Readback`]), an AICPU has generated
//! and recorded all its tasks before that point; it publishes the `READBACK`'s id as its
//! watermark (no task of its own below it is left to record), stops generating, and keeps
//! completing, releasing and issuing as usual. Once its window is empty — every task of its
//! own before the `READBACK` completed and retired — it **arrives**: one `fetch_add` on the
//! `READBACK`'s barrier word. When the word reaches the AICPU count, every task of the program
//! before the `READBACK` has completed, on whichever AICPU and core; each AICPU then reads the
//! tensor itself ([`Env::read_back`]), checks the values, gives its interpreter the new
//! runtime array, redoes the tensor analysis with it, and generates on.

use super::*;

impl<'a, 'p, 'm, S: Storage> Aicpu<'a, 'p, 'm, S> {
    /// Gives the scheduler the memory the values read back go to: `values`, at least the
    /// elements of all the program's `READBACK`s together
    /// ([`readback_words`]), and `slots`, one runtime-parameter block per `READBACK`
    /// ([`readback_blocks`]). A program with a `READBACK` needs it; without, the run stops
    /// at the first with `SchedError::Memory`.
    pub fn with_readback(mut self, values: &'p mut [u32], slots: &'p mut [Value<'p>]) -> Self {
        self.readback_values = values;
        self.readback_slots = slots;
        self
    }

    /// The interpreter stopped at `READBACK` `rb`: every task of this AICPU before it is
    /// generated and recorded. Publishes that as the watermark and starts dispatching (holding
    /// ready tasks back now could keep the barrier from ever being reached).
    pub(super) fn stop_at<C, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        env: &mut impl Env,
        rb: crate::readback::Readback,
    ) {
        self.barrier = Some(rb);
        self.arrived = false;
        self.started = true;
        let mark = self.interp.next_id();
        sh.published[self.me as usize]
            .0
            .store(mark, Ordering::Release);
        self.wake_waiters(sh, env, mark);
    }

    /// One round's part of the barrier: arrive once every own task before it has completed
    /// and retired; once every AICPU has arrived, read back and go on. Returns whether it did
    /// anything.
    pub(super) fn barrier_round<C: AsRef<[Cell]>, L: MapLock>(
        &mut self,
        sh: &Shared<'_, C, L>,
        env: &mut impl Env,
    ) -> Result<bool, SchedError> {
        let Some(rb) = self.barrier else {
            return Ok(false);
        };
        let word = sh
            .barriers
            .get(rb.index as usize)
            .ok_or(SchedError::Memory("barrier words"))?;
        let mut progress = false;
        if !self.arrived {
            if !self.may_arrive() {
                return Ok(false);
            }
            if !self.retiring.is_empty() {
                sh.map.with_map(|map| {
                    Self::flush(self.me, &mut self.retiring, &mut self.free, sh, map)
                })?;
            }
            // Release: this AICPU's tasks' completions (and their cores' writes, which it
            // acquired when it saw each core done) happen before any AICPU's read below.
            word.0.fetch_add(1, Ordering::AcqRel);
            self.arrived = true;
            progress = true;
            for a in (0..sh.n).filter(|&a| a != self.me) {
                env.wake(a);
            }
        }
        // Acquire: pairs with every AICPU's arrival.
        if word.0.load(Ordering::Acquire) < u64::from(sh.n) {
            return Ok(progress);
        }
        self.read_back(sh, env, rb)?;
        self.barrier = None;
        self.arrived = false;
        Ok(true)
    }

    /// Whether every task of its own before the barrier has completed: its window is empty,
    /// none of its cores is busy, no task waits for predecessors.
    pub(super) fn may_arrive(&self) -> bool {
        self.in_window == 0 && self.busy.is_empty() && self.deferred.is_none()
    }

    /// Reads `rb`'s tensor into the next part of the values buffer (the launch's values stay
    /// when the environment has no memory to read), checks it, rebinds the interpreter and
    /// redoes the tensor analysis.
    fn read_back<C, L>(
        &mut self,
        sh: &Shared<'_, C, L>,
        env: &mut impl Env,
        rb: crate::readback::Readback,
    ) -> Result<(), SchedError> {
        let v = self.interp.program();
        let old = *self.interp.params();
        let binding = self
            .tensors
            .get(rb.tensor as usize)
            .copied()
            .unwrap_or_default();
        let me = self.me;
        let p = crate::readback::read(
            v,
            &old,
            &rb,
            &mut self.readback_values,
            &mut self.readback_slots,
            |into| env.read_back(me, rb.tensor, &binding, into),
        )
        .map_err(|e| match e {
            crate::readback::ReadError::Run(e) => SchedError::Run(e),
            crate::readback::ReadError::Short => SchedError::Memory("read-back buffers"),
        })?;
        self.interp.rebind(p);
        // The classes of the tensors (and what sites remember of them) from the values read
        // back: every task before the READBACK has completed and retired, so nothing recorded
        // under the old classes is left.
        share::analyze(&self.interp, self.shares).map_err(|e| match e {
            ShareError::Run(e) => SchedError::Run(e),
            other => SchedError::Share(other),
        })?;
        self.uses = SiteUses::default();
        self.forget_needs();
        // Its tables from the new classes: what the old ones hold is of completed tasks,
        // which a read passes over (§4.8).
        self.once = once::once_tables(self.interp.program(), self.shares, self.tensors, sh);
        self.plans.clear();
        self.joins.forget_finished();
        Ok(())
    }
}

/// Elements of the values buffer a launch gives [`Aicpu::with_readback`] for program `v`
/// with parameters `p`: the runtime arrays its `READBACK`s fill, together.
pub fn readback_words(v: &crate::Verified<'_>, p: &crate::RuntimeParams<'_>) -> usize {
    crate::readback::records(v)
        .map(|(_, r)| p.array((r.op2() & 0xFFFF) as usize).len())
        .sum()
}

/// Runtime-parameter blocks for [`Aicpu::with_readback`]: one per `READBACK`, each of
/// `v.params().len()` values.
pub fn readback_blocks(v: &crate::Verified<'_>) -> usize {
    v.readbacks().len() * v.params().len()
}
