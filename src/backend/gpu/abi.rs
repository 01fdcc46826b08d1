//! The kernel ABI checked three ways: each kernel's Rust params struct (`params.rs`, through
//! its table row) against the WGSL `struct Params` of every variant, by naga reflection (names,
//! offsets, sizes, scalar types), and against the CUDA struct of the same name, by reading its
//! declaration in the kernel's NVRTC program (names, order, scalar types).

#[cfg(feature = "wgpu")]
use super::params::FieldInfo;
use super::params::Scalar;
use super::table::{Kernel, CUDA_HEADERS};

/// The uniform at binding 0 of a WGSL module as fields, and its size in bytes.
#[cfg(feature = "wgpu")]
fn wgsl_params(src: &str) -> Result<(Vec<FieldInfo>, u32), String> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    let var = module
        .global_variables
        .iter()
        .map(|(_, v)| v)
        .find(|v| {
            v.space == naga::AddressSpace::Uniform && v.binding.as_ref().is_some_and(|b| b.group == 0 && b.binding == 0)
        })
        .ok_or("no uniform at binding 0")?;
    let naga::TypeInner::Struct { members, span } = &module.types[var.ty].inner else {
        return Err("the uniform at binding 0 is not a struct".into());
    };
    let mut fields = Vec::new();
    for m in members {
        let name = m.name.clone().unwrap_or_default();
        let scalar = match module.types[m.ty].inner {
            naga::TypeInner::Scalar(naga::Scalar {
                kind: naga::ScalarKind::Uint,
                width: 4,
            }) => Scalar::U32,
            naga::TypeInner::Scalar(naga::Scalar {
                kind: naga::ScalarKind::Float,
                width: 4,
            }) => Scalar::F32,
            ref t => return Err(format!("{name}: {t:?} (params are u32 or f32)")),
        };
        // Leaked: FieldInfo holds static names, and the test runs once.
        fields.push((&*Box::leak(name.into_boxed_str()), m.offset, scalar));
    }
    Ok((fields, *span))
}

/// The fields of `struct <name> { ... };` in a CUDA program: `u32 a, b;` / `float s;`
/// declarations, comments dropped, names with their scalar types in order.
fn cuda_params(program: &str, name: &str) -> Result<Vec<(String, Scalar)>, String> {
    let open = format!("struct {name} {{");
    let start = program.find(&open).ok_or(format!("no `{open}`"))? + open.len();
    let len = program[start..].find("};").ok_or(format!("{name}: no `}};`"))?;
    let body: String = program[start..start + len]
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ");
    let mut fields = Vec::new();
    for decl in body.split(';').map(str::trim).filter(|d| !d.is_empty()) {
        let (ty, names) = decl
            .split_once(char::is_whitespace)
            .ok_or(format!("{name}: `{decl}`"))?;
        let scalar = match ty {
            "u32" => Scalar::U32,
            "float" => Scalar::F32,
            t => return Err(format!("{name}: field type {t} (params are u32 or float)")),
        };
        for n in names.split(',') {
            fields.push((n.trim().to_string(), scalar));
        }
    }
    Ok(fields)
}

/// The NVRTC program of `k`, as `cuda::source::program` concatenates it.
fn cuda_program(k: Kernel) -> String {
    let mut s: String = CUDA_HEADERS.iter().map(|(_, src)| *src).collect::<Vec<_>>().join("\n");
    s += "\n";
    s += k.info().cuda;
    s
}

#[test]
fn rust_params_are_4_byte_fields_back_to_back() {
    for k in Kernel::ALL {
        let p = &k.info().params;
        for (i, &(name, off, _)) in p.fields.iter().enumerate() {
            assert_eq!(off, 4 * i as u32, "{}: {name}", p.name);
        }
    }
}

#[test]
fn cuda_params_structs_match_the_rust_ones() {
    for k in Kernel::ALL {
        let p = &k.info().params;
        let got = cuda_params(&cuda_program(k), p.name).unwrap_or_else(|e| panic!("{}.cu: {e}", k.name()));
        let want: Vec<(String, Scalar)> = p.fields.iter().map(|&(n, _, s)| (n.to_string(), s)).collect();
        assert_eq!(got, want, "{}.cu: struct {}", k.name(), p.name);
        assert!(
            k.info().cuda.contains(&format!("params<{}>(p)", p.name))
                || CUDA_HEADERS
                    .iter()
                    .any(|(_, h)| h.contains(&format!("params<{}>(p)", p.name))),
            "{}.cu reads its parameters as {}",
            k.name(),
            p.name
        );
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn wgsl_params_structs_match_the_rust_ones() {
    use crate::backend::gpu::kernels::all_variants;
    use crate::backend::wgpu::shaders::WgslSource;
    for v in all_variants() {
        let name = v.name();
        let src = v.source().unwrap_or_else(|| panic!("{name}: no source"));
        let (fields, span) = wgsl_params(&src).unwrap_or_else(|e| panic!("{name}: {e}"));
        let p = &v.kernel.info().params;
        assert_eq!(fields, p.fields, "{name}: WGSL `struct Params` vs {}", p.name);
        assert_eq!(span, 4 * p.fields.len() as u32, "{name}: size of Params");
    }
}

/// The scan itself: a struct with comments and grouped declarations.
#[test]
fn cuda_struct_scan_reads_grouped_fields() {
    let src = "struct X {\n    u32 a, b; // two\n    float s;\n    u32 _pad0;\n};\nstruct Y {};";
    let f = cuda_params(src, "X").unwrap();
    let names: Vec<&str> = f.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["a", "b", "s", "_pad0"]);
    assert_eq!(f[2].1, Scalar::F32);
    assert!(cuda_params(src, "Z").is_err());
}
