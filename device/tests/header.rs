//! `include/ptovm.h` is the single C description of the ABI: generated from the crate's sources
//! (`src/`) by cbindgen (configured in `cbindgen.toml`), and this test fails when the committed
//! header is not what the Rust side generates. `PTOVM_BLESS=1` rewrites it.

#[test]
fn the_header_is_what_the_rust_side_generates() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let bindings = cbindgen::generate(dir).expect("cbindgen parses the crate");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();
    let path = std::path::Path::new(dir).join("include/ptovm.h");
    if std::env::var_os("PTOVM_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/ptovm.h differs from what src/ generates; if the ABI change is meant, run\n  PTOVM_BLESS=1 cargo test -p ptovm-device --test header\n(and raise PTOVM_ABI_VERSION when existing callers break)"
    );
    for f in [
        "ptovm_abi_version",
        "ptovm_layout",
        "ptovm_shared_init",
        "ptovm_instance_init",
        "ptovm_step",
        "ptovm_run",
        "ptovm_core_take",
        "ptovm_core_descriptor",
        "ptovm_core_finish",
        "ptovm_work_bound",
        "ptovm_aicpu_init",
        "ptovm_aicpu_exec",
        "ptovm_core_fail",
        "ptovm_launch_error",
    ] {
        assert!(
            generated.contains(&format!("{f}(")),
            "{f} missing from the header"
        );
    }
    assert!(generated.contains("#define PTOVM_ABI_VERSION 5"));
}

#[test]
fn the_header_compiles_and_its_structs_have_the_rust_sizes() {
    use ptovm_device::*;
    use std::mem::{align_of, size_of};
    let dir = env!("CARGO_MANIFEST_DIR");
    let mut c = String::from("#include \"ptovm.h\"\n");
    for (name, size, align) in [
        (
            "ptovm_launch",
            size_of::<PtovmLaunch>(),
            align_of::<PtovmLaunch>(),
        ),
        (
            "ptovm_sizes",
            size_of::<PtovmSizes>(),
            align_of::<PtovmSizes>(),
        ),
        (
            "ptovm_param",
            size_of::<PtovmParam>(),
            align_of::<PtovmParam>(),
        ),
        (
            "ptovm_counters",
            size_of::<PtovmCounters>(),
            align_of::<PtovmCounters>(),
        ),
        (
            "ptovm_task",
            size_of::<PtovmTask>(),
            align_of::<PtovmTask>(),
        ),
        (
            "ptovm_work",
            size_of::<PtovmWork>(),
            align_of::<PtovmWork>(),
        ),
        (
            "ptovm_desc",
            size_of::<ptovm_vm::desc::Descriptor>(),
            align_of::<ptovm_vm::desc::Descriptor>(),
        ),
        (
            "ptovm_tensor",
            size_of::<ptovm_vm::desc::TensorArg>(),
            align_of::<ptovm_vm::desc::TensorArg>(),
        ),
        (
            "ptovm_region",
            size_of::<ptovm_vm::desc::RegionDesc>(),
            align_of::<ptovm_vm::desc::RegionDesc>(),
        ),
        (
            "ptovm_kernel_args",
            size_of::<PtovmKernelArgs>(),
            align_of::<PtovmKernelArgs>(),
        ),
    ] {
        c += &format!(
            "_Static_assert(sizeof({name}) == {size}, \"{name} size\");\n\
             _Static_assert(_Alignof({name}) == {align}, \"{name} alignment\");\n"
        );
    }
    c += "int main(void) { return ptovm_abi_version() == PTOVM_ABI_VERSION ? 0 : 1; }\n";
    let tmp = std::env::temp_dir().join(format!("ptovm-header-{}.c", std::process::id()));
    std::fs::write(&tmp, c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = std::process::Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-fsyntax-only", "-I"])
        .arg(std::path::Path::new(dir).join("include"))
        .arg(&tmp)
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    let _ = std::fs::remove_file(&tmp);
    assert!(
        out.status.success(),
        "the header does not compile with {cc}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
