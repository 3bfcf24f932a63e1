//! Runtime parameters for a program run outside the CLI (benchmarks, profiling examples, tests):
//! every slot takes the default the module gave it (`@param`, kept in the bytecode), except the
//! scalars named in the overrides and the arrays given with [`Defaults::with_array`].

use ptovm_vm::{ParamDefault, ParamKind, Value, Verified};

/// Owned values of every runtime slot of one program, in slot order.
#[derive(Clone, Debug)]
pub struct Defaults {
    slots: Vec<Slot>,
}

#[derive(Clone, Debug)]
enum Slot {
    Scalar(u32),
    Array(Vec<u32>),
}

/// Why [`Defaults::new`] could not bind a program's parameters.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DefaultsError {
    #[error("runtime parameter `{0}` has no default in the module: give it a value")]
    NoDefault(String),
    #[error("`{0}` is not a scalar runtime parameter of the module")]
    NotAScalar(String),
    #[error("`{0}` is not an array runtime parameter of the module")]
    NotAnArray(String),
}

/// The name of `v`'s runtime parameter in `slot`.
fn name_of<'v>(v: &Verified<'v>, slot: usize) -> &'v str {
    let p = &v.params()[slot];
    v.name(p.name_off.get(), p.name_len.get() as u32)
}

/// The slot of `v`'s runtime parameter named `name`, if it is one of kind `kind`.
fn slot_named(v: &Verified<'_>, name: &str, kind: ParamKind) -> Option<usize> {
    (0..v.params().len()).find(|&s| name_of(v, s) == name && v.params()[s].kind == kind as u8)
}

impl Defaults {
    /// Every slot of `v` at its module default, with the scalars named in `overrides` replaced.
    pub fn new(v: &Verified<'_>, overrides: &[(&str, u32)]) -> Result<Defaults, DefaultsError> {
        let name = |slot: usize| name_of(v, slot);
        for &(n, _) in overrides {
            if slot_named(v, n, ParamKind::Scalar).is_none() {
                return Err(DefaultsError::NotAScalar(n.to_string()));
            }
        }
        let slots = (0..v.params().len())
            .map(|slot| {
                if let Some(&(_, x)) = overrides.iter().find(|(n, _)| *n == name(slot)) {
                    return Ok(Slot::Scalar(x));
                }
                match v.param_default(slot) {
                    Some(ParamDefault::Scalar(x)) => Ok(Slot::Scalar(x)),
                    Some(ParamDefault::Array(a)) => {
                        Ok(Slot::Array(a.iter().map(|x| x.get()).collect()))
                    }
                    None => Err(DefaultsError::NoDefault(name(slot).to_string())),
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Defaults { slots })
    }

    /// The same values, with the array named `name` of `v` (the program they were made for)
    /// replaced by `values`. Whether it suits the program (a length its expressions index
    /// within) is for [`ptovm_vm::RuntimeParams::new`] and the run to say.
    pub fn with_array(
        mut self,
        v: &Verified<'_>,
        name: &str,
        values: Vec<u32>,
    ) -> Result<Defaults, DefaultsError> {
        let slot = slot_named(v, name, ParamKind::Array)
            .filter(|&s| s < self.slots.len())
            .ok_or_else(|| DefaultsError::NotAnArray(name.to_string()))?;
        self.slots[slot] = Slot::Array(values);
        Ok(self)
    }

    /// The values, to bind with [`ptovm_vm::RuntimeParams::new`].
    pub fn values(&self) -> Vec<Value<'_>> {
        self.slots
            .iter()
            .map(|s| match s {
                Slot::Scalar(x) => Value::Scalar(*x),
                Slot::Array(a) => Value::Array(a),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ptovm_vm::{verify, RuntimeParams};

    const SRC: &str = "@param N = 4\n@param L = [1, 2]\n@tensor A: f32[N, 4]\n\
        @kernel k(i, j): vector(out a)\n@workload w(%n: dense_dyn(N)) { parallel_for i in %n {\n\
        for_each j in dense_dyn(L[i]) { task @k(i, j) resources(A[i, j]) } } }\n";

    #[test]
    fn defaults_and_overrides_bind() {
        let out = ptovm_assembler::assemble("t", SRC, &Default::default()).unwrap();
        let v = verify(&out.bytes).unwrap();
        let d = Defaults::new(&v, &[("N", 7)]).unwrap();
        let vals = d.values();
        assert!(matches!(vals[0], Value::Scalar(7)));
        assert!(matches!(vals[1], Value::Array(a) if a == [1, 2]));
        RuntimeParams::new(&v, &vals).unwrap();
        assert_eq!(
            Defaults::new(&v, &[("L", 1)]).unwrap_err(),
            DefaultsError::NotAScalar("L".into())
        );
        assert_eq!(
            Defaults::new(&v, &[("M", 1)]).unwrap_err(),
            DefaultsError::NotAScalar("M".into())
        );
        let d = d.with_array(&v, "L", vec![3, 1, 4]).unwrap();
        let vals = d.values();
        assert!(matches!(vals[0], Value::Scalar(7)));
        assert!(matches!(vals[1], Value::Array(a) if a == [3, 1, 4]));
        RuntimeParams::new(&v, &vals).unwrap();
        for not_an_array in ["N", "M"] {
            assert_eq!(
                d.clone().with_array(&v, not_an_array, vec![1]).unwrap_err(),
                DefaultsError::NotAnArray(not_an_array.into())
            );
        }
    }
}
