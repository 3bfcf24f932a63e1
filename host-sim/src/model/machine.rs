//! The machine the simulated-time model runs on (spec/runtime.md §9.1): how many AICPUs and
//! cores, how fast the cores count cycles, what each AICPU operation and a handshake cost, and
//! how long a kernel runs when nothing says otherwise. The defaults are an Ascend 910B's; a
//! machine file (TOML) overrides any of them, and a cost table (TOML) gives kernels durations
//! measured on hardware.

use std::collections::BTreeMap;

use ptovm_vm::{Pool, Verified};
use serde::Deserialize;
use toml::Spanned;

/// The modelled cost of an AICPU's work, in nanoseconds a unit of the work counters the
/// interpreter and the scheduler keep (spec/runtime.md §9.2). Not measured on a 910B: they
/// are this machine's host figures scaled to a slower aarch64 core, and are there to be
/// replaced by measured ones (`[aicpu]` in a machine file).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AicpuCosts {
    /// One round of the scheduler loop (polling its cores and queues), whatever it does.
    pub round_ns: u64,
    /// One bytecode instruction the interpreter dispatches.
    pub instruction_ns: u64,
    /// One task generated: placed in the window, its descriptor written.
    pub task_ns: u64,
    /// One list a TensorMap lookup looks at (a bucket, a row).
    pub probe_ns: u64,
    /// One entry a TensorMap lookup examines.
    pub visit_ns: u64,
    /// One access inserted in a TensorMap.
    pub insert_ns: u64,
    /// One registration on a running predecessor (and its release later).
    pub edge_ns: u64,
    /// Added for a registration on another AICPU's task (its cache lines move).
    pub cross_edge_ns: u64,
    /// One task handed to a core: the handshake slot written and flushed.
    pub dispatch_ns: u64,
    /// One completion seen: its successors released, its slot retired.
    pub completion_ns: u64,
}

impl Default for AicpuCosts {
    fn default() -> AicpuCosts {
        AicpuCosts {
            round_ns: 40,
            instruction_ns: 4,
            task_ns: 60,
            probe_ns: 8,
            visit_ns: 4,
            insert_ns: 20,
            edge_ns: 30,
            cross_edge_ns: 120,
            dispatch_ns: 80,
            completion_ns: 60,
        }
    }
}

/// A machine: its AICPUs and cores, their speeds, and the model's latencies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Machine {
    /// AICPUs the runtime may use (a 910B: 6 of its 8).
    pub aicpus: u32,
    /// Cube (AIC) cores.
    pub cube_cores: u32,
    /// Vector (AIV) cores.
    pub vector_cores: u32,
    /// The AICore clock, MHz: what a kernel cost in cycles is converted with.
    pub core_clock_mhz: u32,
    /// From an AICPU writing a core's handshake slot to the core starting the task, ns.
    pub handshake_ns: u64,
    /// From a core finishing a task to its AICPU being able to see it, ns.
    pub notice_ns: u64,
    /// A kernel's duration when neither its declaration nor the cost table gives one, ns.
    pub default_kernel_ns: u64,
    /// How often an idle AICPU that could take another AICPU's task (work stealing) looks
    /// at their queues again, ns.
    pub idle_poll_ns: u64,
    /// What the AICPU's work costs.
    pub aicpu: AicpuCosts,
}

impl Default for Machine {
    /// An Ascend 910B (DESIGN.md §6): 6 usable AICPUs, 24 cube and 48 vector cores at 1,850
    /// MHz; handshakes through global memory of half a microsecond each way; 10 µs for a
    /// kernel nothing gives a cost to.
    fn default() -> Machine {
        Machine {
            aicpus: 6,
            cube_cores: 24,
            vector_cores: 48,
            core_clock_mhz: 1850,
            handshake_ns: 500,
            notice_ns: 500,
            default_kernel_ns: 10_000,
            idle_poll_ns: 1_000,
            aicpu: AicpuCosts::default(),
        }
    }
}

/// A bad machine file or cost table: where and what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct ConfigError {
    /// The file as named.
    pub file: String,
    /// Line, from 1 (0: the file as a whole).
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    fn at(file: &str, text: &str, offset: usize, message: String) -> ConfigError {
        let before = &text[..offset.min(text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
        ConfigError {
            file: file.to_string(),
            line,
            column,
            message,
        }
    }

    fn of_toml(file: &str, text: &str, e: toml::de::Error) -> ConfigError {
        let offset = e.span().map_or(0, |s| s.start);
        ConfigError::at(file, text, offset, e.message().to_string())
    }
}

impl Machine {
    /// Reads a machine file (`file` names it in errors): every key optional, the rest the 910B's.
    pub fn parse(file: &str, text: &str) -> Result<Machine, ConfigError> {
        let m: Machine = toml::from_str(text).map_err(|e| ConfigError::of_toml(file, text, e))?;
        m.check().map_err(|message| ConfigError {
            file: file.to_string(),
            line: 0,
            column: 0,
            message,
        })?;
        Ok(m)
    }

    /// What no machine can have: an AICPU count outside 1..=64, a clock of 0 MHz, an idle
    /// AICPU that polls without time passing (the model would not advance).
    pub fn check(&self) -> Result<(), String> {
        if self.aicpus == 0 || self.aicpus > 64 {
            return Err(format!("aicpus must be in 1..=64, not {}", self.aicpus));
        }
        if self.core_clock_mhz == 0 {
            return Err("core_clock_mhz must be at least 1".into());
        }
        if self.idle_poll_ns == 0 {
            return Err("idle_poll_ns must be at least 1".into());
        }
        Ok(())
    }

    /// Nanoseconds of `cycles` AICore cycles, rounded up.
    pub fn cycles_ns(&self, cycles: u64) -> u64 {
        (cycles as u128 * 1000)
            .div_ceil(self.core_clock_mhz.max(1) as u128)
            .min(u64::MAX as u128) as u64
    }

    /// The cores of `pool`.
    pub fn cores(&self, pool: Pool) -> u32 {
        match pool {
            Pool::Cube => self.cube_cores,
            Pool::Vector => self.vector_cores,
        }
    }
}

/// A duration as a cost table or a declaration gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Duration {
    /// Nanoseconds.
    Ns(u64),
    /// AICore cycles (converted with the machine's clock).
    Cycles(u64),
}

impl Duration {
    /// Nanoseconds on `m`.
    pub fn ns(self, m: &Machine) -> u64 {
        match self {
            Duration::Ns(ns) => ns,
            Duration::Cycles(c) => m.cycles_ns(c),
        }
    }

    /// Reads `1200`, `"1200 ns"`, `"1.5 us"`, `"2 ms"` or `"3000 cycles"`.
    fn parse(text: &str) -> Result<Duration, String> {
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = (&t[..split], t[split..].trim());
        let scale = match unit {
            "" | "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "cycles" => {
                return num
                    .parse::<u64>()
                    .map(Duration::Cycles)
                    .map_err(|_| format!("{t:?}: cycles are a whole number"));
            }
            _ => return Err(format!("{t:?}: the unit must be ns, us, ms or cycles")),
        };
        let v: f64 = num
            .parse()
            .map_err(|_| format!("{t:?} is not a duration (a number and a unit)"))?;
        let ns = (v * scale).round();
        if !(0.0..=1e15).contains(&ns) {
            return Err(format!("{t:?} is out of range (at most 10^15 ns)"));
        }
        Ok(Duration::Ns(ns as u64))
    }
}

/// A cost table: kernels' durations measured on hardware, by kernel name. They override what
/// the module declares (spec/pto.md §4.8).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CostTable {
    /// Kernel name → duration.
    pub kernels: BTreeMap<String, Duration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CostFile {
    kernels: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
}

impl CostTable {
    /// Reads a cost table (`[kernels]` with `name = 1200` in ns, or a string with a unit),
    /// refusing a kernel `program` does not have.
    pub fn parse(file: &str, text: &str, program: &Verified<'_>) -> Result<CostTable, ConfigError> {
        let f: CostFile = toml::from_str(text).map_err(|e| ConfigError::of_toml(file, text, e))?;
        let names: Vec<&str> = program.kernel_names().collect();
        let mut kernels = BTreeMap::new();
        for (name, value) in f.kernels {
            if !names.contains(&name.get_ref().as_str()) {
                return Err(ConfigError::at(
                    file,
                    text,
                    name.span().start,
                    format!(
                        "`{}` is not a kernel of the program (its kernels: {})",
                        name.get_ref(),
                        names.join(", ")
                    ),
                ));
            }
            let at = value.span().start;
            let d = match value.into_inner() {
                toml::Value::Integer(ns) if ns >= 0 => Ok(Duration::Ns(ns as u64)),
                toml::Value::Integer(_) => Err("a duration cannot be negative".to_string()),
                toml::Value::Float(ns) => Duration::parse(&ns.to_string()),
                toml::Value::String(s) => Duration::parse(&s),
                other => Err(format!(
                    "a duration is a number of ns or a string with a unit, not a {}",
                    other.type_str()
                )),
            }
            .map_err(|m| ConfigError::at(file, text, at, m))?;
            kernels.insert(name.into_inner(), d);
        }
        Ok(CostTable { kernels })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(Duration::parse("1200"), Ok(Duration::Ns(1200)));
        assert_eq!(Duration::parse("1.5 us"), Ok(Duration::Ns(1500)));
        assert_eq!(Duration::parse("2ms"), Ok(Duration::Ns(2_000_000)));
        assert_eq!(Duration::parse("3000 cycles"), Ok(Duration::Cycles(3000)));
        assert!(Duration::parse("3 hours").is_err());
        assert!(Duration::parse("1.5 cycles").is_err());
        assert!(Duration::parse("-3").is_err());
        let m = Machine::default();
        assert_eq!(Duration::Cycles(1850).ns(&m), 1000);
        assert_eq!(Duration::Cycles(1).ns(&m), 1);
    }

    #[test]
    fn machine_files() {
        assert_eq!(Machine::parse("m", ""), Ok(Machine::default()));
        let m = Machine::parse("m", "cube_cores = 2\n[aicpu]\ntask_ns = 7\n").unwrap();
        assert_eq!((m.cube_cores, m.aicpu.task_ns, m.vector_cores), (2, 7, 48));
        let e = Machine::parse("m.toml", "aicpus = 6\ncube = 3\n").unwrap_err();
        assert_eq!((e.line, e.column), (2, 1), "{e}");
        assert!(e.message.contains("unknown field"), "{e}");
        let e = Machine::parse("m.toml", "aicpus = -1\n").unwrap_err();
        assert_eq!(e.line, 1, "{e}");
        assert!(Machine::parse("m", "core_clock_mhz = 0").is_err());
        assert!(Machine::parse("m", "aicpus = 0").is_err());
        assert!(Machine::parse("m", "idle_poll_ns = 0").is_err());
    }
}
