//! Every WGSL variant through naga, without a GPU: parsed, validated with exactly the
//! capabilities wgpu would grant it, and translated for Metal, DX12 and Vulkan.

use minfer::quant::QType;
use minfer::testing::gpu::all_variants;
use minfer::testing::gpu::Kernel;
use minfer::testing::wgpu::{quant_source, Coop, WgslSource};

tests![
    shaders_validate_and_translate,
    every_weight_qtype_but_activation_formats_has_a_kernel,
];

/// Every variant parses and validates with exactly the capabilities wgpu would grant it, and
/// translates to MSL (Metal), HLSL (DX12) and SPIR-V (Vulkan) after override resolution; each
/// with the integer f16 decode and with the hardware one (`unpack2x16float`), and the probe
/// that decides between them.
fn shaders_validate_and_translate() {
    use naga::back::{hlsl, msl, spv};
    use naga::valid::{Capabilities, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator};
    let variants = all_variants();
    assert!(variants.len() > 60, "{} variants", variants.len());
    let mut failures = Vec::new();
    let probe = minfer::testing::wgpu::f16_probe_source();
    if let Err(e) = naga::front::wgsl::parse_str(&probe)
        .map_err(|e| e.emit_to_string(&probe))
        .and_then(|m| {
            Validator::new(ValidationFlags::all(), Capabilities::SHADER_FLOAT16_IN_FLOAT32)
                .validate(&m)
                .map_err(|e| e.emit_to_string(&probe))
        })
    {
        failures.push(format!("f16 probe: {e}"));
    }
    // Each variant with f16 decoded in software and in hardware; the matvecs also with their
    // f32 matmuls for quantized weights (`WgpuOptions::int8_matmul` off); the tiled matmul also
    // on cooperative matrices (`WgpuOptions::coop_matmul`): 8 × 8 f32, 16 × 16 f16 and the
    // latter's scalar emulation, as the prefill attention over an f16 or q8_0 cache on the f16
    // ones; with the cooperative-matrix probes (as `None`).
    let builds = variants.into_iter().flat_map(|v| {
        let w = &v.kernel.info().wgsl;
        let f32_rows = w.tail_i8.is_some() || w.body_i8.is_some();
        let coops = match (w.body_coop, w.body_coop16.filter(|_| v.takes_coop_f16())) {
            (Some(_), _) => vec![Coop::F32x8, Coop::F16x16, Coop::F16x16Emulated],
            (None, Some(_)) => vec![Coop::F16x16, Coop::F16x16Emulated],
            (None, None) => vec![],
        };
        [(v, false, true, Coop::Off), (v, true, true, Coop::Off)]
            .into_iter()
            .chain(f32_rows.then_some((v, false, false, Coop::Off)))
            .chain(coops.into_iter().map(move |c| (v, false, true, c)))
    });
    let builds = builds.map(|(v, f16_hw, int8, coop)| {
        let name = format!(
            "{}{}{}{}",
            v.name(),
            if f16_hw { " (f16 in hardware)" } else { "" },
            if int8 { "" } else { " (f32 rows)" },
            if coop == Coop::Off {
                String::new()
            } else {
                format!(" ({coop:?})")
            }
        );
        let src = v
            .source_with(f16_hw, int8, coop)
            .unwrap_or_else(|| panic!("{name}: no source"));
        (Some(v), name, src, f16_hw)
    });
    let probes = [Coop::F16x16, Coop::F16x16Emulated].into_iter().flat_map(|c| {
        let emulated = c == Coop::F16x16Emulated;
        [
            (
                None,
                format!("cooperative matrix probe ({c:?})"),
                minfer::testing::wgpu::coop16_probe_source(emulated),
                false,
            ),
            (
                None,
                format!("cooperative matrix attention probe ({c:?})"),
                minfer::testing::wgpu::attention16_probe_source(emulated),
                false,
            ),
        ]
    });
    let coop8 = (
        None,
        "cooperative matrix probe (F32x8)".to_string(),
        minfer::testing::wgpu::COOP_PROBE.to_string(),
        false,
    );
    for (v, name, src, f16_hw) in builds.chain(probes).chain([coop8]) {
        // What the module asks for, as wgpu grants it: cooperative matrices (with subgroups),
        // f16 shaders.
        let matrices = src.contains("enable wgpu_cooperative_matrix;");
        let halves = src.contains("enable f16;");
        let subgroups = v.is_some_and(|v| v.subgroups) || matrices;
        let module = match naga::front::wgsl::parse_str(&src) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{name}: {}", e.emit_to_string(&src)));
                continue;
            }
        };
        // wgpu grants unpack2x16float with DownlevelFlags::SHADER_F16_IN_F32.
        let mut caps = if subgroups {
            Capabilities::SUBGROUP
        } else {
            Capabilities::empty()
        };
        if f16_hw {
            caps |= Capabilities::SHADER_FLOAT16_IN_FLOAT32;
        }
        if matrices {
            caps |= Capabilities::COOPERATIVE_MATRIX;
        }
        if halves {
            caps |= Capabilities::SHADER_FLOAT16;
        }
        let mut val = Validator::new(ValidationFlags::all(), caps);
        if subgroups {
            val.subgroup_stages(ShaderStages::COMPUTE)
                .subgroup_operations(SubgroupOperationSet::all());
        }
        let info = match val.validate(&module) {
            Ok(i) => i,
            Err(e) => {
                failures.push(format!("{name}: {}", e.emit_to_string(&src)));
                continue;
            }
        };
        let constants: naga::back::PipelineConstants = v
            .map(|v| v.constants())
            .unwrap_or_default()
            .into_iter()
            .map(|(k, x)| (k.to_string(), x))
            .collect();
        let ep = Some((naga::ShaderStage::Compute, "main"));
        let (module, info) = naga::back::pipeline_constants::process_overrides(&module, &info, ep, &constants)
            .unwrap_or_else(|e| panic!("{name}: overrides: {e}"));
        let entry = Some((naga::ShaderStage::Compute, "main".to_string()));
        // Metal's simdgroup matrices need MSL 2.3; they are 8 × 8, so the 16 × 16 tile is
        // Vulkan's alone.
        let msl_opts = msl::Options {
            lang_version: if matrices { (2, 3) } else { (2, 1) },
            ..Default::default()
        };
        let msl_pipe = msl::PipelineOptions {
            entry_point: entry.clone(),
            ..Default::default()
        };
        if src.contains("coop_mat16x16") {
        } else if let Err(e) = msl::write_string(&module, &info, &msl_opts, &msl_pipe) {
            failures.push(format!("{name}: MSL: {e}"));
        }
        // No cooperative matrices on DX12.
        let hlsl_opts = hlsl::Options {
            shader_model: if subgroups {
                hlsl::ShaderModel::V6_0
            } else {
                hlsl::ShaderModel::V5_1
            },
            ..Default::default()
        };
        let hlsl_pipe = hlsl::PipelineOptions {
            entry_point: entry.clone(),
        };
        let mut out = String::new();
        if matrices {
        } else if let Err(e) = hlsl::Writer::new(&mut out, &hlsl_opts, &hlsl_pipe).write(&module, &info, None) {
            failures.push(format!("{name}: HLSL: {e}"));
        }
        // wgpu-hal's Vulkan capability list: the core set, plus GroupNonUniform* with subgroups.
        let mut spv_caps: naga::FastHashSet<spv::Capability> = [
            spv::Capability::Shader,
            spv::Capability::Matrix,
            spv::Capability::Sampled1D,
            spv::Capability::Image1D,
            spv::Capability::ImageQuery,
            spv::Capability::DerivativeControl,
            spv::Capability::StorageImageExtendedFormats,
        ]
        .into_iter()
        .collect();
        if halves {
            spv_caps.extend([spv::Capability::Float16, spv::Capability::StorageBuffer16BitAccess]);
        }
        if matrices {
            spv_caps.extend([
                spv::Capability::CooperativeMatrixKHR,
                spv::Capability::VulkanMemoryModel,
                spv::Capability::VulkanMemoryModelDeviceScope,
            ]);
        }
        if subgroups {
            spv_caps.extend([
                spv::Capability::GroupNonUniform,
                spv::Capability::GroupNonUniformVote,
                spv::Capability::GroupNonUniformArithmetic,
                spv::Capability::GroupNonUniformBallot,
                spv::Capability::GroupNonUniformShuffle,
                spv::Capability::GroupNonUniformShuffleRelative,
                spv::Capability::GroupNonUniformQuad,
            ]);
        }
        let spv_opts = spv::Options {
            lang_version: (1, 3),
            capabilities: Some(spv_caps),
            ..Default::default()
        };
        let spv_pipe = spv::PipelineOptions {
            shader_stage: naga::ShaderStage::Compute,
            entry_point: "main".into(),
        };
        if let Err(e) = spv::write_vec(&module, &info, &spv_opts, Some(&spv_pipe)) {
            failures.push(format!("{name}: SPIR-V: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The gate's qtype list and the shader files agree: each kernel type has a quant file.
fn every_weight_qtype_but_activation_formats_has_a_kernel() {
    for q in QType::ALL {
        let has = quant_source(q).is_some();
        assert_eq!(has, !matches!(q, QType::Q8_1 | QType::Q8K), "{q}");
    }
    assert!(Kernel::ALL.iter().all(|k| !k.bindings().is_empty()));
}
